"""``date_constants`` (dpsql.rewrite.date_constants): a date column compared
with ``DATE 'x' ± INTERVAL 'n' UNIT`` is compared with the date it stands for, and the
comparison keeps its truth on every row (DuckDB, and PostgreSQL when
``DPSQL_TEST_POSTGRES_ADMIN_URL`` is set)."""

from __future__ import annotations

import datetime
import importlib
import os

import duckdb
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.engine import _demo_plan
from dpsql.rewrite import rewrite
from dpsql.rewrite.statistics_query import statistics_query

module = importlib.import_module("dpsql.rewrite.date_constants")

CASES = [  # (WHERE as written, as rewritten; None: unchanged)
    ("o_orderdate < DATE '1994-01-01' + INTERVAL '1' YEAR",
     "o_orderdate < CAST('1995-01-01' AS DATE)"),
    ("o_orderdate >= DATE '1998-12-01' - INTERVAL '90' DAY",
     "o_orderdate >= CAST('1998-09-02' AS DATE)"),
    ("INTERVAL '3' MONTH + DATE '1993-11-15' > o_orderdate",
     "CAST('1994-02-15' AS DATE) > o_orderdate"),
    ("o_orderdate BETWEEN DATE '1995-01-01' AND DATE '1995-01-01' + INTERVAL 2 WEEK",
     "o_orderdate BETWEEN CAST('1995-01-01' AS DATE) AND CAST('1995-01-15' AS DATE)"),
    ("o_orderdate < DATE '1994-01-31' + INTERVAL '1' MONTH", None),  # a month end
    ("o_orderdate < DATE '1994-01-01' + INTERVAL '1' HOUR", None),  # not midnight
    ("o_orderdate < DATE '1994-01-01' + INTERVAL '1 year'",  # sqlglot reads '1' YEAR
     "o_orderdate < CAST('1995-01-01' AS DATE)"),
    ("o_clerk < DATE '1994-01-01' + INTERVAL '1' YEAR", None),  # a string column
]


@pytest.mark.parametrize(("where", "expected"), CASES)
def test_golden(where, expected):
    plan = _demo_plan(f"SELECT COUNT(*) FROM orders WHERE {where}", catalog="tpch")
    out = module.date_constants(statistics_query(plan), plan).args["where"].this.sql()
    want = sqlglot.parse_one(f"SELECT 1 WHERE {expected or where}").args["where"].this.sql()
    assert out == want


def test_derived_tables_are_left_alone():
    plan = _demo_plan("SELECT n, COUNT(*) FROM (SELECT o_custkey, COUNT(*) AS n FROM orders "
                      "WHERE o_orderdate < DATE '1994-01-01' + INTERVAL '1' YEAR "
                      "GROUP BY o_custkey) AS t GROUP BY n", catalog="tpch")
    assert "INTERVAL" in rewrite(plan).sql()


def test_tpch_q6_loses_its_comparison_guard():
    """The reason for the pass: the backend no longer guards the comparison."""
    from dpsql.backends.duckdb import DuckDBBackend  # noqa: F401  (the engine's own)
    plan = _demo_plan("SELECT SUM(l_extendedprice * l_discount) FROM lineitem WHERE "
                      "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1994-01-01' "
                      "+ INTERVAL '1' YEAR", catalog="tpch")
    sql = rewrite(plan).sql(dialect="duckdb")
    assert "INTERVAL" not in sql and "l_shipdate < CAST('1995-01-01' AS DATE)" in sql


OPS = ("=", "<>", "<", "<=", ">", ">=")
UNITS = ("DAY", "WEEK", "MONTH", "YEAR")
dates = st.dates(datetime.date(1, 1, 1), datetime.date(9999, 12, 31))


def _folded(op, base, n, unit, sign):
    sql = (f"SELECT 1 FROM t WHERE d {op} DATE '{base.isoformat()}' {sign} "
           f"INTERVAL '{n}' {unit}")
    tree = sqlglot.parse_one(sql, read="duckdb")
    day = module._date_of(tree.args["where"].this.expression)
    return sql, day


def _engines():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (d DATE, ts TIMESTAMP)")
    out = [("duckdb", con)]
    url = os.environ.get("DPSQL_TEST_POSTGRES_ADMIN_URL")
    if url:
        import sqlalchemy

        pg = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT").connect()
        pg.exec_driver_sql("CREATE TEMPORARY TABLE t (d DATE, ts TIMESTAMP)")
        out.append(("postgres", pg))
    return out


ENGINES = _engines()


def _rows(name, con, sql):
    if name == "duckdb":
        return con.execute(sql).fetchall()
    return [tuple(r) for r in con.exec_driver_sql(sql).fetchall()]


