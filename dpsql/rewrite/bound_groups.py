"""Pass: keep at most ``max_groups`` groups per user (the L0 contribution bound).

Why it is sound: which groups a user keeps depends only on that user's own rows and a
seed independent of the data, so adding or removing a user changes at most
``max_groups`` groups. A user with more groups keeps those first in the order of a
keyed hash of (user, group key, seed) rather than ``random()``: DuckDB refuses
volatile expressions in a window's ORDER BY, and the window runs over the small
per-user table, not over raw rows.

How it is cheap: a window over the whole per-user table costs DuckDB 2–3× the per-user
aggregate itself, yet most users usually stay within the bound and keep all their
groups anyway. So where the backend computes a CTE referenced several times once
(``engine.reuse_ctes``, :class:`~dpsql.rewrite.traits.EngineTraits`), the users over
the bound are found first with a hash aggregate (``__over``), every other
user's rows pass as they are, and only the users over the bound go through the
window. The result is the same set of rows as the window over everyone; measured on
2M rows of 1M people with one group each, the L0 step's share drops from 2.7× to 1.5×
the per-user aggregate (when every user is over the bound it is 1.5× slower than the
plain window).

``__per_user`` holds no row whose user id is NULL: the per-user pass drops those
groups (``HAVING COUNT(uid) > 0``, :mod:`dpsql.rewrite.per_user_aggregate`), and this
pass reads nothing else. So every ``__uid`` here is non-NULL, and ``__over``, a subset
of them, holds no NULL either. On such values ``__uid IN (SELECT __uid FROM __over)``
is plain membership, TRUE or FALSE, never NULL (SQL's IN is NULL only for a NULL left
side or when the set holds a NULL), and ``NOT __uid IN (...)`` is exactly its
complement: the two branches of ``__bounded`` split ``__per_user`` into users within
and users over the bound, with no row in both or in neither. No ``IS NULL`` test is
written: it would be the identity on this table, and on DuckDB the former ``OR __uid
IS NULL`` beside the semi-join (and ``NOT __uid IS NULL`` beside the anti-join) made
the L0 step nearly double the query's time (TPC-H q1 at sf1 on one thread: 1.68 s,
against 0.94 s for the same step without them and 0.92 s with no L0 step at all).

When the public key domain has exactly ``max_groups + 1`` combinations, ``__over`` is
found without the aggregate over all users: it is the users with a row at every
combination, a chain of semi-joins each building a hash table over one combination's
rows only (:func:`_over_by_cover`; on 1M people grouped by ``sex`` with ``max_groups``
1 it takes the query from about 1.5× to 1.2× the floor without the L0 step).

Where the time goes, and what did not help (DuckDB 2.0, resampled PUMS with
``max_groups`` 1, 1M people, process CPU over the floor, ``python -m
benchmarks.l0_cost``, 2026-11-27): dpsql's per-user aggregate costs the floor's (0.93–1.05×);
the L0 step is all of the rest, and in it materialising ``__per_user`` and the
semi/anti-joins cost about 0.03; finding ``__over`` costs 0.25 (cover) to 0.4–0.55
(aggregate). Measured instead of ``__over``'s aggregate and rejected (the L0 step's
share with each, against 0.4 on ``income_by_race``): a self semi-join on ``__uid`` with
``__k0 <>`` (0.85), a self join with ``DISTINCT`` (0.75),
``HAVING MIN(__k0) < MAX(__k0)`` (0.55), ``COUNT(*) OVER (PARTITION BY __uid)`` in the
per-user step (1.25). Measured instead of the window: ``GROUP BY __uid`` with one
``arg_min(col, hash)`` per column (3.3× the floor), the window over everyone (2.2×).
Grouping the first aggregate by the user alone, with the key and a one-group flag as
aggregates, costs about 0.17 per extra aggregate: with ``MIN``/``MAX`` it is no cheaper
than ``__over``; with one ``BIT_OR`` of a one-hot of the key combination (≤ 62
combinations) it saved 0.1–0.2 (1.45× → 1.33× at 1M, 1.40× → 1.21× at 10M on
``income_by_race``) but lost to the cover (1.21× → 1.36× on ``count_by_sex``); not
adopted: it helps only the aggregate case with small integer domains, SQLite has no
``BIT_OR``, and the gain is near this machine's noise at 1M.
"""

from __future__ import annotations

import itertools
import math

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.rewrite._sql import condition, constant, number, table, table_alias
from dpsql.rewrite.per_user_aggregate import PER_USER, UID
from dpsql.rewrite.traits import DEFAULT, EngineTraits

BOUNDED = "__bounded"
OVER = "__over"


