"""What SQL dpsql answers and what it refuses, checked here and rendered into README.

The README's table between the ``support-matrix`` markers is generated from
:data:`CASES` by :func:`render`; the test fails when the two differ, so the table
cannot drift. Regenerate with ``DPSQL_REGEN_README=1 pytest tests/test_support_matrix.py``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

import dpsql
from dpsql.datasets import catalog_path, load_tpch, pums_catalog

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- support-matrix:start -->", "<!-- support-matrix:end -->"

OK = "answered"
# (feature, SQL, OK or (error class, what the message says))
CASES = [
    ("counts, sums, averages", "SELECT COUNT(*), SUM(income), AVG(age) FROM pums", OK),
    ("COUNT(DISTINCT user key)", "SELECT COUNT(DISTINCT pid) FROM pums_dup", OK),
    ("VARIANCE, STDDEV", "SELECT sex, VAR_POP(age), STDDEV(income) FROM pums GROUP BY sex",
     OK),
    ("expressions in aggregates (bounds by interval arithmetic)",
     "SELECT SUM(CASE WHEN age > 60 THEN income * 0.5 ELSE 0 END) FROM pums", OK),
    ("GROUP BY a public domain (all keys, empty ones too)",
     "SELECT race, COUNT(*) FROM pums GROUP BY race", OK),
    ("GROUP BY a bounded int column (public: every whole number of its bounds)",
     "SELECT age, COUNT(*) FROM pums GROUP BY age", OK),
    ("WHERE over public keys restricts the keys released",
     "SELECT race, COUNT(*) FROM pums WHERE race IN (1, 2) GROUP BY race", OK),
    ("GROUP BY keys from the data (partition selection, needs delta)",
     "SELECT income // 10000 AS bracket, COUNT(*) FROM pums GROUP BY bracket", OK),
    ("HAVING, ORDER BY, LIMIT, arithmetic over aggregates (post-processing)",
     "SELECT sex, SUM(income) / COUNT(*) AS mean FROM pums GROUP BY sex "
     "HAVING COUNT(*) > 10 ORDER BY mean DESC LIMIT 1", OK),
    ("JOIN a public table", "SELECT n_name, COUNT(*) FROM customer JOIN nation "
     "ON c_nationkey = n_nationkey GROUP BY n_name", OK),
    ("JOIN along the foreign-key path to the user",
     "SELECT l_returnflag, SUM(l_quantity) FROM orders JOIN lineitem "
     "ON o_orderkey = l_orderkey GROUP BY l_returnflag", OK),
    ("comma joins with WHERE equalities",
     "SELECT SUM(l_extendedprice) FROM customer, orders, lineitem "
     "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey", OK),
    ("subquery / CTE aggregating per user",
     "WITH t AS (SELECT pid, COUNT(*) AS n FROM pums_dup GROUP BY pid) "
     "SELECT n, COUNT(*) FROM t GROUP BY n", OK),
    ("subquery / CTE that filters and projects rows (written out: the same rows)",
     "WITH adults AS (SELECT sex, age FROM pums WHERE age >= 18) SELECT sex, COUNT(*) "
     "FROM adults GROUP BY sex", OK),
    ("schema probe: no rows whatever the data (catalog columns, free)",
     'SELECT * FROM "pums" WHERE 1=0', OK),
    ("IN (SELECT ...) over a public table",
     "SELECT COUNT(*) FROM lineitem WHERE l_partkey IN (SELECT p_partkey FROM part "
     "WHERE p_size < 10)", OK),
    ("scalar functions on keys and in WHERE (CASE, string, date parts)",
     "SELECT CASE WHEN age < 30 THEN 'young' ELSE 'older' END AS grp, COUNT(*) FROM pums "
     "WHERE UPPER(CAST(sex AS VARCHAR)) = '1' GROUP BY grp", OK),
    ("date keys over bounded dates (public: every month of the bounds)",
     "SELECT date_trunc('month', o_orderdate) AS m, COUNT(*) FROM orders GROUP BY m", OK),
    ("keys the user determines (one group per user, no max_groups window)",
     "SELECT n_name, COUNT(*) FROM customer JOIN orders ON c_custkey = o_custkey "
     "JOIN nation ON c_nationkey = n_nationkey GROUP BY n_name", OK),
    ("a date column summed as a number", "SELECT SUM(o_orderdate) FROM orders",
     (dpsql.UnboundedExpressionError, "cannot be aggregated as a number")),
    ("BigQuery's DIFFERENTIAL_PRIVACY OPTIONS",
     "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5) COUNT(*) FROM pums", OK),
    ("SELECT * (raw rows)", "SELECT * FROM pums",
     (dpsql.UnsupportedQueryError, "SELECT * would release raw rows")),
    ("a non-aggregate column", "SELECT age FROM pums",
     (dpsql.UnsupportedQueryError, "must appear in GROUP BY or inside an aggregate")),
    ("SELECT DISTINCT", "SELECT DISTINCT age FROM pums",
     (dpsql.UnsupportedQueryError, "SELECT DISTINCT would release raw values")),
    ("SUM of a column without bounds", "SELECT SUM(pid) FROM pums",
     (dpsql.UnboundedExpressionError, "has no lower/upper bounds")),
    ("COUNT(DISTINCT another column), at most max_rows values per user",
     "SELECT sex, COUNT(DISTINCT age) FROM pums_dup GROUP BY sex", OK),
    ("COUNT(DISTINCT) of several columns", "SELECT COUNT(DISTINCT age, sex) FROM pums",
     (dpsql.UnsupportedQueryError, "takes one expression")),
    ("MEDIAN, PERCENTILE_CONT, QUANTILE_CONT, MIN, MAX (DP quantiles)",
     "SELECT sex, MEDIAN(income), MIN(age), MAX(age) FROM pums GROUP BY sex", OK),
    ("a quantile that is not a number literal",
     "SELECT QUANTILE_CONT(income, age / 100) FROM pums",
     (dpsql.UnsupportedQueryError, "number literal between 0 and 1")),
    ("a join that could mix two users",
     "SELECT COUNT(*) FROM pums a JOIN pums_dup b ON a.age = b.age",
     (dpsql.UnsupportedQueryError, "without matching their users")),
    ("cross joins", "SELECT COUNT(*) FROM pums, pums_dup",
     (dpsql.UnsupportedQueryError, "cross joins")),
    ("RIGHT / FULL joins", "SELECT COUNT(*) FROM nation RIGHT JOIN customer "
     "ON n_nationkey = c_nationkey", (dpsql.UnsupportedQueryError, "RIGHT JOIN")),
    ("a derived table not grouped by the user",
     "SELECT AVG(n) FROM (SELECT age, COUNT(*) AS n FROM pums GROUP BY age) t",
     (dpsql.UnsupportedQueryError, "must GROUP BY the user key")),
    ("scalar subqueries, EXISTS", "SELECT COUNT(*) FROM pums WHERE age > (SELECT 1 FROM "
     "nation)", (dpsql.UnsupportedQueryError, "scalar subqueries")),
    ("window functions", "SELECT COUNT(*) OVER () FROM pums",
     (dpsql.UnsupportedQueryError, "window")),
    ("ORDER BY / LIMIT inside the private part",
     "SELECT AVG(n) FROM (SELECT pid, COUNT(*) AS n FROM pums GROUP BY pid ORDER BY n "
     "LIMIT 3) t", (dpsql.UnsupportedQueryError, "inside a derived table")),
    ("files and table functions", "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
     (dpsql.UnsupportedQueryError, "table function")),
    ("several statements", "SELECT COUNT(*) FROM pums; DROP TABLE pums",
     (dpsql.UnsupportedQueryError, "several statements")),
    ("writes, settings, ATTACH", "ATTACH 'x.db'",
     (dpsql.UnsupportedQueryError, "only a single SELECT")),
]


def _reason(expected) -> str:
    if expected == OK:
        return "answered"
    cls, message = expected
    return f"refused: {cls.__name__} ({message.replace('|', '/')})"


def render() -> str:
    """The markdown table of :data:`CASES`."""
    lines = ["| feature | example | outcome |", "|---|---|---|"]
    for feature, sql, expected in CASES:
        shown = sql if len(sql) <= 90 else sql[:87] + "..."
        lines.append(f"| {feature} | `{shown}` | {_reason(expected)} |")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def conn(tmp_path_factory, pums_file):
    tpch = tmp_path_factory.mktemp("matrix") / "tpch.duckdb"
    load_tpch(tpch, scale=0.01)
    import duckdb

    con = duckdb.connect(str(tpch))
    con.execute(f"ATTACH '{pums_file}' AS p (READ_ONLY)")
    for table in ("pums", "pums_dup"):
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM p.{table}")
    con.close()
    tables = {**pums_catalog().tables, **dpsql.load_catalog(catalog_path("tpch")).tables}
    catalog = dataclasses.replace(pums_catalog(), tables=tables, budget=None)
    connection = dpsql.connect(tpch, catalog=catalog, budget=(1e6, 1e-2), ledger=":memory:")
    yield connection
    connection.close()


@pytest.mark.parametrize(("feature", "sql", "expected"), CASES, ids=[c[0] for c in CASES])
def test_case(conn, feature, sql, expected):
    before = conn.budget.spent
    if expected == OK:
        assert isinstance(conn.execute(sql, epsilon=1.0, delta=1e-6), dpsql.Result)
        return
    cls, message = expected
    with pytest.raises(cls) as info:
        conn.execute(sql, epsilon=1.0, delta=1e-6)
    assert message in str(info.value)
    assert conn.budget.spent == before


def test_readme_table_is_current():
    text = README.read_text()
    assert START in text and END in text, "README lacks the support-matrix markers"
    head, rest = text.split(START)
    _, tail = rest.split(END)
    table = f"{START}\n{render()}\n{END}"
    if os.environ.get("DPSQL_REGEN_README") == "1":
        README.write_text(head + table + tail)
        return
    assert f"{START}{rest.split(END)[0]}{END}" == table
