"""The L0 order and the distinct-value cap hash a value's canonical form.

Both keep a user's groups or values by a keyed hash of the value, read from a GROUP BY,
which keeps whichever of its equal values it met first. PostgreSQL spells some equal
values differently (``-0`` and ``0``; NUMERIC ``1.0`` and ``1.00``), and SQLite holds
equal values as INTEGER and REAL in a NUMERIC column (``-2^63``). Hashed as spelled, the
choice depended on the rows' storage order, and every user holding both spellings
flipped the same way: with the same users stored the other way, ``COUNT(DISTINCT y)``
moved from 101 to 225 (attack review). Each engine now hashes a canonical form
(:func:`dpsql.backends.postgres_dialect._canonical`,
:func:`dpsql.backends.sqlite_dialect.sqlite_hash`), and ties are broken by the value.
Noise off and one L0 seed for both orders, so the two releases must be equal.
"""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

import dpsql
from dpsql.mechanisms.laplace import DiscreteLaplace
from tests.support import PG_ADMIN_URL, PG_URL, _engine_connection, needs_postgres

N = 120
QUERIES = [("SELECT COUNT(DISTINCT y) FROM t", {"max_rows": 1}),
           ("SELECT x, COUNT(*) FROM t GROUP BY x", {"max_groups": 1})]


@pytest.fixture(autouse=True)
def _no_noise(monkeypatch):
    monkeypatch.setattr(DiscreteLaplace, "draws", lambda self, n: [0] * n)


def _released(database, catalog) -> list:
    with dpsql.connect(database, catalog=catalog, budget=(1e9, 0.5), ledger=":memory:") as conn:
        _engine_connection(conn)._seed_secret = b"one seed for both orders".ljust(32, b"0")
        return [conn.execute(sql, epsilon=1.0, **kw).rows for sql, kw in QUERIES]


def _rows(a, b):
    """Each user: two rows of one value spelled ``a`` then ``b``, and one of its own."""
    return [(u, x, x if x != 1.0 else 2 + u / 1000) for u in range(N) for x in (a, b, 1.0)]


SQLITE_CATALOG = {"tables": {"t": {"user_key": "pid", "max_rows": 3, "columns": {
    "pid": {"type": "int"},
    "x": {"type": "float", "lower": -1e19, "upper": 1e19, "values": [-(2.0**63), 1.0]},
    "y": {"type": "float", "lower": -1e19, "upper": 1e19}}}}}


def test_sqlite_hashes_an_integer_and_a_real_of_one_value_alike(tmp_path):
    """A NUMERIC column keeps REAL -2^63 as REAL beside INTEGER -2^63."""
    released = []
    for name, (a, b) in (("forwards", (-(2**63), -(2.0**63))),
                         ("backwards", (-(2.0**63), -(2**63)))):
        path = tmp_path / f"{name}.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (pid INTEGER, x NUMERIC, y NUMERIC)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", _rows(a, b))
        con.commit()
        kinds = dict(con.execute("SELECT typeof(y), COUNT(*) FROM t GROUP BY 1").fetchall())
        con.close()
        assert kinds["integer"] >= N and kinds["real"] >= N, kinds  # both spellings stored
        released.append(_released(f"sqlite:///{path}", SQLITE_CATALOG))
    assert released[0] == released[1]


PG_CATALOG = {"tables": {"t": {"user_key": "pid", "max_rows": 3, "columns": {
    "pid": {"type": "int"}, "x": {"type": "float", "lower": -2, "upper": 5, "values": [0.0, 1.0]},
    "y": {"type": "float", "lower": -2, "upper": 5}}}}}


@needs_postgres
@pytest.mark.parametrize("column, spellings", [
    ("float8", ("'-0'::float8", "'0'::float8")),
    ("numeric", ("'0.0'::numeric", "'0.00'::numeric")),
])
def test_postgres_hashes_equal_values_alike(column, spellings):
    released = []
    for a, b in (spellings, spellings[::-1]):
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.begin() as con:
            con.exec_driver_sql("DROP TABLE IF EXISTS t")
            con.exec_driver_sql(f"CREATE TABLE t (pid int, x {column}, y {column})")
            values = []
            for u in range(N):
                for x in (a, b):
                    values.append(f"({u}, {x}, {x})")
                values.append(f"({u}, 1, {2 + u / 1000})")
            con.exec_driver_sql("INSERT INTO t VALUES " + ", ".join(values))
            con.exec_driver_sql("GRANT SELECT ON t TO dpsql_reader")
        engine.dispose()
        released.append(_released(PG_URL, PG_CATALOG))
    assert released[0] == released[1]


