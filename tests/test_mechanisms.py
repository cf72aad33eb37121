"""The mechanism protocol and registry: every family's calibration, privacy map, split,
accuracy and sampler agree with one another (dpsql.mechanisms.base)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.accounting import zcdp_to_dp
from dpsql.errors import PrivacyParameterError
from dpsql.mechanisms import DEFAULT_MECHANISM, MECHANISMS, Constant, Noise, mechanism

FAMILIES = sorted(MECHANISMS)

#: (linf, max_groups, share, integer, width): scalars and histograms, integer and real,
#: small and large sensitivities (the grid path for integers above 2^40 too)
CASES = [
    (1, 1, 1.0, True, 1),
    (3, 4, 0.25, True, 1),
    (1, 10, 0.01, True, 51),
    (2.0**45, 1, 0.5, True, 1),
    (1000.0, 2, 0.5, False, 1),
    (0.001, 7, 3.0, False, 1),
    (3.0, 2, 1.0, False, 51),
    (1e12, 1, 1e-3, False, 1),
]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("case", CASES)
def test_calibrated_noise_spends_its_share(name, case):
    """The privacy map of what ``calibrate`` returns is within the share it was given
    (and uses nearly all of it): halving any scale doubles ε (quadruples ρ) and fails."""
    linf, groups, share, integer, width = case
    noise = MECHANISMS[name].calibrate(linf, groups, share, integer, width)
    spent = noise.privacy_map(linf, groups)
    assert spent <= share * (1 + 1e-9)
    assert spent >= share * (1 - 1e-3)  # no budget wasted either
    assert isinstance(noise, Noise)
    assert noise.integer == (integer and noise.scale < 2.0**40)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("selecting", [False, True])
@pytest.mark.parametrize("parts", [1, 2, 7])
def test_split_stays_within_the_query_budget(name, parts, selecting):
    """Composed, the shares of a split cost at most the query's (ε, δ)."""
    family = MECHANISMS[name]
    epsilon, delta = 1.0, 1e-6
    split = family.split(epsilon, delta, parts, selecting)
    assert split.share > 0
    if family.budget == "epsilon":
        assert split.rho is None
        # the selection is one of the parts, at the same ε
        assert parts * split.share <= epsilon * (1 + 1e-12)
        assert split.selection_epsilon == split.share
        assert split.selection_delta <= delta
    else:
        assert split.rho == pytest.approx(parts * split.share)
        # the selection's ε-DP counts as ε²/2 of ρ: one share
        assert split.selection_epsilon**2 / 2 == pytest.approx(split.share)
        assert split.selection_delta == (delta / 2 if selecting else 0.0)
        spent = zcdp_to_dp(parts * split.share, delta - split.selection_delta)
        assert spent <= epsilon * (1 + 1e-9)


def test_split_of_nothing_is_free():
    for family in MECHANISMS.values():
        assert family.split(1.0, 1e-6, 0, False).share == 0.0


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("integer", [True, False])
def test_accuracy_bounds_the_sampled_noise(name, integer):
    """``accuracy(alpha)`` holds for the draws of ``sample`` (5% level; 20,000 draws
    exceed it in more than 6.5% of cases with probability below 1e-20)."""
    noise = MECHANISMS[name].calibrate(1, 1, 0.5, integer)
    draws = noise.sample(20_000)
    assert draws.shape == (20_000,)
    bound = noise.accuracy(0.05)
    assert np.mean(np.abs(draws) > bound) <= 0.065
    assert np.mean(np.abs(draws) > bound / 3) > 0.065  # and it is not vacuous
    if not integer:  # grid noise is a multiple of the grid step
        assert np.all(draws / noise.grid == np.rint(draws / noise.grid))


def test_constant_follows_the_protocol():
    c = Constant()
    assert isinstance(c, Noise)
    assert c.privacy_map(5.0, 3) == 0.0 and c.accuracy(0.05) == 0
    assert c.sample(3).tolist() == [0, 0, 0]


def test_registry_names_and_refusals():
    assert DEFAULT_MECHANISM == "laplace" in MECHANISMS
    for name, family in MECHANISMS.items():
        assert mechanism(name) is family and family.name == name
        assert family.budget in ("epsilon", "rho")
    for bad in ("Laplace", "exponential", None, ["laplace"]):
        with pytest.raises(PrivacyParameterError, match="mechanism must be 'laplace' or"):
            mechanism(bad)


