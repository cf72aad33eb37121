"""A column clamped by comparisons (:func:`dpsql.sqlbuild.clamp_column`) is the column
clamped by ``LEAST(GREATEST(...))`` (:func:`dpsql.sqlbuild.clamp`): the same values and
the same type, for every non-NULL value, on every engine that runs dpsql's SQL."""

from __future__ import annotations

import itertools
import math
import os
import sqlite3

import duckdb
import pytest
from sqlglot import exp

from dpsql.sqlbuild import clamp, clamp_column

TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "UBIGINT",
         "DECIMAL(4,2)", "DECIMAL(15,2)", "DECIMAL(38,10)", "FLOAT", "DOUBLE")
BOUNDS = ((0, 500000), (-1000, 10000), (0, 0.1), (-0.5, 2.5), (0, 1e300),
          (-9223372036854775808, 9223372036854775807))
VALUES = ("-1e30", "-1001", "-0.5", "0", "0.05", "1", "2.5", "99", "10001", "1e30", "'nan'",
          "'inf'", "'-inf'")


def _both(lower, upper, dialect="duckdb"):
    x = exp.column("x")
    return (clamp(x, lower, upper).sql(dialect=dialect),
            clamp_column(x, lower, upper).sql(dialect=dialect))


@pytest.mark.parametrize("type_name", TYPES)
def test_same_values_and_type_on_duckdb(type_name):
    con = duckdb.connect()
    values = []
    for v in VALUES:  # the values this type can hold
        try:
            values.append(con.execute(f"SELECT TRY_CAST({v} AS {type_name})").fetchone()[0])
        except duckdb.Error:
            continue
    con.execute(f"CREATE TABLE t (x {type_name})")
    con.executemany("INSERT INTO t VALUES (?)", [[v] for v in values if v is not None])
    for lower, upper in BOUNDS:
        old, new = _both(lower, upper)
        a = con.execute(f"SELECT {old}, typeof({old}) FROM t ORDER BY x").fetchall()
        b = con.execute(f"SELECT {new}, typeof({new}) FROM t ORDER BY x").fetchall()
        assert [(_same(v), t) for v, t in a] == [(_same(v), t) for v, t in b], (lower, upper)
        assert a  # the table holds values


def _same(v):
    return "nan" if isinstance(v, float) and math.isnan(v) else v


def test_same_values_on_sqlite():
    """SQLite: numbers, and text and blobs (which sort above numbers) in a column of
    any affinity."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (x INTEGER)")
    rows = [-1e30, -1001, -0.5, 0, 1, 2.5, 99, 10001, 1e30, "abc", "12", b"\x00"]
    con.executemany("INSERT INTO t VALUES (?)", [(v,) for v in rows])
    for lower, upper in BOUNDS:
        old, new = _both(lower, upper, "sqlite")
        a = con.execute(f"SELECT {old}, typeof({old}) FROM t ORDER BY rowid").fetchall()
        b = con.execute(f"SELECT {new}, typeof({new}) FROM t ORDER BY rowid").fetchall()
        assert a == b, (lower, upper)


def test_null_stays_null():
    con = duckdb.connect()
    new = _both(0, 10)[1]
    assert con.execute(f"SELECT {new} FROM (SELECT NULL::INTEGER AS x)").fetchone() == (None,)


@pytest.mark.skipif(not os.environ.get("DPSQL_TEST_POSTGRES_ADMIN_URL"),
                    reason="no PostgreSQL (DPSQL_TEST_POSTGRES_ADMIN_URL unset)")
@pytest.mark.parametrize("type_name", ("integer", "bigint", "numeric", "numeric(15,2)",
                                       "double precision", "real"))
def test_same_values_and_type_on_postgres(type_name):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine(os.environ["DPSQL_TEST_POSTGRES_ADMIN_URL"])
    values = ["-1001", "-0.5", "0", "1", "2.5", "99", "10001", "'NaN'", "'Infinity'"]
    with engine.connect() as pg:
        pg.exec_driver_sql(f"CREATE TEMPORARY TABLE t (x {type_name})")
        for v in values:
            try:
                with pg.begin_nested():
                    pg.exec_driver_sql(f"INSERT INTO t VALUES ({v})")
            except sqlalchemy.exc.DBAPIError:
                continue
        for lower, upper in itertools.islice(BOUNDS, 4):
            old, new = _both(lower, upper, "postgres")
            a = pg.exec_driver_sql(f"SELECT {old}, pg_typeof({old}) FROM t ORDER BY x").all()
            b = pg.exec_driver_sql(f"SELECT {new}, pg_typeof({new}) FROM t ORDER BY x").all()
            assert [(_same(v), t) for v, t in a] == [(_same(v), t) for v, t in b], (lower, upper)
            assert a
