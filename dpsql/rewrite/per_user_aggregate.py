"""Pass: one clamped partial aggregate per (user, group), then aggregate per group.

This is the contribution bound on rows (L∞): whatever number of rows a user has in a
group, the group sees one partial per user, clamped into the range of
:func:`dpsql.analyze.sensitivity.partial_range` — counts capped at ``max_rows``, sums
clamped to ``max_rows`` rows' worth, and the user counted once. It is a hash
aggregate, with no window over raw rows. Tables with ``row_privacy`` need no per-user
step (each row is a user and its clamped value already is its partial).

Rows whose user key is NULL belong to no user and are left out. Grouped together they
would form one pseudo-user of several people (rows the database stores without a key,
and values a typed read maps to NULL, such as SQLite's ``''`` in an INTEGER key):
adding one person there changes which groups the pseudo-user keeps under
``max_groups``, and so moves another person's contribution, a change of two units
where the noise covers one. Left out, such a person changes nothing.

Where the user is found through a join they are left out after the grouping
(``HAVING COUNT(uid) > 0``), not before it (``WHERE uid IS NOT NULL``, kept for a single
table), and the relation is the same. The CTE groups by the user
key (and the keys), so all rows of a group share one user key: NULL in every row of a
group or in none (GROUP BY puts the NULLs together, apart from every value). A group
is never empty, so ``COUNT(uid)``, which counts the non-NULL values, is 0 exactly for
the groups whose user key is NULL, and those groups are made of exactly the rows whose
user key is NULL. Dropping them drops exactly what dropping those rows first would
have dropped, and leaves every other group's rows, and so its aggregates, untouched.
The aggregates of the dropped groups are computed and thrown away: they read the same
row expressions as every other group, which the backend's totality proof covers for
any row, so they cannot fail where the others would not.

Why an aggregate where the user is found through a join: any test on the user key
itself, in WHERE, in HAVING or in a query over the CTE, DuckDB pushes down into the
scan of the table holding the key, where it changes the join's estimates and so its
build side (TPC-H q6 at sf1: the hash table is built over all 1.5M orders instead of
the 114k lineitem rows the WHERE leaves, about 2× the floor's time). A condition on
an aggregate cannot be pushed below the aggregate, so the join runs as in the floor,
which has no exclusion. Without a join there is no build side to flip, and the extra
``COUNT(uid)`` per group costs more than the row filter (PUMS 1M, COUNT(DISTINCT pid):
about 15%), so a single table keeps ``WHERE ... AND NOT uid IS NULL``; both forms drop
exactly the NULL user's rows. A derived table in FROM counts as joined: its user key
test is pushed through its GROUP BY into its own join (TPC-H q13, ``customer LEFT JOIN
orders`` grouped by customer, at sf 1: 1.44x its floor with the WHERE test, 1.05x with
HAVING). Where :mod:`dpsql.rewrite.restrict_domains` moved key
filters after the grouping (joined rows), the HAVING tests both in one condition
(:func:`_both`), for the same reason. Every later step relies on ``__per_user`` (and
:func:`_distinct_values`' table) holding no NULL user id
(:mod:`dpsql.rewrite.bound_groups`).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.rewrite._sql import number, table, table_alias

UID = "__uid"
#: Column of ``__per_user`` holding a user's rows in a group before the cap, read only by
#: the bias check's own query (:func:`dpsql.bias.bias_query`).
RAW_ROWS = "__raw_rows"
PER_USER = "__per_user"
#: Column of a user's distinct values in :func:`values_table`.
VALUE = "__v"


def values_table(stat) -> str:
    """The CTE holding each user's distinct values of a COUNT(DISTINCT col) statistic."""
    return f"__values{stat.name}"


def _distinct_values(inner: exp.Select, value: exp.Expression, plan: Plan) -> exp.Select:
    """``(user, keys, value)`` rows, one per distinct value, ranked by a keyed hash.

    Keeping the ``R`` values of smallest hash (``__vrank <= R``, applied by
    :func:`dpsql.rewrite.count_distinct_values.count_distinct_values`) bounds how many
    values one user adds to a group's distinct count; which values a user keeps depends
    on that user's values and the seed only.
    """
    keys = [e.copy() for e in inner.expressions if e.alias_or_name.startswith("__k")]
    group = [e.this.copy() for e in keys]
    order = exp.Anonymous(this="HASH", expressions=[value.copy(), number(plan.seed)])
    # ties of the hash (a collision, or a canonical form shared by different values, as
    # SQLite's REAL of two large integers) are broken by the value, not by row order
    rank = exp.Window(this=exp.RowNumber(),
                      partition_by=[plan.uid.copy(), *(g.copy() for g in group)],
                      order=exp.Order(expressions=[exp.Ordered(this=order),
                                                   exp.Ordered(this=value.copy())]))
    out = exp.select(exp.alias_(plan.uid.copy(), UID), *keys, exp.alias_(value.copy(), VALUE),
                     exp.alias_(rank, "__vrank"))
    out.set("from_", inner.args["from_"].copy())
    for join in inner.args.get("joins") or []:
        out.append("joins", join.copy())
    if inner.args.get("where"):
        out.set("where", inner.args["where"].copy())
    out = out.group_by(plan.uid.copy(), *group, value.copy(), copy=False)
    # the same exclusion of NULL users as the per-user CTE (module docstring); HAVING
    # runs before the window, so no rank is computed over a NULL user's values
    # the NULL user's rows were left out by the copied WHERE, or are dropped here
    having = inner.args.get("having")
    return out.having(having.this.copy(), copy=False) if having is not None else out


