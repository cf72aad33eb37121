"""Sensitivity rules: how far one user can move each statistic.

Neighbouring databases differ by all rows of one user. After the rewrite has bounded
contributions, a user touches at most ``G`` groups (``max_groups``, enforced by the L0
step) and adds to each group one *partial aggregate* that the SQL clamps into the range
given by :func:`partial_range`. Adding or removing the user therefore moves each of the
G per-group totals by at most the largest absolute value of that range (L∞), and the
vector of all groups' totals by at most ``G · L∞`` in L1 norm.

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

from dpsql.analyze.bounds import Interval

#: Statistic kinds the engine noises.
KINDS = ("count", "sum", "sumsq", "users", "hist", "distinct")


def partial_range(kind: str, interval: Interval | None, max_rows: int) -> tuple[float, float]:
    """Range the SQL clamps one user's partial aggregate in one group into.

    * ``count`` (COUNT(*) or COUNT(x)): the user's row count in the group, capped at
      ``R = max_rows``: ``[0, R]``. The cap is a ``LEAST(COUNT(...), R)`` in SQL.
    * ``sum`` of a per-row value clamped to ``[L, U]``: a sum of at most R such values
      lies in ``[R·min(L, 0), R·max(U, 0)]`` (0 for a user whose rows are all NULL).
      The user's partial sum is clamped there in SQL, so a user with more than R rows
      still stays inside the range.
    * ``users`` (COUNT(DISTINCT user key)): after the per-user aggregate each user is
      one row of the group, so the partial is exactly 1.
    * ``sumsq`` (for VARIANCE): ``Σ (x − m)²`` over at most R rows, with ``x − m`` in the
      given (already centred) interval: ``[0, R · max(|L−m|, |U−m|)²]``.
    * ``distinct`` (COUNT(DISTINCT col), col not the user key): each user keeps at most R
      distinct values per group (:mod:`dpsql.rewrite.count_distinct_values`), so adding
      or removing the user moves the group's distinct count by at most R: ``[0, R]``.
    * ``hist`` (for quantiles): a vector of one count per bin. The SQL scales the user's
      bin counts ``c_j`` in the group by ``min(T, R) / T``, ``T = Σ_j c_j``, so the partials
      are non-negative and sum to at most R: each lies in ``[0, R]`` and the vector's L1
      (and L2) norm is at most R. The noise is calibrated to that vector bound, with the
      bins as ``width`` coordinates (:func:`dpsql.mechanisms.laplace.laplace`).
    """
    if kind == "sumsq":
        assert interval is not None
        return (0, max_rows * interval.magnitude**2)
    if kind in ("count", "hist", "distinct"):
        return (0, max_rows)
    if kind == "users":
        return (0, 1)
    if kind == "sum":
        assert interval is not None
        return (max_rows * min(interval.lower, 0), max_rows * max(interval.upper, 0))
    raise ValueError(f"unknown statistic kind {kind!r}")


def linf(kind: str, interval: Interval | None, max_rows: int) -> float:
    """Per-group sensitivity: the largest absolute partial a user can add or remove.

    Adding a user adds one partial in :func:`partial_range`; removing one subtracts it;
    the range contains 0, so the change is at most the range's largest magnitude.
    """
    low, high = partial_range(kind, interval, max_rows)
    return max(abs(low), abs(high))


def normalised_center(interval: Interval) -> float:
    """Midpoint ``m`` used to centre a sum for AVG: ``SUM(x − m)`` has the smallest L∞.

    For ``x ∈ [L, U]``, ``x − m ∈ [L − m, U − m]``, so L∞ is ``R·(U − L)/2`` instead of
    ``R·max(|L|, |U|)``. For integer values ``m`` is rounded down so the centred sum
    stays an integer and gets exact discrete noise.
    """
    if interval.integer:
        return (int(interval.lower) + int(interval.upper)) // 2
    return interval.lower / 2 + interval.upper / 2  # no overflow near the float maximum


def l1(linf_value: float, max_groups: int) -> float:
    """Sensitivity of the vector of all groups: a user touches at most G groups."""
    return max_groups * linf_value
