"""Two different SQL groups never become one released cell (attack review, issue #23).

At a key whose public domain dpsql holds as floats, :func:`dpsql.keys._domain_float`
used to leave a DECIMAL that is not a float's own spelling as a ``Decimal``; Python's
``==``/``hash`` compare a ``Decimal`` with a float exactly, so the DECIMAL holding the
float ``0.1``'s exact binary value (``Decimal(0.1)``) was the dict key ``0.1`` and its
group overwrote the ``0.1`` cell's row in ``add_noise``: one added user moved the cell
from N to 1. On DuckDB both groups pass the domain filter (a DECIMAL is compared with a
DOUBLE literal as doubles); on PostgreSQL the filter's exact NUMERIC comparison drops
the second group, which is one reason the filter stays where no L0 step needs it
(:mod:`dpsql.rewrite.restrict_domains`).
"""

from __future__ import annotations

import os
from decimal import Decimal

import duckdb
import pytest

import dpsql
from dpsql.keys import read_keys
from tests.support import HAVE_POSTGRES, NO_POSTGRES, PG_ADMIN_URL, PG_URL


def test_read_keys_is_injective_at_float_domain_keys():
    """Two different DECIMAL keys (two SQL groups) must stay two dict keys."""
    rows = [(Decimal("0.1"), 1000), (Decimal(0.1), 1)]
    read = read_keys(rows, 1, [], floats=[0])
    assert len({r[:1]: r for r in read}) == 2, read


def _duckdb_counts(path: str, extra: bool) -> dict:
    """DECIMAL(38,0) key, float domain [1e23, 2.5]; D: 1000 users at 10**23; D′ adds one
    user at 99999999999999991611392 (the float 1e23's exact value)."""
    con = duckdb.connect(path)
    con.execute("CREATE TABLE t (uid INT, k DECIMAL(38,0))")
    con.execute("INSERT INTO t SELECT i, 100000000000000000000000 FROM range(1000) r(i)")
    if extra:
        con.execute("INSERT INTO t VALUES (5000, 99999999999999991611392)")
    con.close()
    catalog = {"dataset": "nf_duck", "tables": {"t": {
        "user_key": "uid", "max_groups": 2, "max_rows": 1, "columns": {
            "uid": {"type": "int"}, "k": {"type": "float", "values": [1e23, 2.5]}}}}}
    with dpsql.connect(path, catalog, budget=(1e9, 0.5), ledger=":memory:") as c:
        r = c.execute("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1e6)
        return {a: round(b) for a, b in r.rows}


def test_duckdb_one_user_moves_a_decimal_cell(tmp_path):
    """The filter does not help here: DuckDB compares DECIMAL with the DOUBLE literal
    1e+23 as doubles, so both groups pass ``k IN (1e+23, 2.5)``; read_keys keeps them
    apart."""
    d = _duckdb_counts(str(tmp_path / "d.duckdb"), False)
    d2 = _duckdb_counts(str(tmp_path / "d2.duckdb"), True)
    assert abs(d[1e23] - d2[1e23]) <= 1, (d, d2)


@pytest.mark.skipif(not HAVE_POSTGRES, reason=NO_POSTGRES)
def test_postgres_one_user_moves_a_numeric_cell():
    """PostgreSQL's ``rate IN (0.1, 0.2)`` compares NUMERIC exactly and drops
    ``Decimal(0.1)``; without the filter its group overwrote the 0.1 cell."""
    import sqlalchemy as sa

    catalog = {"dataset": "nf_pg", "tables": {"nf_rates": {
        "user_key": "uid", "max_groups": 2, "max_rows": 1, "columns": {
            "uid": {"type": "int"}, "rate": {"type": "float", "values": [0.1, 0.2]}}}}}
    counts = []
    for extra in (False, True):
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.begin() as c:
            c.execute(sa.text("DROP TABLE IF EXISTS nf_rates"))
            c.execute(sa.text("CREATE TABLE nf_rates (uid int, rate numeric)"))
            rows = [{"u": i, "r": Decimal("0.1")} for i in range(1000)]
            if extra:
                rows.append({"u": 5000, "r": Decimal(0.1)})
            c.execute(sa.text("INSERT INTO nf_rates VALUES (:u, :r)"), rows)
            c.execute(sa.text("GRANT SELECT ON nf_rates TO " + os.environ.get(
                "DPSQL_TEST_POSTGRES_READER", "dpsql_reader")))
        engine.dispose()
        with dpsql.connect(PG_URL, catalog, budget=(1e9, 0.5), ledger=":memory:") as con:
            r = con.execute("SELECT rate, COUNT(*) AS n FROM nf_rates GROUP BY rate",
                            epsilon=1e6)
            counts.append({float(a): round(b) for a, b in r.rows})
    assert abs(counts[0][0.1] - counts[1][0.1]) <= 1, counts


def test_a_mixed_domain_meets_its_decimal_keys(tmp_path):
    """A domain of ints and floats ([1, 0.1, 0.2]) over a DECIMAL column: each value is
    read as the domain's float (before, only a domain whose first value was a float
    was, and 0.1's users were released under no cell)."""
    path = str(tmp_path / "mixed.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE t (uid INT, k DECIMAL(10,2))")
    con.execute("INSERT INTO t SELECT i, CASE WHEN i < 600 THEN 0.1 ELSE 1 END "
                "FROM range(1000) r(i)")
    con.close()
    catalog = {"dataset": "mixed", "tables": {"t": {
        "user_key": "uid", "max_groups": 3, "max_rows": 1, "columns": {
            "uid": {"type": "int"}, "k": {"type": "float", "values": [1, 0.1, 0.2]}}}}}
    with dpsql.connect(path, catalog, budget=(1e9, 0.5), ledger=":memory:") as c:
        r = c.execute("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1e6)
        counts = {float(a): round(b) for a, b in r.rows}
    assert counts == {1.0: 400, 0.1: 600, 0.2: 0}
