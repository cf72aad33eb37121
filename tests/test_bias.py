"""The bias check (:mod:`dpsql.bias`): its SQL, its sensitivity, its noise and its cost."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

from dpsql.bias import BiasCheck, _share_interval, bias_query, calibrate, release
from dpsql.engine import _demo_plan
from dpsql.mechanisms import mechanism
from dpsql.rewrite import rewrite

SQL = "SELECT educ, COUNT(*) AS n FROM pums_dup GROUP BY educ"


def test_the_bias_query_counts_users_over_the_per_user_table():
    plan = _demo_plan(SQL, bias_check=True, seed=7)
    text = bias_query(plan, rewrite(plan)).sql()
    assert text == (
        "WITH __per_user AS (SELECT pid AS __uid, educ AS __k0, LEAST(COUNT(*), 3) AS __s0, "
        "COUNT(*) AS __raw_rows FROM pums_dup WHERE (educ BETWEEN 1 AND 16) AND NOT pid IS "
        "NULL GROUP BY pid, educ) SELECT COUNT(*) AS __b_users, COUNT(CASE WHEN __most > 3 "
        "THEN 1 END) AS __b_rows, COUNT(CASE WHEN __groups > 1 THEN 1 END) AS __b_groups "
        "FROM (SELECT __uid, MAX(__raw_rows) AS __most, COUNT(*) AS __groups FROM "
        "__per_user GROUP BY __uid) AS __bias")
    # without the check the per-user table has no raw count, and there is no query
    plain = _demo_plan(SQL, seed=7)
    assert "__raw_rows" not in rewrite(plain).sql() and bias_query(plain, rewrite(plain)) is None


@pytest.mark.parametrize("epsilon", [1.0, 0.3])
def test_the_bias_check_is_one_share_of_the_split(epsilon):
    plan = _demo_plan("SELECT educ, COUNT(*) AS n, SUM(age) AS s FROM pums_dup GROUP BY educ",
                      epsilon=epsilon, bias_check=True)
    shares = [s.epsilon for s in plan.stats] + [plan.bias.epsilon]
    assert shares == [epsilon / 3] * 3 and math.isclose(sum(shares), epsilon)
    assert plan.cost == (epsilon, 0.0)
    # three counts (users, over max_rows, over max_groups): L1 = 3, scale 3 / share
    assert plan.bias.mechanism.scale == pytest.approx(3 / (epsilon / 3))
    # no L0 cut possible (no GROUP BY): two counts, L1 = 2
    plan = _demo_plan("SELECT COUNT(*) FROM pums_dup", epsilon=epsilon, bias_check=True)
    assert plan.bias.columns == ("__b_users", "__b_rows")
    assert plan.bias.mechanism.scale == pytest.approx(2 / (epsilon / 2))


def test_gaussian_bias_check_takes_a_share_of_rho():
    plan = _demo_plan(SQL, bias_check=True, mechanism="gaussian", delta=1e-6)
    assert plan.bias.rho == pytest.approx(plan.rho / 2) == pytest.approx(plan.stats[0].rho)
    # sigma = sqrt(k / (2 rho)), k = 3
    assert plan.bias.mechanism.scale == pytest.approx(math.sqrt(3 / (2 * plan.bias.rho)))


def test_calibrate_pins_the_scale():
    check = BiasCheck(groups=True)
    calibrate(check, mechanism("laplace"), 0.5)
    assert check.mechanism.scale == 6.0
    check = BiasCheck(groups=False)
    calibrate(check, mechanism("laplace"), 2.0)
    assert check.mechanism.scale == 1.0


def _counts(con, sql):
    return con.execute(sql).fetchone()


def test_one_user_moves_each_count_by_at_most_one():
    """The sensitivity the noise is calibrated to, checked on neighbouring databases:
    D and D plus one user with many rows in many groups."""
    plan = _demo_plan(SQL, bias_check=True, seed=3)
    sql = bias_query(plan, rewrite(plan)).sql(dialect="duckdb")
    con = duckdb.connect()
    con.execute("CREATE TABLE pums_dup AS SELECT i // 3 AS pid, 1 + (i % 16) AS educ, "
                "i % 90 AS age, i % 2 AS sex, 1 AS race, 0.0 AS income, 0 AS married "
                "FROM range(600) r(i)")
    before = _counts(con, sql)
    con.execute("INSERT INTO pums_dup SELECT 10**6, 1 + (i % 16), 40, 0, 1, 0.0, 0 "
                "FROM range(500) r(i)")
    after = _counts(con, sql)
    assert before == (200, 0, 200)
    assert after == (201, 1, 201)
    assert max(abs(a - b) for a, b in zip(after, before, strict=True)) <= 1


@pytest.mark.slow  # statistical: many draws
def test_the_released_counts_carry_noise_of_the_calibrated_scale():
    """The test that catches broken noise: 4,000 releases of fixed exact counts must
    have the spread of discrete Laplace noise of scale 3 / ε (variance 2p / (1 − p)²,
    p = exp(−1/scale)), neither less (too little noise breaks privacy) nor more."""
    plan = _demo_plan(SQL, epsilon=1.0, bias_check=True)
    scale = 3 / plan.bias.epsilon
    assert plan.bias.mechanism.scale == pytest.approx(scale)
    exact = (5000, 2000, 1000)
    draws = np.array([[r["users"], r["rows_cut"], r["groups_cut"]]
                      for r in (release(plan, ["__b_users", "__b_rows", "__b_groups"],
                                        [exact], 0.05) for _ in range(4000))], dtype=float)
    errors = draws - np.array(exact)
    p = math.exp(-1 / scale)
    expected = 2 * p / (1 - p) ** 2
    for column in errors.T:
        assert abs(column.mean()) < 0.5
        assert 0.85 * expected < column.var() < 1.15 * expected
    assert not np.all(errors == 0)


def test_the_shares_and_their_intervals_come_from_the_noisy_counts():
    plan = _demo_plan(SQL, epsilon=1e6, bias_check=True)
    out = release(plan, ["__b_users", "__b_rows", "__b_groups"], [(400, 100, 40)], 0.05)
    assert (out["users"], out["rows_cut"], out["groups_cut"]) == (400, 100, 40)
    assert out["rows_share"] == 0.25 and out["groups_share"] == 0.1
    assert out["rows_interval"] == (0.25, 0.25)
    # no rows at all: every count 0, shares 0, nothing raises
    out = release(plan, ["__b_users", "__b_rows", "__b_groups"], [], 0.05)
    assert out["users"] == 0 and out["rows_share"] == 0.0
    low, high = _share_interval(10, 100, 5)
    assert (low, high) == (5 / 105, 15 / 95)
    assert _share_interval(0, 0, math.inf) == (0.0, 1.0)