def test_sqlite_hashes_round_of_an_integer_like_the_integer(tmp_path):
    """``ROUND(i)`` is a REAL beside the INTEGER ``i``, in an expression dpsql types as
    an integer: the hash reads SQLite's own TYPEOF, and the released key is one integer
    whichever spelling the GROUP BY kept (it was 3.0 or 3 by storage order)."""
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 3, "columns": {
        "pid": {"type": "int"}, "j": {"type": "int", "lower": 0, "upper": 2},
        "i": {"type": "int", "lower": 0, "upper": 10000}}}}}
    key = "CASE WHEN j = 0 THEN ROUND(i) ELSE i END"
    queries = [(f"SELECT COUNT(DISTINCT {key}) FROM t", {"max_rows": 1}),
               (f"SELECT {key} AS k, COUNT(*) FROM t GROUP BY k", {"max_groups": 1})]
    released = []
    for name, js in (("forwards", (0, 1)), ("backwards", (1, 0))):
        path = tmp_path / f"{name}.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (pid INTEGER, j INTEGER, i INTEGER)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)",
                        [(u, j, 3) for u in range(N) for j in js]
                        + [(u, 2, 100 + u) for u in range(N)])
        con.commit()
        con.close()
        with dpsql.connect(f"sqlite:///{path}", catalog=catalog, budget=(1e9, 0.5),
                           ledger=":memory:") as conn:
            _engine_connection(conn)._seed_secret = b"one seed for both orders".ljust(32, b"0")
            released.append([conn.execute(sql, epsilon=1.0, delta=1e-6, **kw).rows
                             for sql, kw in queries])
    assert released[0] == released[1]
    assert all(type(k) is int for k, _ in released[0][1]), released[0][1]


@needs_postgres
def test_postgres_hashes_a_derived_min_by_its_type():
    """A derived MIN (whose type dpsql's own guess does not know) of -0 and 0: the hash
    is ``HASH_RECORD_EXTENDED``, which hashes each value by its type's hash function."""
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 6, "columns": {
        "pid": {"type": "int"}, "g": {"type": "int", "lower": 0, "upper": 10},
        "y": {"type": "float", "lower": -2, "upper": 5000}}}}}
    derived = "(SELECT pid, g, MIN(y) AS m FROM t GROUP BY pid, g) s"
    released = []
    for a, b in (("0", "-0"), ("-0", "0")):
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.begin() as con:
            con.exec_driver_sql("DROP TABLE IF EXISTS t")
            con.exec_driver_sql("CREATE TABLE t (pid int, g int, y float8)")
            con.exec_driver_sql("INSERT INTO t VALUES " + ", ".join(
                f"({u}, {g}, '{x}'::float8)" for u in range(N)
                for g, xs in ((0, (a, b)), (1, (a, b)), (2, (str(1000 + u),))) for x in xs))
            con.exec_driver_sql("GRANT SELECT ON t TO dpsql_reader")
        engine.dispose()
        with dpsql.connect(PG_URL, catalog=catalog, budget=(1e9, 0.5), ledger=":memory:") as conn:
            _engine_connection(conn)._seed_secret = b"one seed for both orders".ljust(32, b"0")
            released.append(conn.execute(f"SELECT COUNT(DISTINCT m) FROM {derived}",
                                         epsilon=1.0, max_rows=1).rows)
    assert released[0] == released[1]


@pytest.mark.parametrize("order", [(-0.0, 0.0), (0.0, -0.0)])
def test_a_derived_min_has_one_spelling(order):
    """Of -0.0 and 0.0 a derived MIN returns whichever it meets first, and the outer
    query can read the spelling (``CAST(m AS VARCHAR) = '-0.0'``): 0 or 40 users by
    storage order (attack review). The derived MIN/MAX is written in one spelling
    (:func:`dpsql.analyze.derived._one_spelling`): no user reads as -0.0."""
    import duckdb

    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 3, "columns": {
        "pid": {"type": "int"}, "y": {"type": "float", "lower": -2, "upper": 2}}}}}
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute("CREATE TABLE t (pid INTEGER, y DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(u, v) for u in range(40) for v in order])
    with dpsql.connect(con, catalog=catalog, budget=(1e9, 0.5), ledger=":memory:") as conn:
        for aggregate in ("MIN", "MAX"):
            sql = (f"SELECT COUNT(*) FROM (SELECT pid, {aggregate}(y) AS m FROM t GROUP BY pid)"
                   " s WHERE CAST(m AS VARCHAR) LIKE '-%'")
            assert conn.execute(sql, epsilon=1.0).rows == [(0,)]
