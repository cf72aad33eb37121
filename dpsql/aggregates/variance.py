"""``VAR_POP``, ``VAR_SAMP``/``VARIANCE``, ``STDDEV_POP``, ``STDDEV_SAMP``/``STDDEV``.

``VAR = SUM((x − m)²)/N − (SUM(x − m)/N)²``, from three noisy statistics: a sum of
squares (:class:`SumSquares`), AVG's centred sum and the count, ``m`` the bounds'
midpoint. Every spelling of the family is listed once, in :data:`KINDS`.
"""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.aggregates import avg, count
from dpsql.aggregates.base import Family, double, radius, readable, shifted, stat_width
from dpsql.aggregates.sums import Sum
from dpsql.errors import UnboundedExpressionError
from dpsql.sqlbuild import number

#: Each SQL function of the family and the cell kind it answers with.
KINDS: dict[type[exp.Expression], str] = {
    exp.VariancePop: "var_pop", exp.Variance: "var_samp", exp.StddevPop: "std_pop",
    exp.Stddev: "std_samp", exp.StddevSamp: "std_samp",
}


class SumSquares(Sum):
    """``SUM((x − m)²)`` of per-row values clamped to ``[L, U]``, ``m`` their midpoint."""

    kind = "sumsq"

    def label(self, stat) -> str:
        return f"SUM(({stat.arg.sql(dialect='duckdb')} - {stat.center:g})^2)"

    def partial_range(self, interval, max_rows):
        """``Σ (x − m)²`` over at most R rows, with ``x − m`` in the given (already
        centred) interval: ``[0, R · max(|L−m|, |U−m|)²]``."""
        assert interval is not None
        return (0, max_rows * interval.magnitude**2)

    def integer(self, interval, centred, one_row):
        return False  # rescaled per user (rescaled): fractional

    def check(self, stats, candidate, limits, max_magnitude):
        centred = shifted(candidate)
        if centred.magnitude > math.sqrt(max_magnitude):
            # the squares' bound would overflow the noise scale (a float OverflowError)
            raise UnboundedExpressionError(
                f"the centred bounds of {candidate.arg.sql(dialect='duckdb')[:80]!r} reach "
                f"{centred.magnitude:.3g}; VARIANCE and STDDEV square them, so dpsql "
                f"takes them up to {math.sqrt(max_magnitude):g}")

    def value(self, stat, arg: exp.Expression) -> exp.Expression:
        """``(arg − m)²``, in DOUBLE: ``(age − 50)²`` in a TINYINT column would overflow.

        >>> from dpsql.engine import _demo_plan
        >>> plan = _demo_plan("SELECT VARIANCE(age) FROM pums")
        >>> SUM_SQUARES.value(plan.stats[0], exp.column("age")).sql()
        '(CAST(age AS DOUBLE) - 50) * (CAST(age AS DOUBLE) - 50)'
        """
        return exp.Mul(this=exp.paren(exp.Sub(this=double(arg), expression=number(stat.center))),
                       expression=exp.paren(exp.Sub(this=double(arg.copy()),
                                                    expression=number(stat.center))))

    def argument(self, stat, aggregate: exp.Expression) -> exp.Expression:
        return aggregate.this.this.this.this.this

    def rescaled(self, stat) -> bool:
        return True  # goes with a count capped at R, as AVG's sum

    def value_range(self, stat):
        return (0.0, math.inf)


SUM_SQUARES = SumSquares()


def max_variance(cell) -> float:
    """The largest variance of values in ``[lower, upper]``: ``((U − L)/2)²`` for the
    population variance, twice that for the sample variance (``n/(n − 1) <= 2`` for the
    ``n >= 2`` values it is defined on)."""
    half = radius(cell)
    return half**2 * (2 if cell.kind.endswith("samp") else 1)


def value(cell, squares: float, total: float, count: float) -> float:
    """VAR from noisy Σ(x−m)², Σ(x−m) and N, clamped to what bounded values allow."""
    n = max(count, 1.0)
    half = radius(cell)
    var = min(max(squares / n - (total / n) ** 2, 0.0), half**2)
    if cell.kind.endswith("samp") and n > 1:
        var = min(var * n / (n - 1), max_variance(cell))
    return math.sqrt(var) if cell.kind.startswith("std") else var


