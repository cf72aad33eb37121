"""Floating-point-safe Gaussian noise, accounted in zero-concentrated DP (ρ).

Integers get the *discrete* Gaussian ``P(Z = z) ∝ exp(−z² / (2σ²))``, sampled exactly
by OpenDP (Canonne, Kamath and Steinke 2020, Algorithm 3) from the operating system's
CSPRNG. Real values are rounded to the grid ``2^k`` first and get discrete Gaussian
noise in grid units, as for Laplace.

Privacy map: for integer vectors whose L2 distance is at most ``Δ₂``, adding discrete
Gaussian noise of parameter σ to every coordinate is ``Δ₂² / (2σ²)``-zCDP (CKS 2020,
Theorem 14). After contribution bounding at most ``G`` groups change, each by at most
``L∞``, so ``Δ₂² = G · L∞²``; on the grid each changed coordinate moves by at most
``floor(L∞/g) + 1`` units.

>>> m = DiscreteGaussian(sigma=2.0)
>>> m.privacy_map(1)     # rho for an L2 sensitivity of 1
0.125
>>> m.accuracy(0.05)
4
>>> gaussian(linf=1, max_groups=4, rho=0.5, integer=True).scale   # sqrt(4 / (2 * 0.5))
2.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from statistics import NormalDist

import numpy as np
import opendp.prelude as dp

from dpsql.errors import PrivacyParameterError
from dpsql.mechanisms.base import BudgetSplit
from dpsql.mechanisms.laplace import MAX_UNITS, MIN_UNITS, Grid, check_inputs, check_scale

dp.enable_features("contrib")

_INTEGER_SCALE_LIMIT = 2.0**40


@cache
def _space():
    return dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64")


class DiscreteGaussian:
    """Discrete Gaussian noise of parameter ``sigma`` on integer statistics."""

    integer = True
    label = "discrete Gaussian"

    def __init__(self, sigma: float):
        if not MIN_UNITS <= sigma <= MAX_UNITS:  # also refuses nan and inf
            raise PrivacyParameterError(
                f"discrete Gaussian noise of sigma {sigma:.3g} is outside the exact "
                "sampler's range [2^-40, 2^48]: raise epsilon or delta, or lower max_groups")
        self.sigma = float(sigma)

    @property
    def scale(self) -> float:
        return self.sigma

    def privacy_map(self, linf: float, max_groups: int = 1) -> float:
        """ρ of releasing a vector in which ``max_groups`` coordinates (groups) change,
        each by at most ``linf`` in L2: squared L2 sensitivity ``max_groups · linf²``."""
        return self.rho(max_groups * linf * linf)

    def rho(self, l2_squared: float) -> float:
        """ρ of releasing a vector whose squared L2 sensitivity is ``l2_squared``."""
        return l2_squared / (2 * self.sigma**2)

    def accuracy(self, alpha: float) -> int:
        """Smallest integer ``t`` with ``P(|Z| > t) <= alpha``.

        Exact (from the pmf) for σ up to 1,000; beyond, ``ceil(σ·z_{1−α/2}) + 1``, which
        bounds it because the discrete Gaussian's tails are no heavier than those of
        the continuous Gaussian shifted by one (CKS 2020, Prop. 25).
        """
        if alpha == 0:  # a level that underflowed (alpha split over many statistics)
            return math.inf
        if not 0 < alpha < 1:
            raise PrivacyParameterError(f"alpha must be in (0, 1), got {alpha!r}")
        if self.sigma > 1000 or alpha < 1e-12:  # the pmf's sums resolve no finer level
            # −Φ⁻¹(α/2), not Φ⁻¹(1 − α/2): 1 − α/2 rounds to 1 for α < 1e-16
            return math.ceil(self.sigma * -NormalDist().inv_cdf(alpha / 2)) + 1
        span = int(self.sigma * 40) + 10
        z = np.arange(-span, span + 1)
        pmf = np.exp(-(z.astype(float) ** 2) / (2 * self.sigma**2))
        pmf /= pmf.sum()
        central = np.cumsum(pmf[span:] * np.where(np.arange(span + 1) == 0, 1, 2))
        return int(np.searchsorted(central, 1 - alpha - 1e-15))

    def sample(self, n: int) -> np.ndarray:
        meas = _space() >> dp.m.then_gaussian(scale=self.sigma)
        return np.asarray(meas([0] * n), dtype=np.int64)

    def draws(self, n: int) -> list[int]:
        """``n`` noise draws as Python integers."""
        return self.sample(n).tolist()

    def release(self, values: Sequence[int]) -> list[int]:
        if len(values) == 0:
            return []
        noise = self.draws(len(values))
        return [int(v) + z for v, z in zip(values, noise, strict=True)]

    def edge_chernoff(self, q: float, high: np.ndarray, low: np.ndarray,
                      log_2_over_alpha: float) -> np.ndarray:
        """Chernoff bound on ``high`` draws weighted ``1 − q`` less ``low`` weighted ``q``.

        The discrete Gaussian is sub-Gaussian with variance proxy σ² (Canonne, Kamath,
        Steinke 2020, Cor. 9), so the weighted sum is too, with proxy ``σ² Σ a_j²``.
        """
        sq = high * (1 - q) ** 2 + low * q**2
        return np.sqrt(2 * self.scale**2 * sq * log_2_over_alpha)


class GridGaussian(Grid):
    """Gaussian noise on real statistics: round to ``2^k``, then discrete Gaussian."""

    label = "grid Gaussian"

    def __init__(self, sigma_units: float, k: int, width: int = 1):
        super().__init__(DiscreteGaussian(sigma_units), k, width)

    def privacy_map(self, linf: float, max_groups: int = 1) -> float:
        return self.units.rho(max_groups * _l2_units(linf, self.grid, self.width))


def _l2_units(linf: float, grid: float, width: int) -> float:
    """Squared L2 change of one group after rounding to ``grid``, in grid units.

    A scalar moves by at most ``floor(L∞/g) + 1`` units. A histogram's non-negative
    partials ``d_j`` (``Σ d_j ≤ L∞``) move ``width`` coordinates by ``a_j + 1`` units each,
    ``a_j = floor(d_j/g)``, ``Σ a_j ≤ A = floor(L∞/g)``; ``Σ (a_j + 1)²`` is convex, so its
    largest value is at a vertex: ``(A + 1)² + (width − 1)``. (Before rounding a
    histogram's L2 change is at most its L1 change, ``L∞``.)
    """
    return (math.floor(linf / grid) + 1) ** 2 + (width - 1)


def gaussian(linf: float, max_groups: int, rho: float,
             integer: bool, width: int = 1) -> DiscreteGaussian | GridGaussian:
    """The Gaussian mechanism that spends exactly ``rho`` (zCDP) on a statistic vector.

    ``linf`` is a group's largest L2 change (for scalars the L∞ partial; for a histogram
    of ``width`` bins, its L1 bound, which also bounds L2).
    """
    linf, rho = check_inputs(linf, max_groups, rho, "rho")
    # linf · sqrt(G / 2ρ), not sqrt(G · linf² / 2ρ): linf² overflows for linf > 1e154
    sigma = check_scale(linf * math.sqrt(max_groups / (2 * rho)),
                        "sensitivity · sqrt(max_groups / (2 rho))")
    if integer and sigma < _INTEGER_SCALE_LIMIT:
        return DiscreteGaussian(sigma)
    k = math.floor(math.log2(sigma)) - 12
    return GridGaussian(math.sqrt(max_groups * _l2_units(linf, 2.0**k, width) / (2 * rho)),
                        k, width)


def rho_for(epsilon: float, delta: float) -> float:
    """The largest ρ whose zCDP → (ε, δ) conversion stays within ``epsilon``.

    The search starts from the ρ at which the classic conversion ``ρ + 2√(ρ log(1/δ))``
    equals ε (:func:`~dpsql.accounting.zcdp_to_dp` is never above it, so that ρ is
    admissible), doubles to an upper end and bisects between the two: relative
    precision, however small ε is (a bisection of [0, 1] would stop at 2^-60).

    >>> from dpsql.accounting import zcdp_to_dp
    >>> r = rho_for(1.0, 1e-6)
    >>> zcdp_to_dp(r, 1e-6) <= 1.0 < zcdp_to_dp(r * 1.001, 1e-6)
    True
    >>> r = rho_for(1e-9, 1e-100)
    >>> 0 < r and zcdp_to_dp(r, 1e-100) <= 1e-9 < zcdp_to_dp(r * 1.001, 1e-100)
    True
    """
    from dpsql.accounting import zcdp_to_dp

    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise PrivacyParameterError(f"epsilon must be positive and finite, got {epsilon!r}")
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise PrivacyParameterError(f"gaussian noise needs 0 < delta < 1, got {delta!r}")
    log_inv = -math.log(delta)
    # √ρ = √(L + ε) − √L, written without cancellation for ε much smaller than L
    low = (epsilon / (math.sqrt(log_inv + epsilon) + math.sqrt(log_inv))) ** 2
    low *= 1 - 1e-9  # float round-off must not put the start just above ε
    if not (low > 0 and zcdp_to_dp(low, delta) <= epsilon):
        raise PrivacyParameterError(
            f"epsilon = {epsilon:g} at delta = {delta:g} leaves no zCDP budget (rho "
            "underflows): raise epsilon")
    high = 2 * low
    for _ in range(64):  # the conversion is at least ρ, so ρ = 2ε is above: few steps
        if zcdp_to_dp(high, delta) > epsilon:
            break
        low, high = high, 2 * high
    for _ in range(60):
        mid = (low + high) / 2
        if zcdp_to_dp(mid, delta) <= epsilon:
            low = mid
        else:
            high = mid
    return low


class Gaussian:
    """The Gaussian family: statistics in zero-concentrated DP (ρ), converted to (ε, δ).

    Split: δ is halved between partition selection (when keys come from the data) and
    the zCDP → (ε, δ) conversion; ρ is the largest whose conversion at the δ left stays
    within ε (:func:`rho_for`), shared equally by the ``n`` parts; partition selection
    is one part: ε-DP with ``ε = √(2 ρ_share)`` is ``ε²/2 = ρ_share``-zCDP. Approximate
    zCDP composes by adding ρ and δ, so the release is (ε, δ)-DP.
    """

    name = "gaussian"
    budget = "rho"
    needs_delta = True
    description = "Gaussian (needs delta > 0)"

    def split(self, epsilon: float, delta: float, parts: int,
              selecting: bool) -> BudgetSplit:
        selection_delta = delta / 2 if selecting else 0.0
        rho_total = rho_for(epsilon, delta - selection_delta) if parts else 0.0
        share = rho_total / parts if parts else 0.0
        return BudgetSplit(share, math.sqrt(2 * share), selection_delta, rho_total)

    def calibrate(self, linf: float, max_groups: int, share: float, integer: bool,
                  width: int = 1) -> DiscreteGaussian | GridGaussian:
        return gaussian(linf, max_groups, share, integer, width)


#: The Gaussian family (registered in :data:`dpsql.mechanisms.MECHANISMS`).
GAUSSIAN = Gaussian()
