"""PostgreSQL's REAL (float4) is typed as REAL by the probes, so constants beyond its
range are refused before the charge (attack review, issue #23).

The probes wrote DuckDB's ``FLOAT`` (float4) through sqlglot's PostgreSQL grammar,
where ``FLOAT`` is float8: a REAL column was typed DOUBLE PRECISION, a bound of 1e39 (or
1e-50) passed the range check for float8, and PostgreSQL, which plans ``LEAST(real,
numeric)`` as real, failed converting it after the charge, on every table, empty ones
too. Such queries are now refused, or answered, before any charge.
"""

from __future__ import annotations

import pytest

import dpsql
from dpsql.errors import DpsqlError
from tests.support import HAVE_POSTGRES, NO_POSTGRES, PG_ADMIN_URL, PG_URL

pytestmark = pytest.mark.skipif(not HAVE_POSTGRES, reason=NO_POSTGRES)


def _catalog(lower, upper):
    return {"tables": {"real_bounds": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": lower, "upper": upper}}}}}


def _table(sql_type: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(PG_ADMIN_URL)
    with engine.begin() as c:
        c.execute(sa.text("DROP TABLE IF EXISTS real_bounds"))
        c.execute(sa.text(f"CREATE TABLE real_bounds (pid INTEGER, x {sql_type})"))
        c.execute(sa.text("INSERT INTO real_bounds VALUES (1, 0.5), (2, 0.25)"))
        c.execute(sa.text("GRANT SELECT ON real_bounds TO dpsql_reader"))
    engine.dispose()


@pytest.mark.parametrize(("sql_type", "upper", "sql"), [
    ("REAL", 1e39, "SELECT SUM(x) FROM real_bounds"),
    ("REAL", 1e-50, "SELECT AVG(x) FROM real_bounds"),
    ("DOUBLE PRECISION", 100, "SELECT STDDEV(CAST(x // 2 AS REAL)) FROM real_bounds"),
])
def test_refused_or_answered_never_failed_after_the_charge(sql_type, upper, sql):
    _table(sql_type)
    with dpsql.connect(PG_URL, catalog=_catalog(-upper if upper > 1 else 0, upper),
                       budget=(10, 0.5), ledger=":memory:") as conn:
        try:
            conn.execute(sql, epsilon=1)
        except DpsqlError as exc:
            assert conn.budget.spent == (0.0, 0.0), str(exc)  # refused before the charge
