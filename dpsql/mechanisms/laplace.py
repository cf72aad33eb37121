"""Floating-point-safe Laplace noise.

Integers get *discrete* Laplace noise: ``Z`` with ``P(Z = z) ∝ exp(−|z| / scale)``,
sampled exactly by OpenDP from the operating system's secure random source. Real
values are first rounded to the grid ``2^k`` and then get discrete Laplace noise in
units of that grid (OpenDP's float Laplace), so no released value is ``float +
continuous noise`` and the low bits carry nothing (Mironov, CCS 2012).

>>> m = DiscreteLaplace(scale=2.0)
>>> m.privacy_map(1)          # epsilon for an L1 sensitivity of 1
0.5
>>> m.accuracy(0.05)          # |noise| <= 6 with probability >= 95%
6
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import opendp.prelude as dp

dp.enable_features("contrib")


@cache
def _space():
    return dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")


class DiscreteLaplace:
    """Discrete Laplace noise on integer statistics.

    Privacy map: for integer-valued statistics whose L1 sensitivity is ``Δ``, releasing
    ``x + Z`` is ``Δ / scale``-DP (the pmf ratio at any output is at most
    ``exp(Δ / scale)``; Canonne, Kamath and Steinke, NeurIPS 2020).
    """

    integer = True

    def __init__(self, scale: float):
        if not scale > 0 or not math.isfinite(scale):
            raise ValueError(f"scale must be positive and finite, got {scale}")
        self.scale = float(scale)

    def privacy_map(self, sensitivity: float) -> float:
        return sensitivity / self.scale

    def accuracy(self, alpha: float) -> int:
        """Smallest integer ``t`` with ``P(|Z| > t) <= alpha``.

        With ``q = exp(−1/scale)``: ``P(|Z| >= m) = 2 q^m / (1 + q)`` for ``m >= 1``.
        """
        q = math.exp(-1.0 / self.scale)
        m = math.ceil(math.log(alpha * (1 + q) / 2) / math.log(q))
        return max(m - 1, 0)

    def release(self, values: Sequence[int]) -> list[int]:
        if not values:
            return []
        meas = _space() >> dp.m.then_laplace(scale=self.scale)
        return list(meas([int(v) for v in values]))


class GridLaplace:
    """Laplace noise on real statistics: round to the grid ``g = 2^k``, then add
    discrete Laplace noise in units of ``g``; the output is a multiple of ``g``.

    Privacy map: for neighbours, at most ``G`` groups change, each by at most ``L∞``.
    Rounding ``x/g`` to the nearest integer can widen a difference ``d`` to at most
    ``floor(d) + 1`` grid units, so the rounded vector has integer L1 sensitivity
    ``D = G · (floor(L∞ / g) + 1)`` and discrete Laplace noise of ``scale_units`` grid
    units gives ``ε = D / scale_units``.

    >>> m = GridLaplace(scale_units=8192.0, k=-12)   # scale 2.0 in value units
    >>> m.scale
    2.0
    >>> round(m.privacy_map(linf=1.0, max_groups=1), 6)
    0.500122
    """

    integer = False

    def __init__(self, scale_units: float, k: int):
        self.units = DiscreteLaplace(scale_units)
        self.k = k
        self.grid = 2.0**k

    @property
    def scale(self) -> float:
        return self.units.scale * self.grid

    def privacy_map(self, linf: float, max_groups: int) -> float:
        return max_groups * (math.floor(linf / self.grid) + 1) / self.units.scale

    def accuracy(self, alpha: float) -> float:
        # noise in grid units, plus half a grid step lost to rounding the true value
        return self.units.accuracy(alpha) * self.grid + self.grid / 2

    def release(self, values: Sequence[float]) -> list[float]:
        rounded = [round(float(v) / self.grid) for v in values]
        return [n * self.grid for n in self.units.release(rounded)]


def laplace(
    linf: float, max_groups: int, epsilon: float, integer: bool
) -> DiscreteLaplace | GridLaplace:
    """The Laplace mechanism that spends exactly ``epsilon`` on a statistic vector.

    Args:
        linf: per-group sensitivity (one user's largest partial aggregate).
        max_groups: how many groups one user may touch (L1 = max_groups · linf).
        epsilon: the share of the budget this statistic may spend.
        integer: whether the statistic is integer-valued (then plain discrete Laplace).

    >>> laplace(linf=3, max_groups=1, epsilon=0.5, integer=True).scale
    6.0
    >>> m = laplace(linf=1000.0, max_groups=2, epsilon=0.5, integer=False)
    >>> m.privacy_map(1000.0, 2) <= 0.5, round(m.scale)
    (True, 4002)
    """
    if not epsilon > 0:
        raise ValueError("epsilon must be positive")
    if integer:
        return DiscreteLaplace(max_groups * linf / epsilon)
    k = math.floor(math.log2(max_groups * linf / epsilon)) - 12
    units = max_groups * (math.floor(linf / 2.0**k) + 1) / epsilon
    return GridLaplace(units, k)
