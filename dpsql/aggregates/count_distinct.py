"""``COUNT(DISTINCT x)``: distinct users (``x`` the user key) or distinct values."""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.aggregates.base import Direct, StatisticRule
from dpsql.errors import UnsupportedQueryError

#: The column of the distinct-user count (partition selection reuses it).
USERS_COLUMN = "__users"


class Users(StatisticRule):
    """``COUNT(DISTINCT <user key>)``: the group's users."""

    kind = "users"
    fixed_name = USERS_COLUMN
    counts = True

    def label(self, stat) -> str:
        return "COUNT(DISTINCT <user>)"

    def partial_range(self, interval, max_rows):
        """After the per-user aggregate each user is one row of the group, so the
        partial is exactly 1: ``[0, 1]``."""
        return (0, 1)

    def integer(self, interval, centred, one_row):
        return True

    def aggregate(self, stat, plan):
        if plan.uid is None or plan.one_row_per_user:  # one row per user
            return exp.Count(this=exp.Star())
        return exp.Count(this=exp.Distinct(expressions=[plan.uid.copy()]))

    def partial(self, stat, aggregate, max_rows):
        return None  # the per-user rows themselves are the users

    def per_group(self, name):
        return exp.Count(this=exp.Star())

    def value_range(self, stat):
        return (0.0, math.inf)


class Values(StatisticRule):
    """``COUNT(DISTINCT col)`` for a column other than the user key."""

    kind = "distinct"
    counts = True
    cut = "values"

    def label(self, stat) -> str:
        return f"COUNT(DISTINCT {stat.arg.sql(dialect='duckdb')})"

    def partial_range(self, interval, max_rows):
        """Each user keeps at most R distinct values per group
        (:mod:`dpsql.rewrite.count_distinct_values`), so adding or removing the user
        moves the group's distinct count by at most R: ``[0, R]``."""
        return (0, max_rows)

    def integer(self, interval, centred, one_row):
        return True

    def aggregate(self, stat, plan):
        return exp.Count(this=exp.Distinct(expressions=[stat.arg.copy()]))

    def partial(self, stat, aggregate, max_rows):
        return None  # counted from a table of their own (count_distinct_values)

    def per_group(self, name):
        return None

    def distinct_value(self, aggregate):
        return aggregate.this.expressions[0]

    def value_range(self, stat):
        return (0.0, math.inf)


USERS = Users()
VALUES = Values()


def statistic(analysis, arg: exp.Distinct):
    """The statistic of ``COUNT(DISTINCT ...)``: users for the user key, else values."""
    cols = arg.expressions
    if len(cols) == 1 and analysis.scope.is_uid(cols[0]):
        return analysis.stat("users", None, None)
    if len(cols) != 1:
        raise UnsupportedQueryError(
            "COUNT(DISTINCT ...) takes one expression; combine columns with ||")
    # each user adds at most R distinct values per group (count_distinct_values)
    return analysis.stat("distinct", cols[0], None)


class CountDistinct(Direct):
    """``COUNT(DISTINCT x)``."""

    name = "count_distinct"
    functions = (exp.Count,)
    statistics = (USERS, VALUES)

    def answers(self, aggregate):
        return isinstance(aggregate, exp.Count) and isinstance(aggregate.this, exp.Distinct)

    def cell(self, analysis, aggregate):
        return {"kind": "stat", "stats": (statistic(analysis, aggregate.this).name,)}


FAMILY = CountDistinct()
