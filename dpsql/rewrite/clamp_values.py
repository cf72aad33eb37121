"""Pass: clamp every summed value into its bounds.

Why: the sensitivity of a sum is derived from the bounds of the summed value
(:mod:`dpsql.analyze.bounds`); clamping in SQL makes that true whatever the data hold.
The clamp wraps the whole aggregated expression, so ``SUM(a * b)`` is clamped to the
interval derived for ``a * b``.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan


def clamp_values(expression: exp.Select, plan: Plan) -> exp.Select:
    """Clamps the argument of every SUM statistic to the bounds the plan derived.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite.statistics_query import statistics_query
    >>> plan = _demo_plan("SELECT SUM(income) FROM pums")
    >>> clamp_values(statistics_query(plan), plan).sql()
    'SELECT SUM(LEAST(GREATEST(income, 0), 500000)) AS __s0 FROM pums'
    """
    stats = {s.name: s for s in plan.stats}
    for item in expression.expressions:
        stat = stats.get(item.alias_or_name)
        if stat is not None:
            stat.rule.clamp(stat, item.this)  # sums only (dpsql.aggregates.sums)
    return expression
