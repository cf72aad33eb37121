"""The exact per-group statistics a plan needs, as one plain GROUP BY query.

This is the starting point of the rewrite: what a non-private engine would compute.
The passes in :data:`dpsql.rewrite.RULES` then make it safe to run and bound each
user's contribution.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan, Statistic
from dpsql.rewrite._sql import number


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
    for stat in plan.stats:
        if stat.kind == "hist":
            for j, column in enumerate(stat.columns):
                select = select.select(exp.alias_(bin_count(stat, j, stat.arg.copy()), column),
                                       copy=False)
            continue
        select = select.select(exp.alias_(_aggregate(stat, plan), stat.name), copy=False)
    first, joins = plan.scope.from_clause()
    select = select.from_(first, copy=False)
    for join in joins:
        select.append("joins", join)
    if plan.where is not None:
        select = select.where(plan.where.copy(), copy=False)
    if plan.keys:
        select = select.group_by(*(k.expr.copy() for k in plan.keys), copy=False)
    return select


def _aggregate(stat: Statistic, plan: Plan) -> exp.Expression:
    if stat.kind == "users":
        if plan.uid is None or plan.one_row_per_user:  # one row per user
            return exp.Count(this=exp.Star())
        return exp.Count(this=exp.Distinct(expressions=[plan.uid.copy()]))
    if stat.kind == "count":
        return exp.Count(this=stat.arg.copy() if stat.arg is not None else exp.Star())
    if stat.kind == "distinct":
        return exp.Count(this=exp.Distinct(expressions=[stat.arg.copy()]))
    return exp.Sum(this=value_expression(stat, stat.arg.copy()))


def bin_count(stat: Statistic, j: int, arg: exp.Expression) -> exp.Expression:
    """``COUNT(CASE WHEN <arg in bin j> THEN 1 END)`` for a histogram statistic.

    Bin ``j`` is ``[e_j, e_{j+1})``, the first open below and the last open above, so
    values outside the bounds land in the end bins (the clamp) and each row matches at
    most one bin: ``x < a`` and ``x >= a`` never hold together.

    >>> from dpsql.engine import _demo_plan
    >>> stat = _demo_plan("SELECT MEDIAN(age) FROM pums").stats[0]
    >>> bin_count(stat, 0, exp.column("age")).sql()
    'COUNT(CASE WHEN age < 1.5 THEN 1 END)'
    >>> bin_count(stat, 1, exp.column("age")).sql()
    'COUNT(CASE WHEN age >= 1.5 AND age < 3.5 THEN 1 END)'
    """
    edges = stat.bins.edges
    last = stat.bins.count - 1
    parts = []
    if j > 0:
        parts.append(exp.GTE(this=arg, expression=number(float(edges[j]))))
    if j < last:
        parts.append(exp.LT(this=arg.copy(), expression=number(float(edges[j + 1]))))
    if not parts:  # a single bin: every non-NULL value
        parts.append(exp.Not(this=exp.Is(this=arg, expression=exp.Null())))
    condition = exp.and_(*parts) if len(parts) > 1 else parts[0]
    return exp.Count(this=exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1))]))


def bin_argument(aggregate: exp.Expression) -> exp.Expression:
    """The per-row expression inside a :func:`bin_count`."""
    condition = aggregate.this.args["ifs"][0].this
    return condition.this if isinstance(condition, exp.GTE | exp.LT) else condition.this.this


def value_expression(stat: Statistic, arg: exp.Expression) -> exp.Expression:
    """The per-row value a SUM-like statistic adds up: ``arg``, ``arg − m`` or ``(arg − m)²``.

    The centre's subtraction and the square are dpsql's own arithmetic, so they run in
    DOUBLE, which cannot overflow whatever the column's type (``(age − 50)²`` in a
    TINYINT column would fail for most ages): these statistics are fractional anyway.

    >>> from dpsql.engine import _demo_plan
    >>> plan = _demo_plan("SELECT VARIANCE(age) FROM pums")
    >>> value_expression(plan.stats[0], exp.column("age")).sql()
    '(CAST(age AS DOUBLE) - 50) * (CAST(age AS DOUBLE) - 50)'
    """
    if stat.kind == "sumsq":
        return exp.Mul(this=exp.paren(exp.Sub(this=_double(arg), expression=number(stat.center))),
                       expression=exp.paren(exp.Sub(this=_double(arg.copy()),
                                                    expression=number(stat.center))))
    if stat.center:
        return exp.Sub(this=_double(arg), expression=number(stat.center))
    return arg


def _double(arg: exp.Expression) -> exp.Expression:
    return exp.Cast(this=arg, to=exp.DataType.build("DOUBLE"))


def argument(stat: Statistic, aggregate: exp.Expression) -> exp.Expression:
    """The analyst's per-row expression inside a SUM-like statistic built above."""
    value = aggregate.this
    if stat.kind == "sumsq":
        return value.this.this.this.this
    if stat.center:
        return value.this.this
    return value
