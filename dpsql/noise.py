"""Noise stage: exact per-group statistics become noisy ones, and keys are selected.

Which groups are released is decided here, never by the data alone:

* every group key has a public domain: every combination of the domains is released
  (or those WHERE lets through, decided on the domains alone), empty ones included
  (their exact statistics are 0);
* otherwise: keys found in the data are released only if their noisy user count
  clears the partition-selection threshold.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from decimal import Decimal

from dpsql.analyze.plan import Plan
from dpsql.decimal_context import DECIMAL_CONTEXT
from dpsql.grid_units import fine_exponent, to_grid
from dpsql.keys import order_key
from dpsql.mechanisms.laplace import Grid


@dataclass
class NoisyGroups:
    """The released groups: their keys and each statistic's noisy value per group."""

    keys: list[tuple]
    #: per statistic, its noisy value in each released group (a histogram: a list of
    #: bin counts per group)
    stats: dict[str, list]


def add_noise(plan: Plan, columns: list[str], rows: list[tuple]) -> NoisyGroups:
    """Selects the groups to release and noises every statistic of the plan.

    Args:
        plan: the query's plan.
        columns: column names of the rewritten query (``__k*`` then statistics).
        rows: its exact result, one row per group found in the data.
    """
    nk = len(plan.keys)
    index = {name: i for i, name in enumerate(columns)}
    exact = {tuple(row[:nk]): row for row in rows}

    def values(name: str, groups: list[tuple]) -> list:
        """Exact values, group by group; a histogram's bins one after the other."""
        stat = plan.stat(name)
        columns = [index[c] for c in stat.columns]
        if stat.grid is not None:
            # an exact total of fine units, summed by the engine, rounded to the grid
            # once (dpsql.grid_units)
            j = fine_exponent(stat.linf, stat.grid)
            return [to_grid(read_units(exact[g][i]) if g in exact else 0, j, stat.grid)
                    for g in groups for i in columns]
        # a grid rounds the exact value itself (Grid.release): an engine's exact
        # DECIMAL must not be rounded to a float first
        keep = isinstance(stat.mechanism, Grid)
        out = []
        for g in groups:
            row = exact.get(g)
            out.extend(_number(row[i] if row is not None else 0, stat.integer, keep)
                       for i in columns)
        return out

    noisy: dict[str, list] = {}
    if plan.selection is None:
        groups = plan.public_groups()
    else:
        # a data-independent order: the backend's hash order could depend on the data
        candidates = sorted(exact, key=order_key)
        counts, keep = plan.selection.release(values("__users", candidates))
        groups = [g for g, k in zip(candidates, keep, strict=True) if k]
        noisy["__users"] = [c for c, k in zip(counts, keep, strict=True) if k]
    for stat in plan.stats:
        if stat.name in noisy:
            continue
        # a histogram's L1 bound covers all its bins at once, so one release noises
        # every coordinate at the calibrated scale
        # a gridded statistic's integer units get integer noise before any float
        # (dpsql.grid_units): stat.grid was recorded with the SQL that computed them
        release = stat.mechanism.release_units if stat.grid is not None \
            else stat.mechanism.release
        released = release(values(stat.name, groups))
        if stat.bins is not None:
            b = stat.bins.count
            released = [released[i * b:(i + 1) * b] for i in range(len(groups))]
        noisy[stat.name] = released
    return NoisyGroups(groups, noisy)


#: Largest magnitude a statistic's value is read as (a float's largest finite value).
_LARGEST = 1.7976931348623157e308
_LARGEST_DECIMAL = Decimal(int(_LARGEST))  # from the int: no FloatOperation at import


def _number(value, integer: bool, keep_decimal: bool = False):
    """A statistic's exact value as the mechanism takes it; total by construction.

    With ``keep_decimal``, a finite DECIMAL within the float range stays a
    :class:`~decimal.Decimal`, for a mechanism that rounds it exactly
    (:class:`~dpsql.mechanisms.laplace.Grid`). ``float()`` first would round it to the
    nearest double, and two neighbours' sums ``d <= L∞`` apart in different binades
    could then round apart by more than ``d``: one grid unit more than the privacy map
    counts where ``L∞`` sits just below a grid line (attack review: PostgreSQL's exact
    NUMERIC sums moved 9 units where 8 were counted).

    Whether it is an integer was decided before the charge from the SQL type the
    backend bound (:func:`dpsql.answering.statistic_types`), so an integer statistic comes
    back as an ``int`` (or a DECIMAL without fraction). Nothing here raises whatever
    the value: an assertion failing after the charge would itself be an oracle (the
    fuzzers in ``tests/privacy/`` assert wholeness instead). A NaN (only from values
    outside the clamps' reach) reads as 0 and an infinity as the largest float; both
    are then noised as any other value. DECIMAL arithmetic runs in a fixed context of
    its own (:data:`DECIMAL_CONTEXT`, no traps): the application's context (an ``Inexact``
    trap, a small precision) must not make a value raise after the charge.
    """
    if not isinstance(value, Decimal):  # the hot path: ints and floats need no context
        return _number_in_context(value, integer, keep_decimal)
    with decimal.localcontext(DECIMAL_CONTEXT):
        return _number_in_context(value, integer, keep_decimal)


def _number_in_context(value, integer: bool, keep_decimal: bool):
    if value is None:  # SUM over only NULLs
        return 0
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = _digits(value)  # SQLite's exact integer total beyond 2^63, as digits
    if integer and isinstance(value, int):
        return int(value)
    if integer and isinstance(value, Decimal) and value.is_finite() \
            and value == value.to_integral_value():
        return int(value)
    if keep_decimal and not integer and isinstance(value, Decimal) and value.is_finite() \
            and -_LARGEST_DECIMAL <= value <= _LARGEST_DECIMAL:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        number = _LARGEST if isinstance(value, Decimal) and not value.is_nan() \
            and value.copy_sign(1) == value else 0.0
    if number != number:
        number = 0.0
    number = max(-_LARGEST, min(_LARGEST, number))
    if integer:  # not reached when the engine types the statistic as an integer
        return int(number)
    return number


def _digits(text: str) -> int:
    """An integer written in decimal digits (SQLite's exact totals beyond 2^63:
    :class:`dpsql.backends.sqlite.ExactSumOut`); anything else reads as 0, never raises.

    >>> _digits("-9223372036854775809"), _digits("1e5"), _digits("x" * 5000)
    (-9223372036854775809, 0, 0)
    """
    if not 0 < len(text) <= 60 or not text.lstrip("-").isdigit():
        return 0
    return int(text)


def read_units(value) -> int:
    """A gridded statistic's value from the engine (a HUGEINT) as whole units; total.

    NULL (a group without summands) is 0 units. Anything else that is not an integer
    (never the case for the SQL :mod:`dpsql.rewrite.grid_sums` writes) is rounded, and
    a value that is no finite number reads as 0, so nothing raises after the charge.
    """
    if value is None or isinstance(value, bool):
        return int(bool(value))
    if isinstance(value, int):
        return value
    if isinstance(value, str):  # SQLite's exact total beyond 2^63, as its digits
        return _digits(value)
    try:
        return round(value)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return 0
