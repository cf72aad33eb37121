"""``COUNT(*)`` and ``COUNT(x)``: a noisy count of rows, released as it is."""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.aggregates.base import Direct, StatisticRule
from dpsql.sqlbuild import number


class Rows(StatisticRule):
    """The group's rows (``COUNT(*)``) or its rows where ``arg`` is not NULL."""

    kind = "count"
    counts = True
    cut = "rows"

    def label(self, stat) -> str:
        return f"COUNT({stat.arg.sql(dialect='duckdb') if stat.arg else '*'})"

    def partial_range(self, interval, max_rows):
        """The user's row count in the group, capped at ``R = max_rows``: ``[0, R]``.

        The cap is a ``LEAST(COUNT(...), R)`` in SQL (:meth:`partial`).
        """
        return (0, max_rows)

    def integer(self, interval, centred, one_row):
        return True

    def aggregate(self, stat, plan):
        return exp.Count(this=stat.arg.copy() if stat.arg is not None else exp.Star())

    def partial(self, stat, aggregate, max_rows):
        return exp.Least(this=aggregate.copy(), expressions=[number(max_rows)], ignore_nulls=True)

    def value_range(self, stat):
        return (0.0, math.inf)


ROWS = Rows()


def never_null(e: exp.Expression, column) -> bool:
    """Whether ``e`` is never NULL: literals, NOT NULL columns and arithmetic on them.

    ``column`` resolves a column reference to its catalog column.
    """
    if isinstance(e, exp.Literal):
        return True
    if isinstance(e, exp.Column):
        return not column(e).nullable
    if isinstance(e, exp.Paren | exp.Neg | exp.Abs):
        return never_null(e.this, column)
    if isinstance(e, exp.Add | exp.Sub | exp.Mul):
        return never_null(e.this, column) and never_null(e.expression, column)
    return False


def rows(analysis, arg: exp.Expression):
    """The count statistic of ``COUNT(arg)``: ``COUNT(*)`` when ``arg`` is never NULL."""
    if isinstance(arg, exp.Star) or never_null(arg, analysis.scope.column):
        return analysis.stat("count", None, None)
    return analysis.stat("count", arg, None)


class Count(Direct):
    """``COUNT(*)``, ``COUNT(x)``."""

    name = "count"
    functions = (exp.Count,)
    statistics = (ROWS,)

    def answers(self, aggregate):
        return isinstance(aggregate, exp.Count) and not isinstance(aggregate.this, exp.Distinct)

    def cell(self, analysis, aggregate):
        return {"kind": "stat", "stats": (rows(analysis, aggregate.this).name,)}


FAMILY = Count()
