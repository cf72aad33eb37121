"""``SUM(x)``: a noisy sum of values clamped to their bounds, released as it is.

The sum statistic also carries AVG's centred sum (``center`` set, see
:mod:`dpsql.aggregates.avg`) and VARIANCE's (:mod:`dpsql.aggregates.variance`).
"""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.aggregates.base import Direct, StatisticRule, double, scaled, shifted
from dpsql.sqlbuild import clamp, data_type, number


class Sum(StatisticRule):
    """``SUM(x)`` or ``SUM(x − m)`` of per-row values clamped to ``[L, U]``."""

    kind = "sum"
    cut = "weights"

    def label(self, stat) -> str:
        arg = stat.arg.sql(dialect="duckdb")
        if stat.centred:  # AVG's, even about 0: apart from a SUM(x) in the same query
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

    def integer(self, interval, centred, one_row):
        # AVG's sums are rescaled per user (see partial): fractional
        return not centred and interval.integer

    def value(self, stat, arg: exp.Expression) -> exp.Expression:
        """The per-row value added up: ``arg`` or ``arg − m`` (in DOUBLE: dpsql's own
        arithmetic cannot overflow whatever the column's type)."""
        if stat.center:
            return exp.Sub(this=double(arg), expression=number(stat.center))
        return arg

    def argument(self, stat, aggregate: exp.Expression) -> exp.Expression:
        """The analyst's per-row expression inside the aggregate built by :meth:`value`
        (a DECIMAL sum's: the clamped value before its centre)."""
        if stat.decimal is not None:
            return aggregate.this.this if stat.center else aggregate.this
        return aggregate.this.this.this if stat.center else aggregate.this

    def aggregate(self, stat, plan):
        if stat.decimal is not None:
            # clamped and centred in one DECIMAL type from the start (dpsql.decimal_sums)
            return exp.Sum(this=stat.decimal.value(stat.arg.copy(), stat.nullable,
                                                   null_as_zero(self, stat),
                                                   clamped=not stat.in_bounds))
        return exp.Sum(this=self.value(stat, stat.arg.copy()))

    def clamp(self, stat, aggregate):
        """Clamps the summed per-row value into the statistic's bounds, unless every
        value it can take already lies inside them (:func:`literal_values_within`, or
        the data's proof: :attr:`~dpsql.analyze.plan.Statistic.in_bounds`), or
        :meth:`aggregate` wrote it clamped (a DECIMAL sum)."""
        if not isinstance(aggregate, exp.Sum) or stat.decimal is not None or stat.in_bounds:
            return
        arg = self.argument(stat, aggregate)
        if literal_values_within(arg, stat.interval.lower, stat.interval.upper):
            return
        keep_null = stat.nullable
        if keep_null and null_as_zero(self, stat):
            arg, keep_null = exp.Coalesce(this=arg, expressions=[number(0)]), False
        clamped = clamp(arg, stat.interval.lower, stat.interval.upper, keep_null)
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
        partial = clamp(exp.Coalesce(this=total, expressions=[number(0)]), low, high)
        if stat.whole:  # whole numbers inside a BIGINT, kept so (dpsql.whole_sums)
            return exp.Cast(this=partial, to=data_type("BIGINT"))
        return partial

    def rescaled(self, stat) -> bool:
        """Whether a user's sum is scaled to R rows' worth: AVG's and VARIANCE's
        (centred) sums, whatever their centre (:attr:`Statistic.centred`: the centre of
        bounds ``[0, 1]`` or ``[-1, 1]`` is 0, and such a sum had been added up
        unscaled, so a user with more than R rows weighed as their sum over R rows)."""
        return stat.centred

    def value_range(self, stat):
        """A sum has the sign of its terms where all terms share one: not negative when
        ``L − center >= 0``, not positive when ``U − center <= 0`` (public bounds)."""
        if stat.interval is None:
            return (-math.inf, math.inf)
        low = 0.0 if stat.interval.lower - stat.center >= 0 else -math.inf
        high = 0.0 if stat.interval.upper - stat.center <= 0 else math.inf
        return (low, high)


SUM = Sum()