def bound(kind: str, h_q, h_s, h_n, r: float, n: int | None) -> float:
    """Error bound of a variance of ``n`` rows (None: any n), values within ``r`` of ``m``.

    ``VAR_POP = Q/N − (S/N)²``: ``|Q̂/N̂ − q/n| <= (h_Q + r²·h_N) / (n − h_N)`` as for AVG
    (:func:`dpsql.aggregates.avg.bound`; ``q/n <= r²``), and ``|(Ŝ/N̂)² − (s/n)²| <=
    e·(2r + e)`` with ``e`` the AVG bound; both values lie in ``[0, r²]``, so the error is
    at most ``r²``. ``VAR_SAMP`` scales by ``f(N) = N/(N − 1)`` (decreasing): the error is
    at most ``w·f(n − h_N) + r²·(f(n − h_N) − f(n))`` for ``n − h_N > 1``, and
    ``r²·f(n − h_N)``. ``STDDEV`` is the square root (:meth:`Variance.predicted_width`):
    ``|√a − √b| <= √|a − b|``.
    """
    cap = r * r
    if n is None or n - h_n < 1:
        return cap if kind.endswith("pop") else math.inf
    e = avg.bound(h_s, h_n, r, n)
    pop = (h_q + r * r * h_n) / (n - h_n) + e * (2 * r + e)
    if kind.endswith("pop"):
        return min(pop, cap)
    if n - h_n <= 1:
        return math.inf

    def f(x: float) -> float:
        return x / (x - 1)

    low = n - h_n
    return min(min(pop, cap) * f(low) + cap * (f(low) - f(n)), cap * f(low))


class Variance(Family):
    """The variances and standard deviations, population and sample."""

    name = "variance"
    functions = tuple(KINDS)
    statistics = (SUM_SQUARES,)
    cell_kinds = ("var_pop", "var_samp", "std_pop", "std_samp")

    def cell(self, analysis, aggregate):
        arg = aggregate.this
        interval = analysis.interval(arg)
        center = avg.normalised_center(interval)
        squares = analysis.stat("sumsq", arg, interval, center, centred=True)
        total = analysis.stat("sum", arg, interval, center, centred=True)
        n = count.rows(analysis, arg)
        return {"kind": KINDS[type(aggregate)], "stats": (squares.name, total.name, n.name),
                "center": center, "lower": interval.lower, "upper": interval.upper}

    def values(self, plan, cell, noisy):
        squares, total, n = (noisy.stats[s] for s in cell.stats)
        return [value(cell, q, s, c) for q, s, c in zip(squares, total, n, strict=True)]

    def range(self, plan, cell):
        top = max_variance(cell)
        return (0.0, math.sqrt(top) if cell.kind.startswith("std") else top)

    def interval(self, plan, cell, rid, noisy, values, widths, level):
        (q, s, n), (hq, hs, hn) = ((noisy.stats[x][rid] for x in cell.stats),
                                   (widths[x] for x in cell.stats))
        qs = (q - hq, q + hq)
        ss = [s - hs, s + hs] + ([0.0] if s - hs < 0 < s + hs else [])
        n_lo, n_hi = max(n - hn, 1.0), max(n + hn, 1.0)
        ns = [n_lo, n_hi]
        # interior extreme of q/n − s²/n² in n, at n = 2 s² / q
        ns += [2 * x * x / y for x in ss for y in qs if y > 0 and n_lo < 2 * x * x / y < n_hi]
        found = [value(cell, a, b, c) for a in qs for b in ss for c in ns]
        return (min(found), max(found))

    def predicted_width(self, plan, cell, level, n):
        h_q, h_s, h_n = (stat_width(plan, s, level) for s in cell.stats)
        var = bound(cell.kind, h_q, h_s, h_n, radius(cell), n)
        return math.sqrt(var) if cell.kind.startswith("std") else var

    def formula(self, plan, cell, level):
        h_q, h_s, h_n = (stat_width(plan, s, level) for s in cell.stats)
        return (f" (from the noisy sum of squares ±{readable(h_q)}, sum ±{readable(h_s)} "
                f"and count ±{readable(h_n)}, values at most {readable(radius(cell))} from "
                f"{readable(cell.center)}; for n >= {readable(h_n + 2)})")


FAMILY = Variance()
