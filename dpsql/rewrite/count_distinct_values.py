"""Pass: ``COUNT(DISTINCT col)`` for a column other than the user key, bounded per user.

Why it is sound: each user keeps at most ``R`` (``max_rows``) distinct values per group
(the smallest by a keyed hash, :func:`~dpsql.rewrite.per_user_aggregate.values_table`),
and only in the groups the L0 step kept for that user (a join with ``__bounded`` on the
user and the keys, null-safe). A group's count is the number of distinct values over
all users' kept values. Adding or removing one user adds or removes at most that user's
``R`` kept values in each of at most ``G`` groups, so each count moves by at most ``R``
(less when other users share the values): L∞ = R, L1 = G·R, as for ``COUNT(*)``.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.rewrite._sql import number
from dpsql.rewrite.bound_groups import BOUNDED
from dpsql.rewrite.per_user_aggregate import UID, VALUE, values_table

MAIN = "__main"


def count_distinct_values(expression: exp.Select, plan: Plan) -> exp.Select:
    """Counts each group's kept distinct values and joins the counts to the main result.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite import rewrite
    >>> plan = _demo_plan("SELECT COUNT(DISTINCT age) FROM pums_dup", max_rows=2)
    >>> print(rewrite(plan).sql(pretty=True))  # doctest: +ELLIPSIS
    WITH __per_user AS (...), __values__s0 AS (...), __count__s0 AS (
      SELECT
        COUNT(DISTINCT __values__s0.__v) AS __s0
      FROM __values__s0
      WHERE
        __values__s0.__vrank <= 2
    )
    SELECT
      __main.__rows,
      __count__s0.__s0
    FROM (
      SELECT
        COUNT(*) AS __rows
      FROM __per_user
    ) AS __main
    CROSS JOIN __count__s0
    """
    with_ = expression.args.get("with_")
    ctes = {c.alias for c in with_.expressions} if with_ else set()
    # the COUNT(DISTINCT col) statistics, whose values per_user_aggregate kept
    stats = [s for s in plan.stats if values_table(s) in ctes]
    if not stats:  # one row per user: the plain COUNT(DISTINCT) is already bounded
        return expression
    keys = [exp.column(k.name) for k in plan.keys]
    main = expression.copy()
    main.set("with_", None)
    # the main columns by name (``__main.*`` loses them on some backends)
    out = exp.select(*(exp.column(e.alias_or_name, MAIN) for e in main.expressions)).from_(
        main.subquery(MAIN), copy=False)
    for stat in stats:
        source = values_table(stat)
        counts = exp.select(*(exp.column(k.name, source) for k in plan.keys),
                            exp.alias_(exp.Count(this=exp.Distinct(
                                expressions=[exp.column(VALUE, source)])), stat.name))
        counts = counts.from_(source, copy=False).where(
            exp.LTE(this=exp.column("__vrank", source), expression=number(plan.max_rows)),
            copy=False)
        if BOUNDED in ctes:
            on = [exp.EQ(this=exp.column(UID, source), expression=exp.column(UID, BOUNDED))]
            on += [exp.NullSafeEQ(this=exp.column(k.name, source),
                                  expression=exp.column(k.name, BOUNDED)) for k in plan.keys]
            counts = counts.join(BOUNDED, on=exp.and_(*on), copy=False)
        if keys:
            counts = counts.group_by(*(exp.column(k.name, source) for k in plan.keys),
                                     copy=False)
        name = f"__count{stat.name}"
        expression = expression.with_(name, as_=counts, copy=False)
        out = out.select(exp.column(stat.name, name), copy=False)
        if keys:
            on = exp.and_(*(exp.NullSafeEQ(this=exp.column(k.name, MAIN),
                                           expression=exp.column(k.name, name))
                            for k in plan.keys))
            out = out.join(name, on=on, join_type="LEFT", copy=False)
        else:
            out = out.join(name, join_type="CROSS", copy=False)
    out.set("with_", expression.args["with_"])
    return out
