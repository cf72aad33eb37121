"""Subqueries and CTEs in FROM: per-user aggregation inside, private answers outside.

A derived table may aggregate *per user*::

    SELECT AVG(n) FROM (SELECT pid, COUNT(*) AS n FROM visits GROUP BY pid) t

It must group by the user key (and may add further keys), so each of its rows still
belongs to one user. Its aggregates get bounds from the contribution bounds, and the
SQL enforces them when it computes the derived table (``R`` is the inner table's
``max_rows``):

* ``COUNT(*)`` / ``COUNT(x)``: a user's rows in one inner group, capped at ``R``:
  ``[0, R]`` (whole numbers, so a GROUP BY on it has the public domain ``0..R``);
* ``SUM(x)`` with ``x`` in ``[L, U]``: clamped to ``[R·min(L,0), R·max(U,0)]``;
* ``AVG(x)``, ``MIN(x)``, ``MAX(x)``: an average, least or greatest of values clamped
  to ``[L, U]`` stays in ``[L, U]`` (NULL when the user has no value).

The outer query then sees an ordinary private table whose user key is the inner one,
with ``max_rows`` 1 when the inner query groups by the user key alone (one row per
user) and the inner table's bounds otherwise.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from dpsql.analyze import sensitivity
from dpsql.analyze.bounds import bounds
from dpsql.catalog import Catalog, Column, Table
from dpsql.errors import UnsupportedQueryError
from dpsql.rewrite._sql import clamp, number

_ALLOWED_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)


def inline_ctes(select: exp.Select, max_nodes: int | None = None) -> exp.Select:
    """Replaces references to WITH tables by the subqueries they name.

    Written out, a WITH table referenced twice by the next one, and so on, doubles per
    level: 1 KB of SQL could become gigabytes of tree before anything is charged. So the
    size of the written-out query is computed first, from the sizes of the WITH tables
    (no copy made), and a query beyond ``max_nodes`` syntax nodes is refused.

    >>> from sqlglot import parse_one
    >>> chain = ("WITH c0 AS (SELECT pid FROM t), " + ", ".join(
    ...     f"c{i} AS (SELECT a.pid FROM c{i - 1} a JOIN c{i - 1} b ON a.pid = b.pid)"
    ...     for i in range(1, 12)) + " SELECT COUNT(*) FROM c11")
    >>> inline_ctes(parse_one(chain), max_nodes=5000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpsql.errors.UnsupportedQueryError: with its WITH tables written out, ... (max_nodes)
    """
    with_ = select.args.get("with_")
    if not with_:
        return select
    if with_.args.get("recursive"):
        raise UnsupportedQueryError("WITH RECURSIVE is not supported")
    if max_nodes is not None:
        _check_written_out_size(select, max_nodes)
    select = select.copy()
    ctes = {}
    for cte in select.args["with_"].expressions:
        body = cte.this
        for table in list(body.find_all(exp.Table)):  # earlier CTEs inside later ones
            if table.name.lower() in ctes and not table.args.get("db"):
                table.replace(_as_subquery(ctes[table.name.lower()], table))
        ctes[cte.alias.lower()] = body
    select.set("with_", None)
    for table in list(select.find_all(exp.Table)):
        if table.name.lower() in ctes and not table.args.get("db"):
            table.replace(_as_subquery(ctes[table.name.lower()], table))
    return select


def _check_written_out_size(select: exp.Select, max_nodes: int) -> None:
    sizes: dict[str, int] = {}

    def size(node: exp.Expression) -> int:
        total = 0
        for n in node.walk():
            total += 1
            if isinstance(n, exp.Table) and not n.args.get("db"):
                total += sizes.get(n.name.lower(), 0)
            if total > max_nodes:
                raise UnsupportedQueryError(
                    f"with its WITH tables written out, the query has more than {max_nodes} "
                    "syntax nodes (max_nodes)")
        return total

    for cte in select.args["with_"].expressions:
        sizes[cte.alias.lower()] = size(cte.this)
    body = select.copy()  # the outer query alone (its WITH is counted through references)
    body.set("with_", None)
    size(body)


def _as_subquery(body: exp.Select, table: exp.Table) -> exp.Subquery:
    alias = table.alias or table.name
    return exp.Subquery(this=body.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias)))


def derive(subquery: exp.Subquery, catalog: Catalog, unique=None):
    """Analyses a derived table.

    Returns:
        (the derived table as a catalog table, its bounded SQL, the inner scope, and
        whether it groups by the user key alone, so that it has one row per user).
    """
    from dpsql.analyze.scope import build_scope

    inner = subquery.this
    if not isinstance(inner, exp.Select):
        raise UnsupportedQueryError("only a SELECT can be used as a derived table")
    alias = (subquery.alias or "").lower()
    if not alias:
        raise UnsupportedQueryError("a subquery in FROM needs an alias")
    if alias.startswith("__"):
        raise UnsupportedQueryError(f"aliases starting with '__' are reserved: {alias!r}")
    for key in ("order", "limit", "offset", "distinct"):
        if inner.args.get(key):
            raise UnsupportedQueryError(
                f"{key.upper()} inside a derived table is not allowed: it would pick rows "
                "by their values")
    scope, inner = build_scope(inner, catalog, unique)
    if scope.uid is None:
        raise UnsupportedQueryError("a derived table over a row_privacy table is not supported")
    from dpsql.analyze.analyze import _qualify  # the same name resolution as outside

    names = [e.alias_or_name for e in inner.expressions]
    inner = _qualify(inner, scope, set(names))
    group = inner.args.get("group")
    keys = list(group.expressions) if group else []
    if not any(_row_uid(k, scope) for k in keys):
        raise UnsupportedQueryError(
            "a derived table must GROUP BY the user key (so each of its rows belongs to one "
            "user); aggregate per user inside, privately outside")
    R = max(s.table.max_rows for s in scope.private)
    G = max(s.table.max_groups for s in scope.private)
    columns: dict[str, Column] = {}
    out = exp.select()
    user_key = None
    for item, name in zip(inner.expressions, names, strict=True):
        name = name.lower()
        body = item.this if isinstance(item, exp.Alias) else item
        if name in columns:
            raise UnsupportedQueryError(f"derived table {alias!r} has two columns named {name!r}")
        if isinstance(body, _ALLOWED_AGGREGATES):
            column, sql = _aggregate(body, name, scope, R)
        elif any(body == k for k in keys):
            if _row_uid(body, scope):
                user_key = name
                # the user key keeps its own type: equalities with it are only trusted
                # between columns of one type (see scope._attach_users)
                column = dataclasses.replace(scope.column(body), name=name, lower=None,
                                             upper=None, values=None)
            else:
                base = scope.column(body) if isinstance(body, exp.Column) else None
                column = dataclasses.replace(base, name=name) if base else Column(name, "string")
            sql = body.copy()
        else:
            raise UnsupportedQueryError(
                f"derived table column {name!r} must be a GROUP BY key or an aggregate "
                "(COUNT, SUM, AVG, MIN, MAX)")
        columns[name] = column
        out = out.select(exp.alias_(sql, name), copy=False)
    if user_key is None:
        raise UnsupportedQueryError("a derived table must select the user key it groups by")
    first, joins = scope.from_clause()
    out = out.from_(first, copy=False)
    for join in joins:
        out.append("joins", join)
    if inner.args.get("where"):
        out.set("where", inner.args["where"].copy())
    if inner.args.get("having"):
        raise UnsupportedQueryError("HAVING inside a derived table is not supported yet")
    out.set("group", exp.Group(expressions=[k.copy() for k in keys]))
    per_user = len(keys) == 1
    # a fresh name: the derived table must never be taken for a catalog table of the
    # same name (whose uniqueness or foreign keys it does not have)
    table = Table(f"__derived_{alias}", columns, user_key=user_key,
                  max_groups=1 if per_user else G, max_rows=1 if per_user else R,
                  derived=True)
    return (table, exp.Subquery(this=out, alias=exp.TableAlias(this=exp.to_identifier(alias))),
            scope, per_user)


def _row_uid(key: exp.Expression, scope) -> bool:
    """Whether a GROUP BY key is the user id of every row of the derived table.

    It must be the scope's user id, or the user key of a source that is in every row:
    the first table or one joined INNER. A LEFT-joined table's key is NULL on rows
    without a match, which would merge the rows of many users into one NULL group.
    """
    if not isinstance(key, exp.Column):
        return False
    if key == scope.uid:
        return True
    if not scope.is_uid(key):
        return False
    source = scope.source(key.table) if key.table else scope.sources[0]
    return source.kind in ("from", "inner") and not source.table.public


def _aggregate(agg: exp.Expression, name: str, scope, R: int) -> tuple[Column, exp.Expression]:
    arg = agg.this
    if isinstance(arg, exp.Distinct):
        raise UnsupportedQueryError("DISTINCT aggregates inside a derived table are not supported")
    if isinstance(agg, exp.Count):
        # at most R rows of a user are counted in each inner group
        counted = exp.Count(this=_try(arg.copy()) if not isinstance(arg, exp.Star) else arg)
        domain = tuple(range(R + 1)) if R < 10_000 else None  # whole numbers 0..R
        return Column(name, "int", 0, R, domain), exp.Least(
            this=counted, expressions=[number(R)], ignore_nulls=True)
    interval = bounds(arg, scope.column)
    value = clamp(_try(arg.copy()), interval.lower, interval.upper, keep_null=True)
    ctype = "int" if interval.integer else "float"
    if isinstance(agg, exp.Avg | exp.Min | exp.Max):
        ctype = "float" if isinstance(agg, exp.Avg) else ctype
        return Column(name, ctype, interval.lower, interval.upper, nullable=True), \
            type(agg)(this=value)
    low, high = sensitivity.partial_range("sum", interval, R)
    total = clamp(exp.Coalesce(this=exp.Sum(this=value), expressions=[number(0)]), low, high)
    return Column(name, ctype, low, high), total


def _try(e: exp.Expression) -> exp.Expression:
    return e if isinstance(e, exp.Column) else exp.Try(this=e)
