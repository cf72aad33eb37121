"""AVG's centred sum is scaled to ``max_rows`` rows' worth per user whatever its centre:
a centre of 0 (bounds such as ``[0, 1]`` or ``[-1, 1]``) is still a centred sum, and a
``SUM(x)`` in the same query is a statistic of its own (not rescaled).

Noise off; ``max_rows`` 2; user 1 has the values 1, 0, 0, 0 and user 2 the value 0. The
contribution-bounded mean weighs user 1 as two rows of its mean (0.25): ``AVG`` is
``(2 · 0.25 + 0) / 3 = 1/6`` under any bounds that hold the values, ``VAR_POP`` is
``5/36``, and ``SUM`` is 1.
Before the fix, bounds with a centre of 0 gave 1/3: user 1's sum (1) over two rows.
"""

from __future__ import annotations

import duckdb
import pytest

import dpsql


def _conn(tmp_path, lower, upper, ctype, sqltype):
    path = tmp_path / "avg.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE t (uid INTEGER, f {sqltype})")
    con.execute("INSERT INTO t VALUES (1, 1), (1, 0), (1, 0), (1, 0), (2, 0)")
    con.close()
    catalog = {"tables": {"t": {"user_key": "uid", "max_rows": 2, "columns": {
        "uid": {"type": "int"},
        "f": {"type": ctype, "lower": lower, "upper": upper}}}}}
    return dpsql.connect(path, catalog=catalog, budget=(100, 1e-5), ledger=":memory:")


TYPES = [("int", "INTEGER"), ("float", "DECIMAL(6,2)"), ("float", "DOUBLE")]


@pytest.mark.parametrize("bounds", [(0, 1), (-1, 1), (0, 2), (-2, 2)])
@pytest.mark.parametrize("types", TYPES)
def test_avg_weighs_a_user_as_max_rows_of_its_mean(tmp_path, no_noise, bounds, types):
    conn = _conn(tmp_path, *bounds, *types)
    avg, = conn.execute("SELECT AVG(f) FROM t", epsilon=10.0).rows[0]
    conn.close()
    assert avg == pytest.approx(1 / 6, abs=1e-6)


@pytest.mark.parametrize("bounds", [(0, 1), (-1, 1), (0, 2)])
@pytest.mark.parametrize("types", TYPES)
def test_sum_beside_avg_is_its_own_statistic(tmp_path, no_noise, bounds, types):
    conn = _conn(tmp_path, *bounds, *types)
    result = conn.execute("SELECT SUM(f) AS s, AVG(f) AS a, VAR_POP(f) AS v FROM t",
                          epsilon=10.0)
    conn.close()
    s, a, v = result.rows[0]
    assert s == pytest.approx(1, abs=1e-6)
    assert a == pytest.approx(1 / 6, abs=1e-6)
    # VAR_POP over the same weights: user 1 as two rows of mean 0.25 and mean square
    # 0.25, user 2 as one row of 0: E[x²] − E[x]² = 1/6 − 1/36
    assert v == pytest.approx(5 / 36, abs=1e-6)
    # the two sums are two statistics, named apart in the split of the budget
    labels = [row["statistic"] for row in result.split]
    assert len(labels) == len(set(labels)) and sum(x.startswith("SUM(") for x in labels) >= 2
