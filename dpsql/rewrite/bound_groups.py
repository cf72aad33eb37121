"""Pass: keep at most ``max_groups`` groups per user (the L0 contribution bound).

Why it is sound: which groups a user keeps depends only on that user's own rows and a
seed independent of the data, so adding or removing a user changes at most
``max_groups`` groups. The order is a keyed hash of (user, group key, seed) rather than
``random()``: DuckDB refuses volatile expressions in a window's ORDER BY, and the
window runs over the small per-user table, not over raw rows.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.rewrite._sql import number
from dpsql.rewrite.per_user_aggregate import PER_USER, UID

BOUNDED = "__bounded"


def bound_groups(expression: exp.Select, plan: Plan) -> exp.Select:
    """Inserts ``__bounded`` between the per-user CTE and the outer aggregate.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite import rewrite
    >>> plan = _demo_plan("SELECT educ, COUNT(*) FROM pums GROUP BY educ", seed=7)
    >>> print(rewrite(plan).sql(pretty=True))  # doctest: +ELLIPSIS
    WITH __per_user AS (...), __bounded AS (
      SELECT
        *
      FROM (
        SELECT
          *,
          ROW_NUMBER() OVER (PARTITION BY __uid ORDER BY HASH(__uid, __k0, 7)...) AS __rank
        FROM __per_user
      ) AS __ranked
      WHERE
        __rank <= 1
    )
    SELECT
      __k0,
      SUM(__s0) AS __s0
    FROM __bounded
    GROUP BY
      __k0
    """
    if not plan.bound_groups or plan.uid is None:
        return expression
    order = exp.Anonymous(
        this="HASH",
        expressions=[exp.column(UID), *(exp.column(k.name) for k in plan.keys), number(plan.seed)],
    )
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column(UID)],
        order=exp.Order(expressions=[exp.Ordered(this=order)]),
    )
    ranked = exp.select(exp.Star(), exp.alias_(rank, "__rank")).from_(PER_USER)
    bounded = (
        exp.select(exp.Star())
        .from_(ranked.subquery("__ranked"))
        .where(sqlglot.condition(f"__rank <= {int(plan.max_groups)}"))
    )
    expression = expression.with_(BOUNDED, as_=bounded, copy=False)
    expression.set("from_", exp.From(this=exp.to_table(BOUNDED)))
    return expression
