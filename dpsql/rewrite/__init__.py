"""Rewrite stage: a plan becomes the backend SQL that bounds every user's contribution.

Each pass is one module with one public function named after it, ``(Expr, Plan) ->
Expr``; :data:`RULES` lists them in the order they run, starting from the plain
statistics query of :func:`statistics_query`. A pass that writes its SQL differently
per engine also names an ``engine`` parameter and gets the
:class:`~dpsql.rewrite.traits.EngineTraits` (as sqlglot's optimizer hands each rule
the keyword arguments it names).
"""

from __future__ import annotations

import functools
import inspect

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.rewrite.bound_groups import bound_groups
from dpsql.rewrite.bound_summands import bound_summands
from dpsql.rewrite.clamp_values import clamp_values
from dpsql.rewrite.count_distinct_values import count_distinct_values
from dpsql.rewrite.date_constants import date_constants
from dpsql.rewrite.grid_sums import grid_sums
from dpsql.rewrite.guard_errors import guard_errors
from dpsql.rewrite.per_user_aggregate import per_user_aggregate
from dpsql.rewrite.restrict_domains import restrict_domains
from dpsql.rewrite.statistics_query import statistics_query
from dpsql.rewrite.traits import DEFAULT, EngineTraits

#: The passes in order. ``guard_errors`` comes last: over the final tree, including what
#: the earlier passes copied or wrote, it refuses what no engine's guard can catch; the
#: backend then guards the tree it runs by its allow-list (:mod:`dpsql.backends.total`).
RULES = (
    date_constants,
    restrict_domains,
    clamp_values,
    per_user_aggregate,
    bound_groups,
    bound_summands,
    grid_sums,
    count_distinct_values,
    guard_errors,
)


def rewrite(plan: Plan, rules=RULES, engine: EngineTraits = DEFAULT) -> exp.Select:
    """Runs the passes in order on the plan's statistics query.

    Args:
        plan: the analysis' plan (read, never changed).
        rules: the passes, in order.
        engine: the traits of the engine that runs the SQL, for the passes that name an
            ``engine`` parameter.
    """
    expression = statistics_query(plan)
    for rule in rules:
        if _names_engine(rule):
            expression = rule(expression, plan, engine=engine)
        else:
            expression = rule(expression, plan)
    return expression


@functools.cache
def _names_engine(rule) -> bool:
    return "engine" in inspect.signature(rule).parameters


__all__ = ["RULES", "EngineTraits", "rewrite", "statistics_query",
           *[r.__name__ for r in RULES]]
