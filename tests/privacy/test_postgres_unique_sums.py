"""PostgreSQL, a user key the database keeps UNIQUE: each row's summed value stays inside
the bound the noise covers (attack review, issue #23).

There is no per-user step there, so the row clamp ``LEAST(GREATEST(x, L), U)`` is the
only bound, and PostgreSQL's cast of a float to NUMERIC (the sums' type, see
``postgres_sums``) keeps 15 (float8) or 6 (float4) significant digits: it rounded a
clamped value past ``U``. ``SUM(x * 0.49999999999999994)`` added 0.5 a row, and a REAL
column clamped to 1.0000049999 added 1.00001. Each summed value is now clamped again in
NUMERIC after the cast. The test runs the rewritten SQL itself on PostgreSQL and compares
each statistic with ``rows × L∞`` exactly.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

import dpsql
from tests.support import HAVE_POSTGRES, NO_POSTGRES, PG_ADMIN_URL, PG_URL

pytestmark = pytest.mark.skipif(not HAVE_POSTGRES, reason=NO_POSTGRES)

ROWS = 300


def _table(sql_type: str, value: str, nulls: int) -> None:
    import sqlalchemy as sa

    values = [f"({i}, {value})" for i in range(ROWS)]
    values += [f"({ROWS + i}, NULL)" for i in range(nulls)]
    engine = sa.create_engine(PG_ADMIN_URL)
    with engine.begin() as c:
        c.execute(sa.text("DROP TABLE IF EXISTS unique_sums"))
        c.execute(sa.text(f"CREATE TABLE unique_sums (pid INTEGER PRIMARY KEY, x {sql_type})"))
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
])
@pytest.mark.parametrize("nulls", [0, 7])
def test_each_row_adds_at_most_the_bound(sql_type, value, lower, upper, sql, nulls):
    _table(sql_type, value, nulls)
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
            assert total == ROWS, (stat, total)  # the NULL rows are not counted