def null_as_zero(rule, stat) -> bool:
    """Whether a NULL row of a sum may be read as 0: the sum is not centred, its rule does
    not rescale a user's partial by the count of its non-NULL rows, and 0 lies in its
    bounds.

    SUM skips a NULL; a 0 adds nothing, and the clamp keeps a 0 as it is, so the sum of
    every group, and of every user's partial (``COALESCE(SUM(...), 0)``: :meth:`Sum.
    partial`), is the same value either way, and the noise stage reads a group's sum
    over only NULLs (NULL) as 0 too (:func:`dpsql.noise._number_in_context`). Nothing
    counts the clamped value's non-NULL rows: a centred sum (AVG, VARIANCE), whose
    ``- m`` would turn a 0 into ``-m``, and any sum its rule rescales per user by
    ``COUNT`` of the clamped value (:meth:`Sum.partial`: AVG's and VARIANCE's sums,
    whatever their centre, :attr:`Statistic.centred`; attack review: ``VAR_POP`` over
    bounds ``[0, 1]`` counted a user's NULL rows and came out half the true value) keep
    the NULL-keeping clamp. Read once: the NULL-keeping clamp
    ``CASE WHEN x IS NULL THEN NULL ELSE LEAST(GREATEST(x, L), U) END`` evaluates ``x``
    twice (TPC-H q14 at sf 0.1: 13.9 -> 13.2 ms).

    >>> from types import SimpleNamespace as S
    >>> from dpsql.analyze.bounds import Interval
    >>> from dpsql.aggregates.variance import SUM_SQUARES
    >>> null_as_zero(SUM, S(center=0, centred=False, interval=Interval(0, 10, False)))
    True
    >>> null_as_zero(SUM, S(center=0, centred=False,
    ...                     interval=Interval(1, 10, False)))  # a NULL is not a 1
    False
    >>> null_as_zero(SUM, S(center=5, centred=True, interval=Interval(0, 10, False)))
    False
    >>> null_as_zero(SUM_SQUARES, S(center=0, centred=True,
    ...                             interval=Interval(-1, 1, False)))
    False
    """
    return not rule.rescaled(stat) and not stat.center \
        and stat.interval.lower <= 0 <= stat.interval.upper


def literal_values_within(value: exp.Expression, lower: float, upper: float) -> bool:
    """Whether every value of ``value`` is NULL or a whole-number literal in
    ``[lower, upper]``, with whole-number bounds: a literal, or a searched CASE whose every
    THEN and ELSE is one (no ELSE: NULL), as in ``SUM(CASE WHEN ... THEN 1 ELSE 0 END)``.

    Then the clamp changes nothing and is left out (TPC-H q12 at sf 1: 1.26x -> 1.16x its
    floor). ``LEAST(GREATEST(v, L), U)`` is ``v`` for ``L <= v <= U``; the NULL-keeping
    clamp (:func:`dpsql.sqlbuild.clamp`) maps NULL to NULL; the clamped row value is thus
    the value itself on every row and every engine. Its type does not change either:
    integer literals and whole bounds, written as integers (:func:`number`), make the
    clamp's LEAST/GREATEST an integer of the CASE's own type. The WHEN conditions are
    evaluated the same way with or without the clamp around them. Anything else (a
    column, arithmetic, a fraction, a branch outside the bounds) keeps the clamp.

    >>> from sqlglot import parse_one
    >>> literal_values_within(parse_one("CASE WHEN a = 1 THEN 1 ELSE 0 END"), 0, 1)
    True
    >>> literal_values_within(parse_one("CASE WHEN a = 1 THEN 2 END"), 0, 1)
    False
    >>> literal_values_within(parse_one("CASE WHEN a = 1 THEN a ELSE 0 END"), 0, 1)
    False
    """
    if not (math.isfinite(lower) and math.isfinite(upper)
            and float(lower).is_integer() and float(upper).is_integer()):
        return False
    inner = value
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Case):
        if inner.this is not None:  # CASE x WHEN ...: compares, still literal branches
            return False
        branches = [i.args.get("true") for i in inner.args.get("ifs") or []]
        default = inner.args.get("default")
        return bool(branches) and all(
            b is not None and _whole_literal_within(b, lower, upper) for b in branches) \
            and (default is None or _whole_literal_within(default, lower, upper))
    return _whole_literal_within(inner, lower, upper)


def _whole_literal_within(node: exp.Expression, lower: float, upper: float) -> bool:
    sign = 1
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        sign, node = -1, node.this
    if isinstance(node, exp.Null):
        return True
    if not isinstance(node, exp.Literal) or node.is_string or not node.this.isdigit() \
            or len(node.this) > 15:
        return False
    return lower <= sign * int(node.this) <= upper


class SumFamily(Direct):
    """``SUM(x)``."""

    name = "sum"
    functions = (exp.Sum,)
    statistics = (SUM,)

    def cell(self, analysis, aggregate):
        arg = aggregate.this
        return {"kind": "stat", "stats": (analysis.stat("sum", arg, analysis.interval(arg)).name,)}


FAMILY = SumFamily()
