"""Pass: keep only rows whose public-domain group keys lie inside their domain.

A key released from a public domain must not come from the data: a value outside the
declared domain would otherwise appear as a group of its own. Filtering such rows out
also means a user can reach at most as many groups as the domain has.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan


def restrict_domains(expression: exp.Select, plan: Plan) -> exp.Select:
    """Adds ``key IN (domain)`` to WHERE for each public-domain group key.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite.statistics_query import statistics_query
    >>> plan = _demo_plan("SELECT sex, COUNT(*) FROM pums GROUP BY sex")
    >>> restrict_domains(statistics_query(plan), plan).sql()
    'SELECT sex AS __k0, COUNT(*) AS __s0 FROM pums WHERE sex IN (0, 1) GROUP BY sex'
    """
    for key in plan.keys:
        if key.domain is None:
            continue
        values = [v for v in key.domain if v is not None]
        cond: exp.Expression = exp.In(
            this=key.expr.copy(), expressions=[exp.convert(v) for v in values]
        )
        if None in key.domain:
            cond = exp.paren(exp.or_(cond, exp.Is(this=key.expr.copy(), expression=exp.Null())))
        expression = expression.where(cond, copy=False)
    return expression
