"""PostgreSQL: each user changes a noisy sum by at most the L∞ the noise covers (attack
reviews, issue #23).

PostgreSQL adds NUMERICs (``postgres_sums``), and its cast of a float to NUMERIC keeps 15
(float8) or 6 (float4) significant digits: it rounded clamped values past their bound.
Where the database keeps the user key UNIQUE (no per-user step) ``SUM(x *
0.49999999999999994)`` added 0.5 a row and a REAL column clamped to 1.0000049999 added
1.00001; ``VARIANCE(x * 0.9999999999999999)`` added 0.25 a row for an L∞ of
0.24999999999999994; on the per-user path an AVG partial clamped to 0.49999999999999994
was summed as 0.5. With a grid step at the bound, one user then moved the released value
two grid units where the privacy map counts one. Each summand now ends in a clamp to L∞
(:mod:`dpsql.rewrite.bound_summands`) that PostgreSQL repeats in NUMERIC after the cast.
The test runs the rewritten SQL itself on PostgreSQL and compares each statistic with
``users × L∞`` exactly, with one row per user (PRIMARY KEY) and with two.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

import dpsql
from tests.support import HAVE_POSTGRES, NO_POSTGRES, PG_ADMIN_URL, PG_URL

pytestmark = pytest.mark.skipif(not HAVE_POSTGRES, reason=NO_POSTGRES)

ROWS = 300


def _table(sql_type: str, value: str, nulls: int, unique: bool) -> None:
    import sqlalchemy as sa

    values = [f"({i}, {value})" for i in range(ROWS)]
    values += [f"({ROWS + i}, NULL)" for i in range(nulls)]
    if not unique:
        values += [f"({i}, {value})" for i in range(ROWS)]
    key = "PRIMARY KEY" if unique else ""
    engine = sa.create_engine(PG_ADMIN_URL)
    with engine.begin() as c:
        c.execute(sa.text("DROP TABLE IF EXISTS unique_sums"))
        c.execute(sa.text(f"CREATE TABLE unique_sums (pid INTEGER {key}, x {sql_type})"))
        c.execute(sa.text("INSERT INTO unique_sums VALUES " + ", ".join(values)))
        c.execute(sa.text("GRANT SELECT ON unique_sums TO dpsql_reader"))
    engine.dispose()


def _run_as_owner(sql: str) -> dict:
    import sqlalchemy as sa

    engine = sa.create_engine(PG_ADMIN_URL)
    with engine.begin() as c:
        row = c.execute(sa.text(sql)).mappings().one()
    engine.dispose()
    return dict(row)


@pytest.mark.parametrize(("sql_type", "value", "lower", "upper", "sql"), [
    ("REAL", "1e30", -1.0000049999, 1.0000049999, "SELECT SUM(x) FROM unique_sums"),
    ("DOUBLE PRECISION", "1e30", -0.1234567890123456, 0.1234567890123456,
     "SELECT SUM(x) FROM unique_sums"),
    ("DOUBLE PRECISION", "1e30", 0, 1, "SELECT SUM(x * 0.49999999999999994) FROM unique_sums"),
    ("DOUBLE PRECISION", "-1e30", -0.1234567890123456, 0.30000000000000004,
     "SELECT AVG(x) FROM unique_sums"),
    ("REAL", "1e30", 0.1, 1.0000049999, "SELECT AVG(x), SUM(x) FROM unique_sums"),
    ("DOUBLE PRECISION", "1e30", 0, 1, "SELECT VARIANCE(x * 0.9999999999999999) FROM unique_sums"),
    ("DOUBLE PRECISION", "1e30", 0, 1, "SELECT AVG(x * 0.9999999999999999) FROM unique_sums"),
    ("REAL", "1e30", 0.1, 1.0000049999, "SELECT STDDEV(x) FROM unique_sums"),
    ("DOUBLE PRECISION", "1e30", 0, 0.7, "SELECT SUM(x) FROM unique_sums"),
    ("REAL", "1e30", 0.1, 0.1, "SELECT VARIANCE(x), AVG(x) FROM unique_sums"),
])
@pytest.mark.parametrize("nulls", [0, 7])
@pytest.mark.parametrize("unique", [True, False], ids=["unique", "two_rows"])
def test_each_user_adds_at_most_the_bound(sql_type, value, lower, upper, sql, nulls, unique):
    _table(sql_type, value, nulls, unique)
    catalog = {"tables": {"unique_sums": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"},
        "x": {"type": "float", "lower": lower, "upper": upper, "nullable": True}}}}}
    with dpsql.connect(PG_URL, catalog=catalog, budget=(10, 0.5), ledger=":memory:") as conn:
        explained = conn.explain(sql, epsilon=1)
    got = _run_as_owner(explained.sql)
    sums = [s for s in explained.statistics if "SUM" in s["statistic"] or "AVG" in s["statistic"]]
    assert sums, explained.statistics
    for stat in explained.statistics:
        total = Decimal(str(got[stat["name"]] or 0))
        bound = ROWS * Decimal(stat["linf"])  # exact: L∞ is the analysis' float
        assert -bound <= total <= bound, (stat, total, explained.sql)
        if "COUNT" in stat["statistic"]:
            assert total == ROWS, (stat, total)  # NULL rows uncounted; max_rows 1


def test_an_exact_sum_is_rounded_to_the_grid_exactly(monkeypatch):
    """PostgreSQL's NUMERIC sum was made a float before the grid rounded it: two
    neighbours' sums L∞ apart in different binades then rounded apart by one grid unit
    more than the privacy map counts (attack review: 9 units where 8 were counted).
    With the noise off, one added user moves the released value by at most
    ``floor(L∞ / g) + 1`` units."""
    import math

    import sqlalchemy as sa

    from dpsql.mechanisms.laplace import DiscreteLaplace

    catalog = {"tables": {"grid_sums": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": 0, "upper": 1}}}}}
    sql = "SELECT SUM(x * 0.24999999999999994) FROM grid_sums"
    monkeypatch.setattr(DiscreteLaplace, "draws", lambda self, n: [0] * n)
    released = []
    for extra in ([], ["(8, 1)"]):
        rows = [f"({i}, 1)" for i in range(7)] + ["(7, 0.16)", "(9, 0.0275000000000011)"]
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.begin() as c:
            c.execute(sa.text("DROP TABLE IF EXISTS grid_sums"))
            c.execute(sa.text("CREATE TABLE grid_sums (pid INTEGER PRIMARY KEY, "
                              "x DOUBLE PRECISION)"))
            c.execute(sa.text("INSERT INTO grid_sums VALUES " + ", ".join(rows + extra)))
            c.execute(sa.text("GRANT SELECT ON grid_sums TO dpsql_reader"))
        engine.dispose()
        with dpsql.connect(PG_URL, catalog=catalog, budget=(10, 0.5),
                           ledger=":memory:") as conn:
            stat = conn.explain(sql, epsilon=0.001).statistics[0]
            released.append(conn.execute(sql, epsilon=0.001).rows[0][0])
    grid = 2.0 ** (math.floor(math.log2(stat["scale"])) - 12)
    assert grid == 2.0**-5 and stat["mechanism"] == "grid Laplace", stat
    moved = round((released[1] - released[0]) / grid)
    assert moved <= math.floor(stat["linf"] / grid) + 1, (released, stat)