def test_labels_name_the_noise_for_explain():
    labels = {MECHANISMS[n].calibrate(1, 1, 1.0, i).label
              for n in FAMILIES for i in (True, False)}
    assert labels == {"discrete Laplace", "grid Laplace", "discrete Gaussian",
                      "grid Gaussian"}
    assert math.isfinite(MECHANISMS["gaussian"].calibrate(1, 1, 1.0, True).scale)


@pytest.mark.parametrize("name,delta", [("laplace", 0.0), ("gaussian", 1e-6)])
def test_engine_recalibrates_through_the_family(name, delta):
    """A statistic the engine types as a fraction gets the family's grid noise at the same
    share, whichever the family (COUNT(DISTINCT user) included); partition selection's
    user counts keep their integer noise, on which the threshold was computed."""
    from dpsql.engine import _demo_plan, statistic_types

    plan = _demo_plan("SELECT COUNT(DISTINCT pid), SUM(age) FROM PUMS.PUMS", 1.0, delta,
                      mechanism=name)
    statistic_types(plan, {c: "DOUBLE" for s in plan.stats for c in s.columns})
    family = MECHANISMS[name]
    for s in plan.stats:
        share = getattr(s, family.budget)
        assert not s.mechanism.integer
        assert s.mechanism.privacy_map(s.linf, plan.max_groups) <= share * (1 + 1e-9)
    plan = _demo_plan("SELECT income, COUNT(DISTINCT pid) FROM PUMS.PUMS GROUP BY income", 1.0,
                      1e-6, mechanism=name)
    assert plan.selection is not None
    statistic_types(plan, {c: "DOUBLE" for s in plan.stats for c in s.columns})
    assert plan.stat("__users").mechanism is plan.selection.noise


@pytest.mark.parametrize("k", [-40, -12, 0, 7, 959, 960])
def test_a_few_released_units_are_the_floats_numpy_gives(monkeypatch, k):
    """A query's few values (up to SMALL) are added and scaled in Python integers; the
    floats are bit for bit those of the numpy path that more values take (fails when
    the small path rounds the sum through a float first, or scales by 2**k wrongly)."""
    from dpsql.mechanisms.laplace import DiscreteLaplace, GridLaplace
    from dpsql.mechanisms.sampling import SMALL

    rng = np.random.default_rng(k + 1000)
    units = [int(u) for u in rng.integers(-2**61, 2**61, size=SMALL, dtype=np.int64)]
    units += [0, 1, -1, 2**53 + 1, -(2**53) - 1, 2**61 - 1]
    noise = [int(z) for z in rng.integers(-2**20, 2**20, size=len(units))]
    m = GridLaplace(8192.0, k)
    given = iter(noise)
    monkeypatch.setattr(DiscreteLaplace, "draws", lambda self, n: [next(given) for _ in range(n)])
    few = [x for i in range(0, len(units), 7) for x in m.release_units(units[i:i + 7])]
    if k <= 959:  # the numpy path's own formula
        total = np.asarray(units, dtype=np.int64) + np.asarray(noise, dtype=np.int64)
        numpy = np.ldexp(total.astype(np.float64), k).tolist()
    else:
        numpy = [math.ldexp(float(u + z), k) if abs(u + z) * 2.0**(k - 1023) < 1
                 else math.copysign(math.inf, u + z) for u, z in zip(units, noise, strict=True)]
    assert [x.hex() for x in few] == [x.hex() for x in numpy]


def test_a_few_integer_releases_add_the_draws_exactly(monkeypatch):
    from dpsql.mechanisms.laplace import DiscreteLaplace

    m = DiscreteLaplace(3.0)
    monkeypatch.setattr(DiscreteLaplace, "draws", lambda self, n: [5, -7, 0][:n])
    assert m.release([2**70, True, 4.0]) == [2**70 + 5, -6, 4]
    monkeypatch.undo()
    draws = m.draws(3)
    assert len(draws) == 3 and all(type(z) is int for z in draws)
