"""A summed value is clamped into its bounds even where the engine's guards turn a failing
comparison into NULL (attack review of a CASE-form clamp, issue #23).

``CASE WHEN x < L THEN L WHEN x > U THEN U ELSE x END`` was tried as a faster clamp of a
column. On DuckDB ``x > U`` compares a ``DECIMAL(38, s)`` column in ``DECIMAL(38,
scale(U))`` and overflows for a huge ``x``; the backend guards that comparison alone
(``TRY(x > U)``: NULL), the CASE fell through to ``ELSE x``, and the row added its raw
value (1e28 released where the bound was 1/3). ``LEAST(GREATEST(x, L), U)`` adds ``U``
or nothing whatever its guards do, and stays. These queries must release a clamped sum.
"""

from __future__ import annotations

import duckdb
import pytest

import dpsql


@pytest.mark.parametrize(("sql_type", "upper", "big"), [
    ("DECIMAL(38,10)", 0.3333333333333333, "9999999999999999999999999999.9999999999"),
    ("DECIMAL(38,2)", 2.125, "123456789012345678901234567890123456.00"),
])
def test_a_huge_decimal_is_clamped(sql_type, upper, big):
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (pid INTEGER PRIMARY KEY, x {sql_type})")
    con.execute("INSERT INTO t SELECT i, 1 FROM range(100) r(i)")
    con.execute(f"INSERT INTO t VALUES (777, {big})")
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": 0, "upper": upper}}}}}
    with dpsql.connect(con, catalog=catalog, budget=(1e9, 0.5), ledger=":memory:") as conn:
        res = conn.execute("SELECT SUM(x) FROM t", epsilon=1e3)
    # 101 rows, each in [0, U] (the scale's rounding of U aside): noise of scale U/1000
    assert res.rows[0][0] < 101 * upper + 1, (res.rows, res.sql)


@pytest.mark.parametrize(("sql_type", "upper"), [("DECIMAL(38,0)", 0.5), ("DECIMAL(38,2)", 2.125)])
def test_a_bound_finer_than_the_column_is_not_rounded_outward(sql_type, upper):
    """DuckDB compares a DECIMAL(38, s) column with a decimal literal in the column's
    scale, so ``LEAST(x, 0.5)`` was ``LEAST(x, 1)`` on DECIMAL(38,0): each row added
    twice the bound the noise was calibrated for (attack review). Fractional bounds are
    DOUBLE literals now (dpsql.sqlbuild.number), and a row adds at most the bound."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (pid INTEGER PRIMARY KEY, x {sql_type})")
    con.execute("INSERT INTO t SELECT i, 7 FROM range(1000) r(i)")
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": 0, "upper": upper}}}}}
    with dpsql.connect(con, catalog=catalog, budget=(1e9, 0.5), ledger=":memory:") as conn:
        res = conn.execute("SELECT SUM(x) FROM t", epsilon=1e3)
    assert abs(res.rows[0][0] - 1000 * upper) < 1, (res.rows, res.sql)