@settings(max_examples=150, deadline=None)
@given(op=st.sampled_from(OPS), base=dates, n=st.integers(0, 400),
       unit=st.sampled_from(UNITS), sign=st.sampled_from("+-"),
       shifts=st.lists(st.integers(-3, 3), min_size=1, max_size=4))
def test_same_truth_on_dates_and_timestamps(op, base, n, unit, sign, shifts):
    sql, day = _folded(op, base, n, unit, sign)
    if day is None:
        # left alone: a month end to clamp, or a date outside years 1..9999
        assert (unit in ("MONTH", "YEAR") and base.day > 28) or n > 0
        return
    rows = []
    for s in shifts:
        try:
            d = day + datetime.timedelta(days=s)
        except OverflowError:
            continue
        rows.append((d, datetime.datetime.combine(d, datetime.time(0))))
        rows.append((d, datetime.datetime.combine(d, datetime.time(23, 59, 59))))
    for name, con in ENGINES:
        if name == "postgres" and day.year < 2:
            continue  # PostgreSQL's year 1 arithmetic is BC-aware; nothing to compare
        _execute(name, con, "DELETE FROM t")
        for d, ts in rows:
            _execute(name, con, f"INSERT INTO t VALUES (DATE '{d.isoformat()}', "
                                f"TIMESTAMP '{ts.isoformat(sep=' ')}')")
        folded = f"DATE '{day.isoformat()}'"
        original = sql.split(f"d {op} ", 1)[1]
        for column in ("d", "ts"):
            a, b = (_rows(name, con, sqlglot.transpile(
                f"SELECT {column} FROM t WHERE {column} {op} {right} ORDER BY 1",
                read="duckdb", write=name)[0]) for right in (original, folded))
            assert a == b, (name, column, sql, day)


def _execute(name, con, sql):
    if name == "duckdb":
        con.execute(sql)
    else:
        con.exec_driver_sql(sql)


def test_a_date_before_year_1000_is_written_with_four_digits(tmp_path):
    """SQLite reads DATE('999-01-02') as NULL: the folded constant is written
    '0999-01-02' (dpsql.sqlbuild.constant), and the rows stay (attack review)."""
    import sqlite3

    import dpsql

    path = tmp_path / "d.sqlite"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE t (pid INTEGER, d DATE)")
    raw.executemany("INSERT INTO t VALUES (?, ?)", [(i, "2000-01-01") for i in range(200)])
    raw.commit()
    raw.close()
    catalog = {"tables": {"t": {"row_privacy": True, "columns": {
        "pid": {"type": "int"}, "d": {"type": "date"}}}}}
    with dpsql.connect(f"sqlite:///{path}", catalog=catalog, budget=(1e9, 0.5),
                       ledger=":memory:") as conn:
        res = conn.execute("SELECT COUNT(*) FROM t WHERE d > DATE '0999-01-01' + "
                           "INTERVAL '1' DAY", epsilon=100.0)
    assert "0999-01-02" in res.sql and res.rows[0][0] > 150, (res.rows, res.sql)


def test_only_date_columns_are_folded_and_sqlite_keeps_their_day(tmp_path):
    """A TIMESTAMP column is left alone (it is not cast, so nothing is gained, and SQLite
    compares timestamp text with date text as longer); a DATE column is folded, and
    SQLite, comparing date text with date text, keeps the rows of that day for every
    comparison."""
    import sqlite3

    import dpsql

    path = tmp_path / "ts.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (uid INTEGER, d DATE, ts TIMESTAMP)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)",
                    [(i, "1994-01-10", "1994-01-10 00:00:00") for i in range(5)])
    con.commit()
    con.close()
    catalog = {"tables": {"t": {"user_key": "uid", "max_rows": 1, "columns": {
        "uid": {"type": "int"}, "d": {"type": "date"}, "ts": {"type": "timestamp"}}}}}
    with dpsql.connect(f"sqlite:///{path}", catalog=catalog, budget=(1000, 1e-6),
                       ledger=":memory:") as conn:
        for op in ("<=", "=", ">="):
            folded = conn.explain(f"SELECT COUNT(*) FROM t WHERE ts {op} DATE '1994-01-01' "
                                  "+ INTERVAL '9' DAY", epsilon=1).sql
            assert "1994-01-01" in folded and "1994-01-10" not in folded
            sql = f"SELECT COUNT(*) FROM t WHERE d {op} DATE '1994-01-01' + INTERVAL '9' DAY"
            assert "'1994-01-10'" in conn.explain(sql, epsilon=1).sql
            # discrete Laplace of scale 1/50: 0 with probability 1 - 4e-22
            assert conn.execute(sql, epsilon=50).rows[0][0] == 5, op
