"""``SUM(x)``: a noisy sum of values clamped to their bounds, released as it is.

The sum statistic also carries AVG's centred sum (``center`` set, see
:mod:`dpsql.aggregates.avg`) and VARIANCE's (:mod:`dpsql.aggregates.variance`).
"""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.aggregates.base import Direct, StatisticRule, double, scaled, shifted
from dpsql.sqlbuild import clamp, number


class Sum(StatisticRule):
    """``SUM(x)`` or ``SUM(x − m)`` of per-row values clamped to ``[L, U]``."""

    kind = "sum"
    cut = "weights"

    def label(self, stat) -> str:
        arg = stat.arg.sql(dialect="duckdb")
        if stat.center:
            return f"SUM({arg} - {stat.center:g})"
        return f"SUM({arg})"

    def partial_range(self, interval, max_rows):
        """A sum of at most R values clamped to ``[L, U]`` (already centred) lies in
        ``[R·min(L, 0), R·max(U, 0)]`` (0 for a user whose rows are all NULL).

        The user's partial sum is clamped there in SQL (:meth:`partial`), so a user with
        more than R rows still stays inside the range.
        """
        assert interval is not None
        return (max_rows * min(interval.lower, 0), max_rows * max(interval.upper, 0))

    def values_interval(self, stat):
        return shifted(stat)  # the centred values added up

    def integer(self, interval, center, one_row):
        # AVG's sums are rescaled per user (see partial): fractional
        return not center and interval.integer

    def value(self, stat, arg: exp.Expression) -> exp.Expression:
        """The per-row value added up: ``arg`` or ``arg − m`` (in DOUBLE: dpsql's own
        arithmetic cannot overflow whatever the column's type)."""
        if stat.center:
            return exp.Sub(this=double(arg), expression=number(stat.center))
        return arg

    def argument(self, stat, aggregate: exp.Expression) -> exp.Expression:
        """The analyst's per-row expression inside the aggregate built by :meth:`value`."""
        return aggregate.this.this.this if stat.center else aggregate.this

    def aggregate(self, stat, plan):
        return exp.Sum(this=self.value(stat, stat.arg.copy()))

    def clamp(self, stat, aggregate):
        if not isinstance(aggregate, exp.Sum):
            return
        clamped = clamp(self.argument(stat, aggregate), stat.interval.lower,
                        stat.interval.upper, stat.nullable)
        aggregate.set("this", self.value(stat, clamped))

    def partial(self, stat, aggregate, max_rows):
        low, high = self.partial_range(self.values_interval(stat), max_rows)
        total = aggregate.copy()
        if self.rescaled(stat):
            # AVG's and VARIANCE's sums go with a count capped at R: scale a user's sum
            # to R rows' worth (their mean times min(count, R)), so sum and count
            # describe the same rows; it stays inside the clamp range
            total = scaled(total, self.argument(stat, aggregate), max_rows)
        # a user whose values are all NULL adds nothing: SUM is NULL, read as 0
        return clamp(exp.Coalesce(this=total, expressions=[number(0)]), low, high)

    def rescaled(self, stat) -> bool:
        """Whether a user's sum is scaled to R rows' worth: AVG's (centred) sums."""
        return bool(stat.center)

    def value_range(self, stat):
        """A sum has the sign of its terms where all terms share one: not negative when
        ``L − center >= 0``, not positive when ``U − center <= 0`` (public bounds)."""
        if stat.interval is None:
            return (-math.inf, math.inf)
        low = 0.0 if stat.interval.lower - stat.center >= 0 else -math.inf
        high = 0.0 if stat.interval.upper - stat.center <= 0 else math.inf
        return (low, high)


SUM = Sum()


class SumFamily(Direct):
    """``SUM(x)``."""

    name = "sum"
    functions = (exp.Sum,)
    statistics = (SUM,)

    def cell(self, analysis, aggregate):
        arg = aggregate.this
        return {"kind": "stat", "stats": (analysis.stat("sum", arg, analysis.interval(arg)).name,)}


FAMILY = SumFamily()
