"""Sensitivity rules: how far one user can move each statistic.

Neighbouring databases differ by all rows of one user. After the rewrite has bounded
contributions, a user touches at most ``G`` groups (``max_groups``, enforced by the L0
step) and adds to each group one *partial aggregate* that the SQL clamps into the range
given by :func:`partial_range`. Adding or removing the user therefore moves each of the
G per-group totals by at most the largest absolute value of that range (L∞), and the
vector of all groups' totals by at most ``G · L∞`` in L1 norm.

Each kind of statistic states its range, with the argument, in its own module of
:mod:`dpsql.aggregates` (``partial_range`` of its
:class:`~dpsql.aggregates.base.StatisticRule`); this module is the one entry point.

>>> partial_range("count", None, max_rows=3)
(0, 3)
>>> linf("count", None, max_rows=3)
3
>>> linf("sum", Interval(-2, 10, True), max_rows=3)   # R · max(|L|, |U|)
30
>>> linf("users", None, max_rows=3)                      # a user counts once per group
1
>>> linf("hist", None, max_rows=3)      # L1 over the bins: the user's scaled counts
3
>>> normalised_center(Interval(0, 100, True))
50
>>> linf("sum", Interval(0 - 50, 100 - 50, True), max_rows=2)
100
"""

from __future__ import annotations

from dpsql.aggregates import KINDS, statistic_rule
from dpsql.aggregates.avg import normalised_center
from dpsql.analyze.bounds import Interval

__all__ = ["KINDS", "Interval", "l1", "linf", "normalised_center", "partial_range"]


def partial_range(kind: str, interval: Interval | None, max_rows: int) -> tuple[float, float]:
    """Range the SQL clamps one user's partial aggregate in one group into.

    The argument for each kind is the docstring of its rule's ``partial_range``:
    ``count`` (:mod:`dpsql.aggregates.count`), ``users`` and ``distinct``
    (:mod:`dpsql.aggregates.count_distinct`), ``sum`` (:mod:`dpsql.aggregates.sums`),
    ``sumsq`` (:mod:`dpsql.aggregates.variance`), ``hist``
    (:mod:`dpsql.aggregates.quantile`).

    Raises:
        ValueError: an unknown kind.
    """
    return statistic_rule(kind).partial_range(interval, max_rows)


def linf(kind: str, interval: Interval | None, max_rows: int) -> float:
    """Per-group sensitivity: the largest absolute partial a user can add or remove.

    Adding a user adds one partial in :func:`partial_range`; removing one subtracts it;
    the range contains 0, so the change is at most the range's largest magnitude.
    """
    low, high = partial_range(kind, interval, max_rows)
    return max(abs(low), abs(high))


def l1(linf_value: float, max_groups: int) -> float:
    """Sensitivity of the vector of all groups: a user touches at most G groups."""
    return max_groups * linf_value
