"""The grid rounds a statistic's exact value, not the nearest float (attack reviews of
issue #23): PostgreSQL's NUMERIC sums come back exact, and ``float()`` first rounded two
neighbours' sums ``L∞`` apart into different binades, one grid unit further apart than
the privacy map counts. Reading them must not depend on the application's DECIMAL
context either: an ``Inexact`` trap made a neighbour's sum raise after the charge."""

from __future__ import annotations

import decimal
import random
from decimal import Decimal

from dpsql.mechanisms.laplace import GridLaplace
from dpsql.noise import _number


def _noiseless(k: int) -> GridLaplace:
    mechanism = GridLaplace(scale_units=10.0, k=k)
    mechanism.units.draws = lambda n: [0] * n
    return mechanism


def test_exact_sums_are_rounded_to_the_grid_exactly():
    grid = 2.0**-5
    sums = [Decimal("1.79687499999999985"), Decimal("2.04687499999999979")]
    released = _noiseless(-5).release(sums)
    assert [r / grid for r in released] == [57, 65]  # 0.25 apart: 8 units
    # the float detour: 2.04687499999999979 is the double 2.046875, a tie that rounds up
    assert [r / grid for r in _noiseless(-5).release([float(s) for s in sums])] == [57, 66]


def test_a_decimal_equal_to_a_float_is_released_as_that_float():
    rng = random.Random(5)
    floats = [rng.uniform(-1e6, 1e6) for _ in range(500)] + [0.5, 1.5, -2.5, 0.0, -0.0]
    mechanism = _noiseless(-3)
    assert mechanism.release([Decimal(f) for f in floats]) == mechanism.release(floats)
    mixed = [Decimal("0.1"), 7, 2**60 + 1, 0.25, Decimal(0.375)]
    assert mechanism.release(mixed) == [0.125, 7.0, float(2**60), 0.25, 0.375]


def test_reading_a_sum_ignores_the_applications_decimal_context():
    value = Decimal("1000002.62345679000123456789012345")
    strict = decimal.Context(prec=28, traps=[decimal.Inexact, decimal.Rounded])
    with decimal.localcontext(strict):
        assert _number(value, False, keep_decimal=True) == value
        assert _number(Decimal("-1e400"), False, keep_decimal=True) == -1.7976931348623157e308
        assert _number(Decimal("sNaN"), False, keep_decimal=True) == 0.0
