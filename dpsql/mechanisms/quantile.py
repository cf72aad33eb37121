"""DP quantiles (MEDIAN, PERCENTILE_CONT, MIN, MAX) from one noisy histogram.

The mechanism: the clamped range ``[L, U]`` of the aggregated value is cut into at most
:data:`MAX_BINS` equal bins; the backend counts each group's rows per bin, with each
user's counts in a group scaled to sum to at most ``R`` (``max_rows``); every bin count
gets noise calibrated to that per-group L1 bound (see
:func:`dpsql.analyze.sensitivity.partial_range`). Every quantile of the same value in
the same group is then read off the one noisy histogram, so ``MIN``, ``MEDIAN`` and
``MAX`` of ``x`` cost one statistic, not three: post-processing is free.

Accuracy, documented and computed per cell. With noisy counts ``ĉ_j`` and
``D̂_k = Σ_{j<k} ĉ_j − q Σ_j ĉ_j`` (mass below edge ``k`` minus the target rank), the
error of ``D̂_k`` is the weighted noise sum ``Σ_{j<k} (1−q) e_j − Σ_{j≥k} q e_j``. A
Chernoff bound on that sum (:func:`edge_errors`; the exact moment generating function
of the discrete Laplace, the sub-Gaussian bound of the discrete Gaussian) gives ``w_k``
with ``P(|error| > w_k) ≤ α / (B + 1)``, so with probability ``1 − α`` every ``D_k`` lies
in ``D̂_k ± w_k`` at once. The true quantile of the bounded data lies above every edge
with ``D̂_k + w_k < 0`` and below every edge with ``D̂_k − w_k > 0``: that range is the
error bar. It is computed from noisy values only. The bin width is a floor on the
resolution: a quantile is never located more finely than one bin.

>>> bins = Bins.for_interval(0, 100, integer=True)
>>> bins.count, bins.step, bins.edges[:3].tolist()
(51, 2, [-0.5, 1.5, 3.5])
>>> float(estimate([0, 10, 10, 0] + [0] * 47, 0.5, bins))
3.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsql.errors import PrivacyParameterError, UnboundedExpressionError

#: Most bins of one histogram: finer bins mean more noise in each prefix sum.
MAX_BINS = 64


@dataclass(frozen=True)
class Bins:
    """Equal bins over ``[lower, upper]``; ``edges`` has ``count + 1`` boundaries.

    Integer values get whole-number bins of ``step`` values each, with edges halfway
    between integers, so a bin holds exactly the integers ``L + j·step … L + (j+1)·step − 1``
    and an interpolated quantile of constant data is that constant.
    """

    lower: float
    upper: float
    count: int
    integer: bool
    step: float

    @classmethod
    def for_interval(cls, lower: float, upper: float, integer: bool) -> Bins:
        try:
            finite = math.isfinite(lower) and math.isfinite(upper) and lower <= upper
        except OverflowError:  # an int beyond the double range
            finite = False
        if not finite:
            raise UnboundedExpressionError(
                "a quantile needs finite value bounds (lower <= upper) within the range of "
                "a double")
        if integer:
            values = int(upper) - int(lower) + 1
            # integer ceilings: values / MAX_BINS in floats loses whole numbers past 2^53
            step = -(-values // MAX_BINS)
            return cls(lower, upper, -(-values // step), True, step)
        if upper <= lower:
            return cls(lower, upper, 1, False, 0.0)
        # the step of a float range; edges below are computed without overflow
        return cls(lower, upper, MAX_BINS, False, upper / MAX_BINS - lower / MAX_BINS)

    @property
    def edges(self) -> np.ndarray:
        j = np.arange(self.count + 1, dtype=np.float64)
        if self.integer:
            return self.lower - 0.5 + j * self.step
        if self.count == 1:
            return np.array([self.lower, self.upper], dtype=np.float64)
        # lower + j·step without overflow near the float maximum
        edges = self.lower * (1 - j / self.count) + self.upper * (j / self.count)
        edges[0], edges[-1] = self.lower, self.upper
        return edges

    def clip(self, value: float) -> float:
        return float(min(max(value, self.lower), self.upper))


def estimate(counts, q: float, bins: Bins, threshold: float = 0.0) -> float:
    """The ``q``-quantile of a noisy histogram, interpolated inside its bin.

    Negative noisy counts are read as 0. For ``q`` = 0 or 1 (MIN, MAX) only bins whose
    noisy count exceeds ``threshold`` (the per-bin noise level) count as occupied, or
    noise in empty bins near the bounds would pull the answer to them. An empty
    histogram answers the middle of the range.
    """
    c = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    if q in (0.0, 1.0):
        c = np.where(c > threshold, c, 0.0)
    total = c.sum()
    edges = bins.edges
    if not total > 0:
        return bins.clip(edges[0] / 2 + edges[-1] / 2)
    target = q * total
    cum = np.cumsum(c)
    candidates = np.nonzero((cum >= target) & (c > 0))[0]
    k = int(candidates[0]) if candidates.size else int(np.nonzero(c > 0)[0][-1])
    below = cum[k] - c[k]
    frac = min(max((target - below) / c[k], 0.0), 1.0)
    value = edges[k] + frac * (edges[k + 1] - edges[k])
    if bins.integer and q in (0.0, 1.0):  # the smallest or largest whole value of the bin
        value = math.ceil(value) if q == 0.0 else math.floor(value)
    return bins.clip(value)


def interval(counts, q: float, bins: Bins, mechanism, alpha: float) -> tuple[float, float]:
    """A ``1 − alpha`` interval for the ``q``-quantile of the bounded data.

    >>> from dpsql.mechanisms import DiscreteLaplace
    >>> bins = Bins.for_interval(0, 63, integer=True)
    >>> counts = [0] * 20 + [1000] + [0] * 43       # everyone at 20, little noise
    >>> interval(counts, 0.5, bins, DiscreteLaplace(1.0), 0.05)
    (20.0, 20.0)
    """
    c = np.asarray(counts, dtype=np.float64)
    prefix = np.concatenate(([0.0], np.cumsum(c)))
    d = prefix - q * prefix[-1]
    w = edge_errors(mechanism, q, bins.count, alpha / (bins.count + 1))
    edges = bins.edges
    below = np.nonzero(d + w < 0)[0]
    above = np.nonzero(d - w > 0)[0]
    low = edges[below[-1]] if below.size else edges[0]
    high = edges[above[0]] if above.size else edges[-1]
    if low > high:  # outside the 1 − alpha event the two sides may cross
        low, high = high, low
    low, high = bins.clip(low), bins.clip(high)
    if bins.integer:  # an integer quantile between edges k − ½ and m − ½ lies in [k, m − 1]
        low, high = bins.clip(math.ceil(low)), bins.clip(math.floor(high))
    return (low, max(low, high))


def edge_errors(mechanism, q: float, count: int, alpha: float) -> np.ndarray:
    """``w_k`` for ``k = 0 … count``: ``P(|Σ_{j<k}(1−q)e_j − Σ_{j≥k} q e_j| > w_k) ≤ alpha``.

    ``e_j`` are independent draws of the mechanism's noise. For ``t > 0`` and any
    ``λ > 0``, Chernoff gives ``P(S > t) ≤ exp(−λt) · Π_j E[exp(λ a_j e_j)]``; the noise is
    symmetric, so doubling bounds ``|S|``. The bound holds for every ``λ``, so taking the
    best of a grid of ``λ`` values is valid (merely not always optimal). Real statistics
    on a grid also carry their rounding, at most half a grid step per bin.

    >>> from dpsql.mechanisms.gaussian import DiscreteGaussian
    >>> w = edge_errors(DiscreteGaussian(2.0), 0.5, 4, 0.05)
    >>> [round(float(x), 2) for x in w]   # sqrt(2 σ² Σa² ln(2/α)), Σa² = 4 · 0.25
    [5.43, 5.43, 5.43, 5.43, 5.43]
    """
    k = np.arange(count + 1, dtype=np.float64)
    high, low = k, count - k  # coordinates weighted (1 − q) and q
    if alpha == 0:  # a level that underflowed: no finite bound
        return np.full(count + 1, np.inf)
    if not 0 < alpha < 1:
        raise PrivacyParameterError(f"alpha must be in (0, 1), got {alpha!r}")
    log_2_over_alpha = math.log(2) - math.log(alpha)  # 2/α overflows for a tiny α
    grid = getattr(mechanism, "grid", None)
    units = getattr(mechanism, "units", mechanism)
    g = grid if grid is not None else 1.0
    rounding = (g / 2) * (high * (1 - q) + low * q) if grid is not None else 0.0
    if units.scale == 0:  # no noise (a constant statistic)
        return np.zeros(count + 1) + rounding
    # a second valid bound, tight for few coordinates: if all n weighted draws stay
    # within m, |S| <= m · Σ|a_j|; the union bound picks m at level alpha / n
    n = (high * (q < 1) + low * (q > 0)).astype(int)
    weight = high * (1 - q) + low * q
    union = np.array([units.accuracy(alpha / max(int(x), 1)) for x in n], dtype=np.float64)
    union = union * weight
    # the family's own tail bound (UnitNoise.edge_chernoff)
    chernoff = units.edge_chernoff(q, high, low, log_2_over_alpha)
    return np.minimum(chernoff, union) * g + rounding

