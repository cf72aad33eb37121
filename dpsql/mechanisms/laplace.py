"""Floating-point-safe Laplace noise.

Integers get *discrete* Laplace noise: ``Z`` with ``P(Z = z) ∝ exp(−|z| / scale)``,
sampled exactly (:mod:`dpsql.mechanisms.sampling`, integer arithmetic on the operating
system's CSPRNG). The scale is held as a rational ``t/s`` rounded *up* from the one
requested, and the privacy map uses that exact rational. Real values are first rounded
to the grid ``2^k`` and then get discrete Laplace noise in units of that grid, so no
released value is ``float + continuous noise`` and the low bits carry nothing
(Mironov, CCS 2012).

>>> m = DiscreteLaplace(scale=2.0)
>>> m.privacy_map(1)          # epsilon for an L1 sensitivity of 1
0.5
>>> m.accuracy(0.05)          # |noise| <= 6 with probability >= 95%
6
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

import numpy as np

from dpsql.errors import PrivacyParameterError
from dpsql.mechanisms.base import BudgetSplit
from dpsql.mechanisms.sampling import (
    SMALL,
    discrete_laplace,
    discrete_laplace_list,
    rational_scale,
)

_SAFE = 2**62  # integer statistics below this add noise in int64 without overflow
#: Above this scale, integer statistics take the grid path (the exact sampler works in
#: int64 and needs scale · 2^PRECISION-sized integers to fit).
_INTEGER_SCALE_LIMIT = 2.0**40

#: Noise scales (value units) dpsql calibrates. Beyond them the grid ``2^k`` or the error
#: bars would leave the normal range of a double (a grid of 0 or inf), so a query whose
#: ``max_groups · sensitivity / epsilon`` falls outside is refused before the charge.
MIN_SCALE = 2.0**-900
MAX_SCALE = 2.0**900
#: Scales (noise units) of the exact integer samplers: below MAX_UNITS the int64
#: arithmetic of the sampler cannot overflow and ``exp(−1/scale)`` stays below 1 in
#: double precision; above MIN_UNITS the rational scale ``t/s`` has ``s <= 2^60``.
MIN_UNITS = 2.0**-40
MAX_UNITS = 2.0**48


def check_inputs(linf: float, max_groups: int, budget: float,
                 budget_name: str) -> tuple[float, float]:
    """Refuses (PrivacyParameterError) inputs a mechanism cannot calibrate in floats.

    Args:
        linf: the per-group sensitivity: finite and positive (an int may be huge: it must
            still fit a double).
        max_groups: groups per user: a positive integer at most 2^53 (exact as a float).
        budget: the statistic's epsilon (or rho): finite and positive.
        budget_name: ``"epsilon"`` or ``"rho"``, for the message.

    Returns:
        ``linf`` and ``budget`` as floats.
    """
    if isinstance(max_groups, bool) or not isinstance(max_groups, int | np.integer) or not (
            1 <= max_groups <= 2**53):
        raise PrivacyParameterError(
            f"max_groups must be a positive integer at most 2^53, got {max_groups!r}")
    try:
        linf_f = float(linf)
    except (OverflowError, TypeError, ValueError):
        linf_f = math.nan
    if not (math.isfinite(linf_f) and linf_f > 0):
        raise PrivacyParameterError(
            "a statistic's sensitivity is not a positive finite number: the value bounds "
            "(times max_rows) are too large to calibrate noise; narrow them")
    try:
        budget_f = float(budget)
    except (OverflowError, TypeError, ValueError):
        budget_f = math.nan
    if not (math.isfinite(budget_f) and budget_f > 0):
        raise PrivacyParameterError(
            f"a statistic's share of the budget ({budget_name}) is not a positive finite "
            "number")
    return linf_f, budget_f


def check_scale(scale: float, what: str) -> float:
    """``scale`` if it lies in [MIN_SCALE, MAX_SCALE]; else PrivacyParameterError."""
    if not MIN_SCALE <= scale <= MAX_SCALE:  # also refuses nan
        raise PrivacyParameterError(
            f"{what} gives a noise scale of {scale:.3g}, outside the range dpsql calibrates "
            f"([{MIN_SCALE:.3g}, {MAX_SCALE:.3g}]): raise epsilon, lower max_groups or "
            "max_rows, or narrow the value bounds")
    return scale


class DiscreteLaplace:
    """Discrete Laplace noise on integer statistics.

    Privacy map: for integer-valued statistics whose L1 sensitivity is ``Δ``, releasing
    ``x + Z`` is ``Δ / scale``-DP (the pmf ratio at any output is at most
    ``exp(Δ / scale)``; Canonne, Kamath and Steinke, NeurIPS 2020).
    """

    integer = True
    label = "discrete Laplace"

    def __init__(self, scale: float):
        if not MIN_UNITS <= scale <= MAX_UNITS:  # also refuses nan and inf
            raise PrivacyParameterError(
                f"discrete Laplace noise of scale {scale:.3g} is outside the exact "
                f"sampler's range [2^-40, 2^48]: raise epsilon or lower max_groups")
        self.t, self.s = rational_scale(float(scale))
        self.scale = self.t / self.s

    def privacy_map(self, linf: float, max_groups: int = 1) -> float:
        """ε for an L1 sensitivity of ``max_groups · linf`` (the exact rational scale)."""
        return max_groups * linf * self.s / self.t

    def accuracy(self, alpha: float) -> int:
        """Smallest integer ``t`` with ``P(|Z| > t) <= alpha``.

        With ``q = exp(−1/scale)``: ``P(|Z| >= m) = 2 q^m / (1 + q)`` for ``m >= 1``.
        ``log q = −s/t`` is taken exactly, not as ``log(exp(−s/t))``, which loses the
        relative precision of ``1 − q`` for large scales (and is 0 once ``q`` rounds to 1).
        """
        if alpha == 0:  # a level that underflowed (alpha split over many statistics)
            return math.inf
        if not 0 < alpha < 1:
            raise PrivacyParameterError(f"alpha must be in (0, 1), got {alpha!r}")
        q = math.exp(-self.s / self.t)
        if q == 0.0:  # scale so small that P(Z != 0) underflows
            return 0
        # log(α(1 + q)/2) as a sum of logs: the product underflows for a tiny α
        m = math.ceil((math.log(alpha) + math.log1p(q) - math.log(2)) * self.t / -self.s)
        return max(m - 1, 0)

    def sample(self, n: int) -> np.ndarray:
        """``n`` noise draws (int64)."""
        return discrete_laplace(n, self.t, self.s)

    def draws(self, n: int) -> list[int]:
        """``n`` noise draws as Python integers: what every release adds.

        A query's few draws (up to :data:`~dpsql.mechanisms.sampling.SMALL`) come from
        the sampler on Python integers with no numpy array on the way; more from
        :meth:`sample`. The same distribution either way.
        """
        if n <= SMALL:
            return discrete_laplace_list(n, self.t, self.s)
        return self.sample(n).tolist()

    def edge_chernoff(self, q: float, high: np.ndarray, low: np.ndarray,
                      log_2_over_alpha: float) -> np.ndarray:
        """Chernoff bound on ``high`` draws weighted ``1 − q`` less ``low`` weighted ``q``.

        With ``p = exp(−1/scale)``: ``E[e^{λz}] = (1 − p)² / ((1 − p e^λ)(1 − p e^{−λ}))``
        for ``|λ| < 1/scale``, computed in logs so that tiny scales do not overflow. Any
        ``λ`` gives a valid bound, so the best of a grid of them is taken.
        """
        log_p = -1 / self.scale
        a = max(q, 1 - q)
        lam = np.geomspace(1e-6, 0.999, 600)[:, None] / (self.scale * a)

        def log_mgf(x):
            return (2 * np.log1p(-np.exp(log_p)) - np.log1p(-np.exp(log_p + x))
                    - np.log1p(-np.exp(log_p - x)))

        total = high * log_mgf(lam * (1 - q)) + low * log_mgf(lam * q)
        t = ((total + log_2_over_alpha) / lam).min(axis=0)
        t[high * (1 - q) + low * q == 0] = 0.0  # an empty weighted sum is exactly 0
        return t

    def release(self, values: Sequence[int]) -> list[int]:
        if len(values) == 0:
            return []
        noise = self.draws(len(values))
        if len(values) > SMALL and all(-_SAFE < int(v) < _SAFE for v in values):
            return (np.asarray(values, dtype=np.int64) + np.asarray(noise, dtype=np.int64)
                    ).tolist()
        return [int(v) + int(z) for v, z in zip(values, noise, strict=True)]


class Constant:
    """No noise, for a statistic that no user can change (sensitivity 0)."""

    integer = True
    scale = 0.0
    label = "none (constant)"

    def privacy_map(self, linf: float = 0.0, max_groups: int = 1) -> float:
        return 0.0

    def accuracy(self, alpha: float) -> int:
        return 0

    def sample(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.int64)

    def draws(self, n: int) -> list[int]:
        return [0] * n

    def release(self, values: Sequence) -> list:
        return list(values)


class Grid:
    """Real statistics on the grid ``g = 2^k``: round, noise in grid units, scale back.

    Subclasses set ``units`` (an integer mechanism) and define the privacy map.
    """

    integer = False
    units: DiscreteLaplace

    def __init__(self, units, k: int, width: int = 1):
        if not -1000 <= k <= 1000:  # 2^k a normal double, its multiples too
            raise PrivacyParameterError(f"grid 2^{k} is outside the range of a double")
        self.units = units
        self.k = k
        self.grid = 2.0**k
        #: coordinates per group one user can change (a histogram's bins; 1 otherwise)
        self.width = width

    @property
    def scale(self) -> float:
        return self.units.scale * self.grid

    def accuracy(self, alpha: float) -> float:
        # noise in grid units, plus half a grid step lost to rounding the true value
        return self.units.accuracy(alpha) * self.grid + self.grid / 2

    def sample(self, n: int) -> np.ndarray:
        """``n`` noise draws in value units (multiples of the grid step)."""
        return self.units.sample(n).astype(np.float64) * self.grid

    def release(self, values: Sequence[float]) -> list[float]:
        if len(values) == 0:
            return []
        noise = np.asarray(self.units.draws(len(values)), dtype=np.int64)
        # an exact value no float equals (an engine's DECIMAL sum, a huge integer) is
        # rounded to the grid exactly, without a float detour; every other value as a
        # float, where v / 2^k is exact and rint rounds half to even, as the privacy
        # maps allow (and as the exact rounding does)
        kinds = {type(v) for v in values}
        exact = set() if kinds <= {float, np.float64} else \
            {i for i, v in enumerate(values) if _not_a_float(v)}
        if not exact:
            floats = np.asarray(values, dtype=np.float64)
        else:
            floats = np.asarray([0.0 if i in exact else _float(v)
                                 for i, v in enumerate(values)], dtype=np.float64)
        out = ((np.rint(floats / self.grid) + noise.astype(np.float64)) * self.grid).tolist()
        for i in exact:
            out[i] = _times_grid(_grid_units(values[i], self.k) + int(noise[i]), self.k)
        return out

    def release_units(self, units: Sequence[int]) -> list[float]:
        """Noised values of statistics the engine already summed in whole grid units
        (:mod:`dpsql.grid_units`): ``(units + noise) · 2^k``, each the nearest float.

        Nothing is rounded here: the integers are exact, the noise is added to them in
        integer arithmetic, and only the released multiple of ``2^k`` meets a float.
        """
        if len(units) == 0:
            return []
        noise = self.units.draws(len(units))
        # int64 holds units + noise below 2^62 (the noise's own bound, as in
        # DiscreteLaplace.release); the float of an int64 is correctly rounded and
        # ldexp by 2^k exact while the result stays below 2^1023 (k <= 959). A few
        # values go the way of Python integers, which gives the very same floats
        # (float() of an integer is correctly rounded too, and math.ldexp is C's)
        if len(units) > SMALL and self.k <= 959 and all(-_SAFE < int(u) < _SAFE for u in units):
            total = np.asarray(units, dtype=np.int64) + np.asarray(noise, dtype=np.int64)
            return np.ldexp(total.astype(np.float64), self.k).tolist()
        return [_times_grid(int(u) + int(z), self.k) for u, z in zip(units, noise, strict=True)]


#: Context of the exact grid rounding: no traps, and precision enough for a DECIMAL's
#: digits times 2^|k| (|k| <= 1000: at most 1000 more digits) without rounding.
_EXACT = decimal.Context(prec=4000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[])


def _grid_units(value, k: int) -> int:
    """``value / 2^k`` rounded half to even, exactly: a DECIMAL times the exact decimal
    of ``2^-k`` (a float power of two), or a Fraction for an integer."""
    if isinstance(value, Decimal):
        scaled = _EXACT.multiply(value, Decimal(2.0**-k))
        return int(scaled.to_integral_value(rounding=decimal.ROUND_HALF_EVEN, context=_EXACT))
    return round(Fraction(value) / Fraction(2) ** k)


def _not_a_float(value) -> bool:
    """Whether ``value`` differs from every float: a DECIMAL with more digits than a
    double holds (or beyond its range), an integer above 2**53. Context-free: the
    comparison of a DECIMAL with the exact DECIMAL of a float rounds nothing."""
    if isinstance(value, Decimal):
        return value.is_finite() and Decimal(float(value)) != value
    return isinstance(value, int) and abs(value) > 2**53


def _float(value) -> float:
    """``float(value)``; a DECIMAL NaN (which :func:`dpsql.noise._number` never hands
    over) as 0 rather than an error."""
    if isinstance(value, Decimal) and value.is_nan():
        return 0.0
    return float(value)


def _times_grid(units: int, k: int) -> float:
    """``units · 2^k`` as the nearest float (the float of ``units`` is correctly
    rounded and scaling by a power of two is exact); beyond the double range, ±inf."""
    try:
        return math.ldexp(float(units), k)
    except OverflowError:
        return math.copysign(math.inf, units)


class GridLaplace(Grid):
    """Laplace noise on real statistics: round to the grid ``g = 2^k``, then add
    discrete Laplace noise in units of ``g``; the output is a multiple of ``g``.

    Privacy map: for neighbours, at most ``G`` groups change, each by at most ``L∞``.
    Rounding ``x/g`` to the nearest integer can widen a difference ``d`` to at most
    ``floor(d) + 1`` grid units, so the rounded vector has integer L1 sensitivity
    ``D = G · (floor(L∞ / g) + 1)`` and discrete Laplace noise of ``scale_units`` grid
    units gives ``ε = D / scale_units``. A statistic with ``width`` coordinates per group
    whose per-group L1 change is at most ``L∞`` (a histogram: a user's non-negative bin
    partials sum to at most ``R``) rounds each changed coordinate up by at most one unit:
    ``D = G · (floor(L∞ / g) + width)``, since ``Σ floor(d_j / g) ≤ floor(Σ d_j / g)``.

    >>> m = GridLaplace(scale_units=8192.0, k=-12)   # scale 2.0 in value units
    >>> m.scale
    2.0
    >>> round(m.privacy_map(linf=1.0, max_groups=1), 6)
    0.500122
    """

    label = "grid Laplace"

    def __init__(self, scale_units: float, k: int, width: int = 1):
        super().__init__(DiscreteLaplace(scale_units), k, width)

    def privacy_map(self, linf: float, max_groups: int = 1) -> float:
        return max_groups * (math.floor(linf / self.grid) + self.width) / self.units.scale


def laplace(
    linf: float, max_groups: int, epsilon: float, integer: bool, width: int = 1
) -> DiscreteLaplace | GridLaplace:
    """The Laplace mechanism that spends exactly ``epsilon`` on a statistic vector.

    Args:
        linf: per-group sensitivity (one user's largest partial aggregate).
        max_groups: how many groups one user may touch (L1 = max_groups · linf).
        epsilon: the share of the budget this statistic may spend.
        integer: whether the statistic is integer-valued (then plain discrete Laplace).
        width: coordinates per group (histogram bins) sharing the per-group L1 bound
            ``linf``; 1 for a scalar statistic.

    >>> laplace(linf=3, max_groups=1, epsilon=0.5, integer=True).scale
    6.0
    >>> m = laplace(linf=1000.0, max_groups=2, epsilon=0.5, integer=False)
    >>> m.privacy_map(1000.0, 2) <= 0.5, round(m.scale)
    (True, 4002)
    """
    linf, epsilon = check_inputs(linf, max_groups, epsilon, "epsilon")
    scale = check_scale(max_groups * linf / epsilon, "max_groups · sensitivity / epsilon")
    if integer and scale < _INTEGER_SCALE_LIMIT:
        return DiscreteLaplace(scale)
    k = math.floor(math.log2(scale)) - 12
    units = max_groups * (math.floor(linf / 2.0**k) + width) / epsilon
    return GridLaplace(units, k, width)


class Laplace:
    """The Laplace family: pure ε-DP statistics, the budget shared equally.

    Split: with ``n`` parts (noisy statistics, plus partition selection when keys come
    from the data, plus a bias check), each gets ``ε / n`` and partition selection all
    of δ; by basic composition the release is (ε, δ)-DP (δ = 0 without selection).
    """

    name = "laplace"
    budget = "epsilon"
    needs_delta = False
    description = "discrete Laplace"

    def split(self, epsilon: float, delta: float, parts: int,
              selecting: bool) -> BudgetSplit:
        share = epsilon / parts if parts else 0.0
        return BudgetSplit(share, share, delta)

    def calibrate(self, linf: float, max_groups: int, share: float, integer: bool,
                  width: int = 1) -> DiscreteLaplace | GridLaplace:
        return laplace(linf, max_groups, share, integer, width)


#: The Laplace family (registered in :data:`dpsql.mechanisms.MECHANISMS`).
LAPLACE = Laplace()
