"""The exact per-group statistics a plan needs, as one plain GROUP BY query.

This is the starting point of the rewrite: what a non-private engine would compute.
The passes in :data:`dpsql.rewrite.RULES` then make it safe to run and bound each
user's contribution.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan


def statistics_query(plan: Plan) -> exp.Select:
    """Builds ``SELECT keys, statistics FROM table WHERE ... GROUP BY keys``.

    >>> from dpsql.engine import _demo_plan
    >>> print(statistics_query(_demo_plan("SELECT sex, AVG(age) FROM pums GROUP BY sex"))
    ...       .sql(pretty=True))
    SELECT
      sex AS __k0,
      SUM(CAST(age AS DOUBLE) - 50) AS __s0,
      COUNT(*) AS __s1
    FROM pums
    GROUP BY
      sex
    """
    select = exp.select(*(exp.alias_(k.expr.copy(), k.name) for k in plan.keys))
    for stat in plan.stats:  # each kind writes its own aggregates (dpsql.aggregates)
        for aggregate, column in stat.rule.select(stat, plan):
            select = select.select(exp.alias_(aggregate, column), copy=False)
    first, joins = plan.scope.from_clause()
    select = select.from_(first, copy=False)
    for join in joins:
        select.append("joins", join)
    if plan.where is not None:
        select = select.where(plan.where.copy(), copy=False)
    if plan.keys:
        select = select.group_by(*(k.expr.copy() for k in plan.keys), copy=False)
    return select
