"""Noise: exact accuracy statements, and spreads that match the sensitivity.

The spread tests run the real release path (:func:`dpsql.noise.add_noise` with the
plan's calibrated mechanisms) many times over fixed exact statistics. Each is paired
with a case that halves the noise scale on purpose and asserts that the same check
rejects it, so the check is known to be able to fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from dpsql.engine import _demo_plan
from dpsql.mechanisms import DiscreteLaplace, GridLaplace, LaplaceThreshold, laplace
from dpsql.noise import add_noise


def dlap_pmf(z, scale):
    q = math.exp(-1 / scale)
    return (1 - q) / (1 + q) * q ** abs(z)


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.0, 7.5, 40.0])
@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.2])
def test_discrete_laplace_accuracy_is_exact(scale, alpha):
    t = DiscreteLaplace(scale).accuracy(alpha)

    def tail(m):  # P(|Z| > m), summed from the pmf
        return 1 - sum(dlap_pmf(z, scale) for z in range(-m, m + 1))

    assert tail(t) <= alpha + 1e-12
    if t > 0:
        assert tail(t - 1) > alpha


def test_pinned_values():
    assert DiscreteLaplace(3.0).accuracy(0.05) == 9
    assert DiscreteLaplace(2.0).privacy_map(1) == 0.5
    assert laplace(linf=1, max_groups=2, epsilon=0.5, integer=True).scale == 4.0
    grid = laplace(linf=500000.0, max_groups=1, epsilon=0.5, integer=False)
    assert isinstance(grid, GridLaplace)
    assert grid.privacy_map(500000.0, 1) <= 0.5
    assert grid.scale == pytest.approx(1e6, rel=1e-3)


@pytest.mark.parametrize(("epsilon", "delta", "groups"),
                         [(1.0, 1e-6, 1), (0.1, 1e-9, 1), (1.0, 1e-5, 4), (5.0, 1e-7, 10)])
def test_partition_threshold_is_minimal_and_within_delta(epsilon, delta, groups):
    sel = LaplaceThreshold(epsilon, delta, groups)
    q = math.exp(-1 / sel.noise.scale)
    assert sel.noise.scale == groups / epsilon
    assert sel.leak_probability() <= delta
    # one less would leak more than delta
    assert groups * q ** (sel.threshold - 2) / (1 + q) > delta or sel.threshold == 2


@pytest.mark.slow  # statistical
def test_partition_selection_releases_single_user_keys_rarely():
    sel = LaplaceThreshold(1.0, 1e-2, 1)  # large delta so the leak is measurable
    n = 200_000
    _, keep = sel.release([1] * n)
    rate = sum(keep) / n
    assert rate <= 1e-2 * 1.2
    assert rate == pytest.approx(sel.leak_probability(), rel=0.2)


# --- spread of the real release path -------------------------------------------------

DRAWS = 4000


def noisy_draws(sql, epsilon, halve=None, **bounds):
    """Runs add_noise DRAWS times on fixed exact statistics; returns noise per statistic."""
    plan = _demo_plan(sql, epsilon=epsilon, **bounds)
    if halve:
        s = plan.stat(halve)
        s.mechanism = (DiscreteLaplace(s.mechanism.scale / 2) if s.integer
                       else GridLaplace(s.mechanism.units.scale / 2, s.mechanism.k))
    columns = [s.name for s in plan.stats]
    exact = [500 if s.kind == "count" else 12_345_678.0 for s in plan.stats]
    draws = {name: [] for name in columns}
    for _ in range(DRAWS):
        noisy = add_noise(plan, columns, [tuple(exact)])
        for name, value in zip(columns, exact, strict=True):
            draws[name].append(noisy.stats[name][0] - value)
    return plan, {k: np.array(v, dtype=float) for k, v in draws.items()}


def expected_mean_abs(mech):
    if isinstance(mech, DiscreteLaplace):
        q = math.exp(-1 / mech.scale)
        return 2 * q / (1 - q * q)
    return mech.scale


def spread_matches(noise, mech):
    """E|Z| within 8% (about 5 standard errors at 4000 draws) and mean near 0."""
    want = expected_mean_abs(mech)
    got = np.mean(np.abs(noise))
    centred = abs(np.mean(noise)) < 5 * math.sqrt(2) * want / math.sqrt(len(noise))
    return abs(got - want) / want < 0.08 and centred


SQL = "SELECT COUNT(*), SUM(income) FROM pums"


@pytest.mark.slow  # statistical
def test_count_and_sum_spread_match_sensitivity():
    plan, draws = noisy_draws(SQL, epsilon=1.0)
    count, total = plan.stats
    # epsilon split in two; count L∞ = 1, sum L∞ = 500000 (income in [0, 500000])
    assert count.mechanism.scale == 2.0
    assert total.mechanism.scale == pytest.approx(1e6, rel=1e-3)
    assert spread_matches(draws["__s0"], count.mechanism)
    assert spread_matches(draws["__s1"], total.mechanism)
    assert np.all(draws["__s0"] == np.round(draws["__s0"]))  # integer noise on counts


@pytest.mark.slow  # statistical
def test_count_noise_follows_the_exact_pmf():
    plan, draws = noisy_draws(SQL, epsilon=1.0)
    observed = draws["__s0"].astype(int)
    edges = list(range(-8, 9))
    expected = [dlap_pmf(z, 2.0) for z in edges]
    obs = [np.sum(observed == z) for z in edges]
    expected.append(1 - sum(expected))
    obs.append(len(observed) - sum(obs))
    _, p = st.chisquare(obs, np.array(expected) * len(observed))
    assert p > 1e-4


@pytest.mark.slow  # statistical
@pytest.mark.parametrize("stat", ["__s0", "__s1"])
def test_spread_check_catches_halved_noise(stat):
    plan, draws = noisy_draws(SQL, epsilon=1.0, halve=stat)
    honest = _demo_plan(SQL, epsilon=1.0).stat(stat).mechanism
    assert not spread_matches(draws[stat], honest)


@pytest.mark.slow  # statistical
def test_user_level_scale_uses_max_rows_and_max_groups():
    plan, draws = noisy_draws("SELECT COUNT(*) FROM pums_dup", epsilon=1.0, max_rows=3)
    assert plan.stat("__s0").mechanism.scale == 3.0  # L∞ = R = 3
    assert spread_matches(draws["__s0"], plan.stat("__s0").mechanism)
    plan = _demo_plan("SELECT educ, COUNT(*) FROM pums_dup GROUP BY educ", epsilon=1.0,
                      max_rows=2, max_groups=3)
    assert plan.stat("__s0").mechanism.scale == 6.0  # L1 = G · R
