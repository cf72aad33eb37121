"""Per-user derived tables in FROM: analysed as tables whose rows each belong to one user.

**Per-user derived tables** (:func:`derive`). A derived table may aggregate *per
user*::

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

**A function of the user's rows alone.** A SUM or AVG is not added in floating point:
the engine's rounding of a float sum depends on the order it adds the rows (storage
order, threads), so the same user's rows gave different derived values,
and a value near a line the outer query tests (a grid half-line of its noise, a WHERE
threshold) moved every such user at once (attack review: 8 users stored in the other
order moved a release 8 grid units where 7 were counted, and 1000 users 1000). Such an
aggregate is an exact sum (:func:`_exact_sum`: whole values as BIGINTs, anything else
rounded to multiples of ``2^j``), an AVG that sum over the count clamped back to
``[L, U]``: the same multiset of rows gives the same value on every run.

The outer query then sees an ordinary private table whose user key is the inner one,
with ``max_rows`` 1 when the inner query groups by the user key alone (one row per
user) and the inner table's bounds otherwise.

**One entry point.** :func:`scope_of` resolves a FROM clause with its derived tables: it
hands :func:`derive` to :func:`~dpsql.analyze.scope.build_scope`, and :func:`derive`
resolves the derived table's own FROM through :func:`scope_of` again, so nested derived
tables recurse through this module alone (the scope module knows nothing of derived
tables but the function it is given).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from sqlglot import exp

from dpsql.analyze import sensitivity
from dpsql.analyze.bounds import bounds
from dpsql.analyze.names import qualify
from dpsql.analyze.scope import Scope, build_scope
from dpsql.catalog import Catalog, Column, Table
from dpsql.errors import UnsupportedQueryError
from dpsql.sqlbuild import clamp, data_type, fine_sum, number

#: A derived table analysed: (its catalog table, its bounded SQL, its inner scope,
#: whether it has one row per user).
Derived = tuple[Table, exp.Subquery, Scope, bool]

_ALLOWED_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)


def scope_of(select: exp.Select, catalog: Catalog,
             unique: Callable[[str, str], bool] | None = None) -> tuple[Scope, exp.Select]:
    """Resolves a query's FROM clause, its derived tables analysed by :func:`derive`.

    The one entry point of the analysis of FROM (the outer query's and, recursively,
    every derived table's); see :func:`~dpsql.analyze.scope.build_scope` for the rules
    and the returned values.
    """
    return build_scope(select, catalog, unique,
                       lambda subquery: derive(subquery, catalog, unique))


def derive(subquery: exp.Subquery, catalog: Catalog,
           unique: Callable[[str, str], bool] | None = None) -> Derived:
    """Analyses a derived table (see the module docstring for its rules and bounds).

    Returns:
        (the derived table as a catalog table, its bounded SQL, the inner scope, and
        whether it groups by the user key alone, so that it has one row per user).
    """
    inner, alias = _checked_shape(subquery)
    scope, inner = scope_of(inner, catalog, unique)
    if scope.uid is None:
        raise UnsupportedQueryError("a derived table over a row_privacy table is not supported")
    names = [e.alias_or_name for e in inner.expressions]
    inner = qualify(inner, scope, set(names))  # the same name resolution as outside
    group = inner.args.get("group")
    keys = list(group.expressions) if group else []
    if not any(_row_uid(k, scope) for k in keys):
        raise UnsupportedQueryError(
            "a derived table must GROUP BY the user key (so each of its rows belongs to one "
            "user); aggregate per user inside, privately outside")
    columns, out, user_key = _select_list(inner, names, keys, alias, scope)
    return _bounded_table(inner, scope, keys, alias, columns, out, user_key)


def _checked_shape(subquery: exp.Subquery) -> tuple[exp.Select, str]:
    """The derived table's SELECT and alias; refuses what no derived table may have."""
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
    return inner, alias


def _select_list(inner: exp.Select, names: list[str], keys: list[exp.Expression],
                 alias: str, scope: Scope) -> tuple[dict[str, Column], exp.Select, str]:
    """Its columns as catalog columns, the bounded select list, and the user key's name.

    Each column is a GROUP BY key (the user key keeps its type and loses its bounds) or
    an aggregate capped by :func:`_aggregate`.
    """
    R = max(s.table.max_rows for s in scope.private)
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
    return columns, out, user_key


def _bounded_table(inner: exp.Select, scope: Scope, keys: list[exp.Expression], alias: str,
                   columns: dict[str, Column], out: exp.Select, user_key: str) -> Derived:
    """The derived table as a fresh catalog table, and its SQL over the inner FROM."""
    R = max(s.table.max_rows for s in scope.private)
    G = max(s.table.max_groups for s in scope.private)
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


def _row_uid(key: exp.Expression, scope: Scope) -> bool:
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


def _aggregate(agg: exp.Expression, name: str, scope: Scope,
               R: int) -> tuple[Column, exp.Expression]:
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
    if isinstance(agg, exp.Min | exp.Max):
        return Column(name, ctype, interval.lower, interval.upper, nullable=True), \
            _one_spelling(type(agg)(this=value), interval)
    added = _exact_sum(value, interval)
    if isinstance(agg, exp.Avg):
        # the exact total over the count (as DOUBLE: SQLite divides integers as integers)
        mean = exp.Div(this=exp.Cast(this=added, to=data_type("DOUBLE")),
                       expression=exp.Nullif(this=exp.Count(this=value.copy()),
                                             expression=number(0)))
        return Column(name, "float", interval.lower, interval.upper, nullable=True), \
            clamp(mean, interval.lower, interval.upper, keep_null=True)
    low, high = sensitivity.partial_range("sum", interval, R)
    total = clamp(exp.Coalesce(this=added, expressions=[number(0)]), low, high)
    return Column(name, ctype, low, high), total


def _one_spelling(value: exp.Expression, interval) -> exp.Expression:
    """A MIN's or MAX's value in one spelling for all values equal to it.

    Of several equal values MIN and MAX return whichever they meet first, and engines
    spell some equal numbers differently (``-0.0`` and ``0.0``; PostgreSQL's NUMERIC
    ``1.0`` and ``1.00``; SQLite's INTEGER ``3`` and REAL ``3.0``), which the outer
    query can tell apart (``CAST(m AS VARCHAR) = '-0.0'``): every user holding both
    flipped with the rows' storage order (attack review). Whole values below ``2^62``
    become BIGINTs; any other number a DOUBLE with zero written ``0.0`` (a test, not
    ``+ 0``, which DuckDB folds away). Equal values are then one value.
    """
    if interval.integer and interval.magnitude < 2.0**62:
        return exp.Cast(this=value, to=data_type("BIGINT"))
    double = exp.Cast(this=value, to=data_type("DOUBLE"))
    zero = exp.EQ(this=double.copy(), expression=number(0))
    return exp.Case(ifs=[exp.If(this=zero, true=exp.Literal.number("0.0e0"))], default=double)


def _exact_sum(value: exp.Expression, interval) -> exp.Expression:
    """The sum of a user's values, the same whatever order the engine adds them in.

    Whole values below ``2^62`` in magnitude are cast to BIGINT and added as integers:
    exactly (DuckDB: HUGEINT; PostgreSQL: NUMERIC; Spark: DECIMAL(38, 0) by its
    transforms; SQLite: dpsql's own exact aggregate, ``dpsql.backends.sqlite``). Whole
    is the values' property, not how the engine adds them: ``FLOOR(x)`` of a DOUBLE, or
    an integer column on SQLite (``TOTAL``) or under Spark's AVG, were added in floating
    point, whose rounding above ``2^53`` depends on the order (attack review). Anything
    else (fractions, or whole values beyond ``2^62``) is added as integers of a fine
    grid (:func:`dpsql.sqlbuild.fine_sum`, :func:`_fine_exponent`).
    """
    if interval.integer and interval.magnitude < 2.0**62:
        return exp.Sum(this=exp.Cast(this=value, to=data_type("BIGINT")))
    return fine_sum(value, _fine_exponent(interval))


#: A derived SUM's or AVG's rows are rounded to ``2^-FINE_BITS`` of their bound.
FINE_BITS = 36


def _fine_exponent(interval) -> int:
    """``j`` with ``max(|L|, |U|) < 2^(j + 36)``, at least ``-1022``.

    A clamped row is then at most ``2^36`` units of ``2^j``, a BIGINT (and a sum DuckDB
    adds in its fast path); its rounding moves the aggregate by at most ``2^(j-1)``, a
    ``2^-36`` part of the bound per row. ``2^j`` and ``2^-j`` are normal doubles
    (bounds are at most ``1e250``).

    >>> from dpsql.analyze.bounds import Interval
    >>> _fine_exponent(Interval(0, 2)), _fine_exponent(Interval(-500000, 10))
    (-34, -17)
    """
    magnitude = max(abs(float(interval.lower)), abs(float(interval.upper)))
    e = math.frexp(magnitude)[1] if magnitude > 0 else -1073
    return max(e - FINE_BITS, -1022)


def _try(e: exp.Expression) -> exp.Expression:
    return e if isinstance(e, exp.Column) else exp.Try(this=e)
