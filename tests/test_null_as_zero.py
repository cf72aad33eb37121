"""A nullable sum whose NULL rows are read as 0 (dpsql.aggregates.sums.null_as_zero)
releases what skipping them released; sums its rule rescales keep the NULL-keeping clamp.

Noise off; user 1 has one value and two NULL rows, ``max_rows`` 2.
"""

from __future__ import annotations

import duckdb
import pytest

import dpsql


def _conn(tmp_path, lower, upper, ctype="int", sqltype="INTEGER"):
    path = tmp_path / "nz.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE t (uid INTEGER, g INTEGER, f {sqltype})")
    con.execute("INSERT INTO t VALUES (1, 0, 1), (1, 0, NULL), (1, 0, NULL), (2, 0, 0), "
                "(3, 0, 1), (4, 1, NULL), (4, 1, NULL)")
    con.close()
    catalog = {"tables": {"t": {"user_key": "uid", "max_rows": 2, "columns": {
        "uid": {"type": "int"}, "g": {"type": "int", "values": [0, 1]},
        "f": {"type": ctype, "lower": lower, "upper": upper, "nullable": True}}}}}
    return dpsql.connect(path, catalog=catalog, budget=(100, 1e-5), ledger=":memory:")


@pytest.mark.parametrize("bounds", [(0, 1), (-1, 1), (0, 2)])
@pytest.mark.parametrize("types", [("int", "INTEGER"), ("float", "DECIMAL(6,2)"),
                                   ("float", "DOUBLE")])
def test_variance_counts_only_non_null_rows(tmp_path, no_noise, bounds, types):
    # attack review: with a centre of 0 the squares' sum was taken for a sum to read
    # NULL as 0, and its per-user rescaling by COUNT counted the NULL rows: VAR_POP of
    # (1, 0, 1) came out 1/9 instead of 2/9
    conn = _conn(tmp_path, *bounds, *types)
    var, avg, n = conn.execute("SELECT VAR_POP(f), AVG(f), COUNT(f) FROM t",
                               epsilon=10.0).rows[0]
    conn.close()
    assert n == 3 and avg == pytest.approx(2 / 3, abs=1e-6)
    assert var == pytest.approx(2 / 9, abs=1e-6)


@pytest.mark.parametrize("types", [("int", "INTEGER"), ("float", "DECIMAL(6,2)"),
                                   ("float", "DOUBLE")])
def test_a_sum_reads_null_rows_as_nothing(tmp_path, no_noise, types):
    # group 1 holds only NULLs: released as 0, as the sum that skipped them was
    conn = _conn(tmp_path, 0, 1, *types)
    result = conn.execute("SELECT g, SUM(f) AS s, COUNT(f) AS n FROM t GROUP BY g",
                          epsilon=10.0)
    conn.close()
    assert "COALESCE(" in result.sql and "IS NULL THEN NULL" not in result.sql.split(
        "__per_user AS")[1].split(") SELECT")[0]
    rows = {g: (s, n) for g, s, n in result.rows}
    assert rows[0] == (pytest.approx(2), 3) and rows[1] == (pytest.approx(0), 0)