def _known(plan: Plan) -> exp.Expression:
    """``COUNT(uid) > 0``, in the HAVING of a grouping by ``uid``: the group belongs to a
    user (its user key is not NULL; module docstring)."""
    return exp.GT(this=exp.Count(this=plan.uid.copy()), expression=number(0))


def _both(keys: exp.Expression, known: exp.Expression) -> exp.Expression:
    """``CASE WHEN keys THEN known ELSE FALSE END``: ``keys AND known`` as one condition.

    Written as AND, DuckDB splits the conjuncts and pushes ``keys``, a test of grouped
    columns only, below the aggregate into the join's input, where it changes the
    join's estimates (the reason it is in HAVING at all,
    :mod:`dpsql.rewrite.restrict_domains`). The CASE is one condition over an
    aggregate, which stays above it. Same truth: TRUE exactly when both are TRUE
    (a NULL ``keys`` takes the ELSE branch, as AND with a NULL drops the group).
    """
    return exp.Case(ifs=[exp.If(this=keys.copy(), true=known)], default=exp.false())


def _filters(expression: exp.Select, plan: Plan) -> tuple[exp.Where | None,
                                                         exp.Expression | None]:
    """The per-user step's WHERE and HAVING conditions (module docstring): the NULL
    user's rows dropped before the grouping from a single table, its groups after it
    where a join (here or in a derived table in FROM) finds the user; and the key
    filters restrict_domains moved after the grouping."""
    where = expression.args.get("where")
    joined = bool(expression.args.get("joins")) \
        or not isinstance(expression.args["from_"].this, exp.Table)
    if not joined:
        known = exp.Not(this=exp.Is(this=plan.uid.copy(), expression=exp.Null()))
        where = exp.Where(this=known if not where else exp.And(
            this=exp.paren(where.this.copy(), copy=False), expression=known))
    condition = _known(plan) if joined else None
    having = expression.args.get("having")
    if having is not None:
        condition = having.this.copy() if condition is None else _both(having.this, condition)
    return where, condition


def per_user_aggregate(expression: exp.Select, plan: Plan) -> exp.Select:
    """Splits the statistics query into a per-user CTE and an outer per-group SUM.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite.statistics_query import statistics_query
    >>> plan = _demo_plan("SELECT COUNT(*) FROM pums_dup", max_rows=2)
    >>> print(per_user_aggregate(statistics_query(plan), plan).sql(pretty=True))
    WITH __per_user AS (
      SELECT
        pid AS __uid,
        LEAST(COUNT(*), 2) AS __s0
      FROM pums_dup
      WHERE
        NOT pid IS NULL
      GROUP BY
        pid
    )
    SELECT
      SUM(__s0) AS __s0
    FROM __per_user
    """
    if plan.uid is None or plan.one_row_per_user:
        return expression
    inner = exp.select(exp.alias_(plan.uid.copy(), UID))
    outer = exp.select()
    distinct: list = []
    for item in expression.expressions:
        name = item.alias_or_name
        if name.startswith("__k"):
            inner = inner.select(item.copy(), copy=False)
            outer = outer.select(exp.column(name), copy=False)
            continue
        # each kind of statistic says its partial and its per-group total
        # (dpsql.aggregates; the ranges are dpsql.analyze.sensitivity's)
        stat = plan.stat(name)
        value = stat.rule.distinct_value(item.this)
        if value is not None:  # counted from a table of their own
            distinct.append((stat, value))
        partial = stat.rule.partial(stat, item.this, plan.max_rows)
        if partial is not None:
            inner = inner.select(exp.alias_(partial, name), copy=False)
        total = stat.rule.per_group(name)
        if total is not None:
            outer = outer.select(exp.alias_(total, name), copy=False)
    if plan.bias is not None and not plan.bias.free:
        # the user's rows in the group before any cap, read only by the bias check's
        # own query (dpsql.bias.bias_query); the statistics below never read it
        inner = inner.select(exp.alias_(exp.Count(this=exp.Star()), RAW_ROWS), copy=False)
    inner.set("from_", expression.args["from_"].copy())
    for join in expression.args.get("joins") or []:
        inner.append("joins", join.copy())
    where, condition = _filters(expression, plan)
    if where:
        inner.set("where", where.copy())
    group = expression.args.get("group")
    keys = [k.copy() for k in group.expressions] if group else []
    inner = inner.group_by(plan.uid.copy(), *keys, copy=False)
    if condition is not None:
        inner = inner.having(condition, copy=False)
    if not outer.expressions or all(e.alias_or_name.startswith("__k")
                                    for e in outer.expressions):
        outer = outer.select(exp.alias_(exp.Count(this=exp.Star()), "__rows"), copy=False)
    outer = outer.from_(table(PER_USER), copy=False).with_(table_alias(PER_USER), as_=inner,
                                                          copy=False)
    for stat, value in distinct:
        outer = outer.with_(values_table(stat), as_=_distinct_values(inner, value, plan),
                            copy=False)
    if plan.keys:
        outer = outer.group_by(*(exp.column(k.name) for k in plan.keys), copy=False)
    return outer
