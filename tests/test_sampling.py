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


# -- the inline Python path, word for word against the same algorithm in calls ----------

def _reference(n: int, t: int, s: int, word) -> list[int]:
    """CKS Algorithm 2 with one call per uniform draw (the form the inline
    :func:`discrete_laplace_list` was written from), but for one draw that decides
    nothing: ``Bernoulli(exp(−1))`` starts at ``k = 2`` (its ``Bernoulli(1/1)`` is 1)."""

    def uniform_below(m: int) -> int:
        limit = (0xFFFF_FFFF_FFFF_FFFF // m) * m
        while True:
            w = word()
            if w < limit:
                return w % m

    def bernoulli_exp(num: int, den: int, k: int = 1) -> bool:
        while uniform_below(den * k) < num:
            k += 1
        return k % 2 == 1

    out: list[int] = []
    while len(out) < n:
        u = uniform_below(t)
        if not bernoulli_exp(u, t):
            continue
        v = 0
        while bernoulli_exp(1, 1, k=2):
            v += 1
        y = (u + t * v) // s
        negative = uniform_below(2) < 1
        if negative and y == 0:
            continue
        out.append(-y if negative else y)
    return out


def _stream(seed: int):
    """A fixed stream of 64-bit words, with words near 2^64 (rejected) mixed in."""
    rng = np.random.default_rng(seed)
    words = [int(w) for w in rng.integers(0, 2**64, size=200_000, dtype=np.uint64)]
    for i in range(0, len(words), 7):
        words[i] = 2**64 - 1 - int(rng.integers(0, 3))
    return iter(words).__next__


@pytest.mark.parametrize("t, s", [(1, 1), (2, 1), (3, 2), rational_scale(0.4),
                                  rational_scale(3.7), rational_scale(250.0)])
def test_the_inline_path_draws_what_the_algorithm_draws(t, s):
    from dpsql.mechanisms.sampling import discrete_laplace_list

    for seed in range(3):
        assert discrete_laplace_list(500, t, s, _stream(seed)) == \
            _reference(500, t, s, _stream(seed))
