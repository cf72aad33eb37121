"""The query's own parameters: (ε, δ) and per-query contribution bounds, range-checked.

Refused before anything is charged, with the parameter named; the ranges keep every
noise scale and bound product a finite double.
"""

from __future__ import annotations

import math

from dpsql.errors import PrivacyParameterError

#: Accepted range of a query's epsilon (beyond it, noise scales over- or underflow).
EPSILON_RANGE = (1e-9, 1e9)
#: Smallest positive delta: log(1/δ) stays below 231, and subnormal deltas (where
#: 1/δ overflows and the zCDP conversion breaks down) never reach the accounting.
MIN_DELTA = 1e-100
#: Largest per-query override of max_groups or max_rows: far above any useful bound, and
#: small enough that every product with a value bound stays an exact, finite double.
MAX_CONTRIBUTION = 10**6


def privacy_parameters(epsilon: float, delta: float) -> tuple[float, float]:
    """The query's (ε, δ) as floats, range-checked; PrivacyParameterError names the bad one.

    ε is finite and in :data:`EPSILON_RANGE`; δ is 0, or in [:data:`MIN_DELTA`, 1).
    """
    epsilon = _number(epsilon, "epsilon")
    delta = _number(delta, "delta")
    if not epsilon > 0:
        raise PrivacyParameterError(f"epsilon must be a positive finite number, got {epsilon:g}")
    if not EPSILON_RANGE[0] <= epsilon <= EPSILON_RANGE[1]:
        raise PrivacyParameterError(
            f"epsilon must be between {EPSILON_RANGE[0]:g} and {EPSILON_RANGE[1]:g}, "
            f"got {epsilon:g}")
    if not 0 <= delta < 1:
        raise PrivacyParameterError(f"delta must be in [0, 1), got {delta:g}")
    if 0 < delta < MIN_DELTA:
        raise PrivacyParameterError(
            f"delta must be 0 or at least {MIN_DELTA:g}, got {delta:g}")
    return epsilon, delta


def _number(value, name: str) -> float:
    """``value`` as a finite float; PrivacyParameterError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PrivacyParameterError(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the double range
        number = math.inf
    if not math.isfinite(number):
        kind = "not a number" if math.isnan(number) else "not finite"
        raise PrivacyParameterError(
            f"{name} must be a positive finite number, got a value that is {kind}"
            if name == "epsilon" else f"{name} must be in [0, 1), got a value that is {kind}")
    return number


def positive_int(value: int | None, name: str, default: int) -> int:
    """A per-query contribution bound: a whole number in [1, :data:`MAX_CONTRIBUTION`]."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        # no repr of a huge int (str() of one over 4300 digits raises) or of long text
        small = isinstance(value, float) or (
            isinstance(value, int) and value.bit_length() <= 64)
        shown = repr(value) if small else type(value).__name__
        raise PrivacyParameterError(f"{name} must be a positive integer, got {shown}")
    if value > MAX_CONTRIBUTION:
        raise PrivacyParameterError(
            f"{name} must be at most {MAX_CONTRIBUTION:,}"
            + (f", got {value:,}" if value.bit_length() <= 64 else ", got a larger number"))
    return value