def bound_groups(expression: exp.Select, plan: Plan,
                 engine: EngineTraits = DEFAULT) -> exp.Select:
    """Inserts ``__bounded`` between the per-user CTE and the outer aggregate.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite import rewrite
    >>> plan = _demo_plan("SELECT educ, COUNT(*) FROM pums GROUP BY educ", seed=7)
    >>> print(rewrite(plan).sql(pretty=True))  # doctest: +ELLIPSIS
    WITH __per_user AS (...), __over AS (
      SELECT
        __uid
      FROM __per_user
      GROUP BY
        __uid
      HAVING
        COUNT(*) > 1
    ), __bounded AS (
      SELECT
        *,
        1 AS __rank
      FROM __per_user
      WHERE
        NOT __uid IN (...)
      UNION ALL
      SELECT
        *
      FROM (
        SELECT
          *,
          ROW_NUMBER() OVER (PARTITION BY __uid ORDER BY HASH(__uid, __k0, 7)...) AS __rank
        FROM __per_user
        WHERE
          __uid IN (...)
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
    G = int(plan.max_groups)
    # (built without parsing or copying: the same trees, cheaper; dpsql.sqlbuild)
    ranked = exp.select(exp.Star(), exp.alias_(rank, "__rank")).from_(table(PER_USER), copy=False)
    if engine.reuse_ctes:
        expression = expression.with_(table_alias(OVER), as_=_over(plan, G), copy=False)
        # no NULL __uid reaches here, so IN and NOT IN split the rows (module docstring)
        within = (exp.select(exp.Star(), exp.alias_(number(1), "__rank"))
                  .from_(table(PER_USER), copy=False)
                  .where(condition(f"NOT {UID} IN (SELECT {UID} FROM {OVER})"), copy=False))
        ranked = ranked.where(condition(f"{UID} IN (SELECT {UID} FROM {OVER})"), copy=False)
    bounded = (
        exp.select(exp.Star())
        .from_(ranked.subquery("__ranked", copy=False), copy=False)
        .where(condition(f"__rank <= {G}"), copy=False)
    )
    if engine.reuse_ctes:
        bounded = exp.union(within, bounded, distinct=False, copy=False)
    expression = expression.with_(table_alias(BOUNDED), as_=bounded, copy=False)
    expression.set("from_", exp.From(this=table(BOUNDED)))
    return expression


def _over(plan: Plan, G: int) -> exp.Select:
    """The users with more than ``G`` rows in ``__per_user`` (which has no NULL user id)."""
    cover = _over_by_cover(plan, G)
    if cover is not None:
        return cover
    return (exp.select(exp.column(UID)).from_(table(PER_USER), copy=False)
            .group_by(exp.column(UID), copy=False)
            .having(condition(f"COUNT(*) > {G}"), copy=False))


#: Most key combinations for which :func:`_over_by_cover` writes its chain of
#: semi-joins (each scans ``__per_user`` once); above, the aggregate is cheaper.
MAX_COVER = 6

#: Catalog types whose values are equal exactly when they are the same value, so that
#: ``key = v`` and GROUP BY agree on which rows are one group (not float: ``-0.0 = 0.0``;
#: not strings: collations and padding; not dates: SQLite holds a DATE as any text, and
#: ``2020-01-01 00:00:00`` passes the domain filter's ``BETWEEN`` of a run of days yet
#: equals no domain value, a row the cover would not count).
_EXACT_TYPES = ("int", "bool")


def _over_by_cover(plan: Plan, G: int) -> exp.Select | None:
    """``__over`` as the users with a row at every key combination, or None.

    Why it is the same set as ``GROUP BY __uid HAVING COUNT(*) > G``: the
    ``restrict_domains`` pass keeps only rows whose every key lies in its public domain,
    so with ``plan.groups`` None (the whole product) each row of ``__per_user`` carries
    one of the product's ``G + 1`` combinations, and it has one row per (user,
    combination) since it is grouped by the user and the keys. A user's row count is
    then the number of distinct combinations it reaches, at most ``G + 1``, so it
    exceeds ``G`` exactly when the user reaches all of them. ``key = v`` (``key IS
    NULL`` for NULL) singles out one combination's rows, and equality picks out exactly
    GROUP BY's group only where equal values are the same value: so every key must be a
    bare catalog column of an exact type (:data:`_EXACT_TYPES`), read from a catalog
    table (a derived table's column may be typed otherwise in the database; SQLite's
    typed read turns a value of another storage class in an INT or BOOL column into
    NULL, which the filter keeps out of the domain unless NULL is in it, and then
    ``IS NULL`` matches it). The set is otherwise
    the same, so ``__bounded`` keeps the same rows; either way ``__over``, and so the
    L0 choice, is a function of one user's own rows and the seed alone; the
    sensitivity argument of the module holds unchanged.

    Returns None (the aggregate is used) when any condition fails or the product has
    more than :data:`MAX_COVER` combinations.
    """
    if plan.groups is not None or not plan.keys or not plan.public_keys:
        return None
    domains = [k.domain for k in plan.keys]
    size = math.prod(len(d) for d in domains)
    if size != G + 1 or size > MAX_COVER:
        return None
    for key in plan.keys:
        if not isinstance(key.expr, exp.Column) or not _exact_column(plan, key.expr):
            return None
    for domain in domains:
        for v in domain:
            if not (v is None or isinstance(v, int)):
                return None

    def at(combo: tuple) -> exp.Expression:
        return exp.and_(*(
            exp.Is(this=exp.column(k.name), expression=exp.Null()) if v is None
            else exp.EQ(this=exp.column(k.name), expression=constant(v))
            for k, v in zip(plan.keys, combo, strict=True)))

    combos = list(itertools.product(*domains))
    over = exp.select(exp.column(UID)).from_(table(PER_USER), copy=False).where(
        at(combos[0]), copy=False)
    for combo in combos[1:]:
        reach = exp.select(exp.column(UID)).from_(table(PER_USER), copy=False).where(
            at(combo), copy=False)
        over = over.where(exp.In(this=exp.column(UID), query=reach.subquery(copy=False)),
                          copy=False)
    return over


def _exact_column(plan: Plan, col: exp.Column) -> bool:
    """Whether a key column is a catalog table's column of an exact type."""
    try:
        source = plan.scope.source(col.table) if col.table else plan.scope.sources[0]
        if source.derived is not None or source.table.derived:
            return False
        return plan.scope.column(col).type in _EXACT_TYPES
    except Exception:  # noqa: BLE001 - any doubt keeps the aggregate
        return False
