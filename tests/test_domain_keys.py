"""Review findings on public domains (key expressions, LEFT joins, the image cache).

Each answers at a huge epsilon and compares with DuckDB's exact answer on the same data,
or compares two plans that must not differ.
"""

from __future__ import annotations

import duckdb
import pytest

import dpsql
from dpsql.analyze import domains

CATALOG = {"dataset": "review", "tables": {
    "t": {"user_key": "uid", "max_groups": 1, "max_rows": 1, "columns": {
        "uid": {"type": "int"}, "age": {"type": "int", "lower": 0, "upper": 20}}},
    "v": {"user_key": "uid", "max_groups": 1, "max_rows": 1, "columns": {
        "uid": {"type": "int"}, "b": {"type": "int", "lower": 1, "upper": 5}}}}}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("review") / "review.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (uid INTEGER, age INTEGER)")
    con.execute("CREATE TABLE v (uid INTEGER, b INTEGER)")
    con.execute("INSERT INTO t SELECT i, i % 21 FROM range(1050) r(i)")
    # users 500 and up have no row in v: a LEFT JOIN NULL-extends them
    con.execute("INSERT INTO v SELECT i, 1 + i % 5 FROM range(500) r(i)")
    con.close()
    return path


def _exact(database, sql):
    conn = dpsql.connect(database, catalog=CATALOG, budget=(1e12, 0.5), ledger=":memory:")
    try:
        rows = conn.execute(sql, epsilon=1e8, delta=1e-6).rows
    finally:
        conn.close()
    order = lambda row: (row[0] is None, row[0] or 0)  # noqa: E731 - NULL last
    got = sorted(((k, round(n)) for k, n in rows if round(n) != 0), key=order)
    truth = duckdb.connect(str(database), read_only=True).execute(sql).fetchall()
    return got, sorted(truth, key=order)


@pytest.mark.parametrize("sql", [
    # the key written into the domain filter must keep its own brackets: DuckDB reads
    # `age < 5 IN (FALSE, TRUE)` as `age < (5 IN (...))`
    "SELECT age < 5 AS k, COUNT(*) FROM t GROUP BY age < 5",
    "SELECT age = 5 AS k, COUNT(*) FROM t GROUP BY age = 5",
    # a key over a LEFT-joined column takes the NULL-extended rows' value too
    "SELECT COALESCE(v.b, 0) AS k, COUNT(*) FROM t LEFT JOIN v ON t.uid = v.uid "
    "GROUP BY COALESCE(v.b, 0)",
    "SELECT v.b AS k, COUNT(*) FROM t LEFT JOIN v ON t.uid = v.uid GROUP BY v.b",
])
def test_public_keys_hold_what_the_data_holds(database, sql):
    got, truth = _exact(database, sql)
    assert got == truth


def test_whether_a_key_is_public_does_not_depend_on_earlier_queries(database):
    # the image cache is shared by the process; its hits are charged to the work limit
    # like evaluations, so another analyst's query cannot change this query's plan
    catalog = {**CATALOG, "limits": {"max_domain_work": 6_000_000}}
    sql = "SELECT age + 1 AS a, age + 2 AS b, COUNT(*) FROM t GROUP BY age + 1, age + 2"

    def plan():
        conn = dpsql.connect(database, catalog=catalog, budget=(1e12, 0.5),
                             ledger=":memory:")
        try:
            e = conn.explain(sql, epsilon=1.0, delta=1e-6)
            return e.cost, e.partition_selection is not None
        finally:
            conn.close()

    domains._cache.clear()
    fresh = plan()
    conn = dpsql.connect(database, catalog=catalog, budget=(1e12, 0.5), ledger=":memory:")
    conn.explain("SELECT age + 2 AS b, COUNT(*) FROM t GROUP BY age + 2", epsilon=1.0,
                 delta=1e-6)
    conn.close()
    assert plan() == fresh
