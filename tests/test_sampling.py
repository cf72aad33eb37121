"""The home-made vectorised samplers against their exact pmfs.

10^6 draws per case, binned, with a chi-square test; each has a twin with the wrong
scale that the same test must reject.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from dpsql.mechanisms.sampling import (
    bernoulli,
    bernoulli_exp,
    discrete_laplace,
    rational_scale,
    uniform_below,
)

#: statistical (10^6 draws per case): left out by pytest -m "not slow"
pytestmark = pytest.mark.slow

DRAWS = 1_000_000


def dlap_probabilities(t, s, edges):
    q = math.exp(-s / t)
    pmf = [(1 - q) / (1 + q) * q ** abs(z) for z in edges]
    return np.array(pmf + [1 - sum(pmf)])


def chi_square_p(sample, probabilities, edges):
    observed = [np.sum(sample == z) for z in edges]
    observed.append(len(sample) - sum(observed))
    return st.chisquare(observed, probabilities * len(sample)).pvalue


@pytest.mark.parametrize("scale", [0.4, 1.0, 3.0, 25.0])
def test_discrete_laplace_matches_its_pmf(scale):
    t, s = rational_scale(scale)
    sample = discrete_laplace(DRAWS, t, s)
    width = max(5, int(scale * 6))
    edges = list(range(-width, width + 1))
    assert chi_square_p(sample, dlap_probabilities(t, s, edges), edges) > 1e-6


@pytest.mark.parametrize("scale", [1.0, 3.0, 25.0])
def test_chi_square_rejects_a_wrong_scale(scale):
    t, s = rational_scale(scale)
    sample = discrete_laplace(DRAWS, t, s)
    width = max(5, int(scale * 6))
    edges = list(range(-width, width + 1))
    wrong = rational_scale(scale * 1.1)
    assert chi_square_p(sample, dlap_probabilities(*wrong, edges), edges) < 1e-6


def test_bernoulli_exp_and_uniform_are_exact():
    gamma_num, gamma_den = 3, 7
    hits = bernoulli_exp(np.full(DRAWS, gamma_num), gamma_den)
    p = math.exp(-gamma_num / gamma_den)
    assert st.binomtest(int(hits.sum()), DRAWS, p).pvalue > 1e-6
    assert st.binomtest(int(bernoulli(2, 5, DRAWS).sum()), DRAWS, 0.4).pvalue > 1e-6
    u = uniform_below(np.int64(7), DRAWS)
    assert u.min() == 0 and u.max() == 6
    assert st.chisquare(np.bincount(u, minlength=7)).pvalue > 1e-6


def test_rational_scale_rounds_up_within_precision():
    for scale in (1e-6, 0.3, 1.0, 2.5, 1234.5678, 3e9):
        t, s = rational_scale(scale)
        assert t / s >= scale
        assert t / s <= scale * (1 + 2**-19)


def _small_draws(t, s, total=200_000, n=40):
    """``total`` draws made ``n`` at a time: the Python path of a query's few groups."""
    from dpsql.mechanisms.sampling import SMALL

    assert n <= SMALL
    return np.concatenate([discrete_laplace(n, t, s) for _ in range(total // n)])


@pytest.mark.parametrize("scale", [0.4, 3.0, 25.0])
def test_discrete_laplace_of_few_draws_matches_its_pmf(scale):
    t, s = rational_scale(scale)
    sample = _small_draws(t, s)
    width = max(5, int(scale * 6))
    edges = list(range(-width, width + 1))
    assert chi_square_p(sample, dlap_probabilities(t, s, edges), edges) > 1e-6


@pytest.mark.parametrize("scale", [3.0, 25.0])
def test_chi_square_rejects_a_wrong_scale_of_few_draws(scale):
    t, s = rational_scale(scale)
    sample = _small_draws(t, s)
    width = max(5, int(scale * 6))
    edges = list(range(-width, width + 1))
    wrong = rational_scale(scale * 1.1)
    assert chi_square_p(sample, dlap_probabilities(*wrong, edges), edges) < 1e-6
