"""``AVG(x) = m + SUM(x − m) / COUNT(x)``: a noisy centred sum and a noisy count.

``m`` is the midpoint of the bounds (:func:`normalised_center`), so the sum's
sensitivity is ``R·(U − L)/2`` rather than ``R·max(|L|, |U|)``.
"""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.aggregates import count
from dpsql.aggregates.base import Family, radius, readable, stat_width


def normalised_center(interval) -> float:
    """Midpoint ``m`` used to centre a sum for AVG: ``SUM(x − m)`` has the smallest L∞.

    For ``x ∈ [L, U]``, ``x − m ∈ [L − m, U − m]``, so L∞ is ``R·(U − L)/2`` instead of
    ``R·max(|L|, |U|)``. For integer values ``m`` is rounded down so the centred sum
    stays an integer and gets exact discrete noise.
    """
    if interval.integer:
        return (int(interval.lower) + int(interval.upper)) // 2
    return interval.lower / 2 + interval.upper / 2  # no overflow near the float maximum


def centred(analysis, arg: exp.Expression) -> tuple:
    """The bounds of ``arg``, their midpoint, AVG's centred sum and the count of ``arg``."""
    interval = analysis.interval(arg)
    center = normalised_center(interval)
    total = analysis.stat("sum", arg, interval, center, centred=True)
    return interval, center, total, count.rows(analysis, arg)


def value(cell, total: float, n: float) -> float:
    """``m + S/N``: a noisy count below 1 is read as 1, and the result is clamped to
    the value bounds (both post-processing)."""
    released = cell.center + total / max(n, 1)
    return float(min(max(released, cell.lower), cell.upper))


def bound(h_s: float, h_n: float, r: float, n: int | None) -> float:
    """Error bound of ``S/N`` for a group of ``n`` rows (None: any n), at the widths' level.

    ``AVG = m + S/N`` from a noisy centred sum (half-width ``h_S``) and count (``h_N``),
    ``r = max(m − L, U − m)``. On the event ``|Ŝ − s| <= h_S`` and ``|N̂ − n| <= h_N``, if
    ``n − h_N >= 1``, ``|Ŝ/N̂ − s/n| = |(Ŝ − s)·n − s·(N̂ − n)| / (N̂·n) <= (h_S + r·h_N) /
    (n − h_N)``, since ``|s| <= r·n``. Clamping to ``[L, U]`` (where the true mean lies)
    never adds error, so the error is also at most ``U − L`` (:meth:`Avg.predicted_width`).
    ``n`` is the rows the group holds after contribution bounding (see
    :mod:`dpsql.accuracy` for the levels).
    """
    if n is None or n - h_n < 1:
        return math.inf
    return (h_s + r * h_n) / (n - h_n)


class Avg(Family):
    """``AVG(x)``."""

    name = "avg"
    functions = (exp.Avg,)
    cell_kinds = ("avg",)

    def cell(self, analysis, aggregate):
        interval, center, total, n = centred(analysis, aggregate.this)
        return {"kind": "avg", "stats": (total.name, n.name), "center": center,
                "lower": interval.lower, "upper": interval.upper}

    def values(self, plan, cell, noisy):
        total, n = (noisy.stats[s] for s in cell.stats)
        return [value(cell, s, c) for s, c in zip(total, n, strict=True)]

    def interval(self, plan, cell, rid, noisy, values, widths, level):
        total, n = (noisy.stats[s][rid] for s in cell.stats)
        ht, hc = (widths[s] for s in cell.stats)
        candidates = [cell.center + s / max(c, 1)
                      for s in (total - ht, total + ht) for c in (n - hc, n + hc)]
        return (float(min(max(min(candidates), cell.lower), cell.upper)),
                float(min(max(max(candidates), cell.lower), cell.upper)))

    def predicted_width(self, plan, cell, level, n):
        h_s, h_n = (stat_width(plan, s, level) for s in cell.stats)
        return min(bound(h_s, h_n, radius(cell), n), cell.upper - cell.lower)

    def formula(self, plan, cell, level):
        h_s, h_n = (stat_width(plan, s, level) for s in cell.stats)
        r = radius(cell)
        return (f": (h_sum + r·h_count) / (n − h_count) = ({readable(h_s)} + {readable(r)} × "
                f"{readable(h_n)}) / (n − {readable(h_n)}), for n >= {readable(h_n + 1)}")


FAMILY = Avg()
