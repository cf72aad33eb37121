"""A user's partial sum of whole numbers is written as a BIGINT (dpsql.whole_sums): the
released sum stays exact and keeps its integer noise, and a summand the engine types as
anything else keeps the partial as it was (a cast would round it)."""

from __future__ import annotations

import duckdb
import pytest

import dpsql
from dpsql.mechanisms.laplace import DiscreteLaplace

USERS = 30


def _catalog(vtype="int") -> dict:
    return {"dataset": "ws", "tables": {"t": {
        "user_key": "uid", "max_groups": 1, "max_rows": 2, "columns": {
            "uid": {"type": "int"}, "g": {"type": "string", "values": ["a", "b"]},
            "v": {"type": vtype, "lower": 0, "upper": 10}}}}}


def _file(tmp_path, sqltype="INTEGER", values=(3, 4, 5)):
    """Each user: three rows in group ``a`` with the given values (max_rows 2 keeps two
    rows' worth of each user's sum)."""
    path = tmp_path / "ws.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE t (uid INTEGER, g VARCHAR, v {sqltype})")
    con.executemany("INSERT INTO t VALUES (?, 'a', ?)",
                    [(u, v) for u in range(USERS) for v in values])
    con.close()
    return path


def _run(path, sql, catalog=None):
    conn = dpsql.connect(path, catalog=catalog or _catalog(), budget=(100, 1e-5),
                         ledger=":memory:")
    try:
        result = conn.execute(sql, epsilon=10.0)
        prepared = next(iter(conn._plans._entries.values()))
        return result, prepared
    finally:
        conn.close()


def test_a_whole_partial_is_a_bigint_and_the_sum_keeps_integer_noise(tmp_path, no_noise,
                                                                       ran):
    result, prepared = _run(_file(tmp_path), "SELECT g, SUM(v) AS s FROM t GROUP BY g")
    assert "AS BIGINT) AS __s0" in ran[-1] and "ROUND(" not in ran[-1]
    stat = prepared.plan.stats[0]
    assert stat.whole and stat.grid is None and isinstance(stat.mechanism, DiscreteLaplace)
    # each user's 12 clamped to max_rows (2) rows' worth of [0, 10]: 20, all kept
    assert dict((r[0], r[1]) for r in result.rows)["a"] == 12 * USERS
    assert isinstance(result.rows[0][1], int)


def test_a_partial_over_its_range_is_clamped_before_the_cast(tmp_path, no_noise, ran):
    result, _ = _run(_file(tmp_path, values=(10, 10, 10)),
                     "SELECT g, SUM(v) AS s FROM t GROUP BY g")
    assert dict((r[0], r[1]) for r in result.rows)["a"] == 20 * USERS


def test_a_double_summand_keeps_its_exact_partial(tmp_path, no_noise, ran):
    # analysed as whole numbers (``//``), computed by DuckDB as 1.5, 2 and 2.5 (6.0 a
    # user, inside the partial's [0, 10]); the probe sees a DOUBLE and the partial stays
    # as it was
    result, prepared = _run(_file(tmp_path), "SELECT g, SUM(CAST(v AS DOUBLE) // 2) AS s "
                                             "FROM t GROUP BY g")
    assert prepared.plan.stats[0].interval.integer
    assert "AS BIGINT) AS __s0" not in ran[-1]
    assert not prepared.plan.stats[0].whole
    assert dict((r[0], r[1]) for r in result.rows)["a"] == pytest.approx(
        6.0 * USERS, rel=1e-6)


@pytest.mark.parametrize("sql", [
    "SELECT g, AVG(v) AS a FROM t GROUP BY g",  # a centred sum: fractional partials
    "SELECT g, COUNT(*) AS n FROM t GROUP BY g",  # a count: a BIGINT already
])
def test_other_statistics_are_not_whole_partials(tmp_path, no_noise, ran, sql):
    _, prepared = _run(_file(tmp_path), sql)
    assert not any(s.whole for s in prepared.plan.stats)


def test_one_row_per_user_needs_no_partial(tmp_path, no_noise, ran):
    path = tmp_path / "pk.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (uid INTEGER PRIMARY KEY, g VARCHAR, v INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, 'a', 4)", [(u,) for u in range(USERS)])
    con.close()
    result, prepared = _run(path, "SELECT g, SUM(v) AS s FROM t GROUP BY g")
    assert "__per_user" not in ran[-1] and not prepared.plan.stats[0].whole
    assert dict((r[0], r[1]) for r in result.rows)["a"] == 4 * USERS


def test_a_partial_range_past_2_to_the_53_keeps_its_form(tmp_path, no_noise, ran):
    # attack review: a range 7 below 2^63 was written as the DOUBLE 2^63, and the cast
    # of a partial clamped there gave NULL (the user counted as -L∞)
    catalog = _catalog()
    catalog["tables"]["t"]["max_rows"] = 1025
    catalog["tables"]["t"]["columns"]["v"]["upper"] = 8998411743272952
    _, prepared = _run(_file(tmp_path), "SELECT g, SUM(v) AS s FROM t GROUP BY g", catalog)
    assert not prepared.plan.stats[0].whole
