"""The dialect layer's shared machinery: a rewritten AST (in DuckDB terms) becomes SQL
another engine runs safely.

The rewrite passes write DuckDB: ``TRY(...)`` around analyst expressions that could fail
for some rows, ``TRY_CAST``, ``LEAST``/``GREATEST`` that skip NULLs, ``HASH(uid, keys,
seed)`` for the L0 order. sqlglot transpiles most of it; what it cannot translate — or
translates into SQL that can fail on some rows — is fixed by small AST transforms, one
list per engine, each in that engine's dialect module (:mod:`dpsql.backends.sqlite_dialect`,
:mod:`dpsql.backends.postgres_dialect`, :mod:`dpsql.backends.spark_dialect`), applied by
:meth:`dpsql.backends.base.Backend.to_sql` before sqlglot writes the SQL. Nothing there
changes what a statistic means; it changes how an engine is told to compute it. This
module holds what they share: the query's :class:`Context` (column families, inferred
by :func:`infer`), tree-walking helpers, the date-range guards, and the counted copy
(:func:`copy_node`) that keeps a transformed query from growing without bound.

The invariant every transform keeps: **no data-dependent runtime error**. An expression
either cannot fail on any row, or the backend refuses it while planning (a failure that
depends on the schema only, refused before the budget is charged: :func:`unsupported`).

Every backend orders a user's groups by the keyed hash and then by the keys themselves,
so the choice is a deterministic function of that user's own rows and the seed only
(:func:`order_with_tiebreak`).
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.errors import BackendError
from dpsql.sqlbuild import data_type
from dpsql.types import (
    BOOL,
    DATE,
    DECIMAL,
    DUCKDB_TYPE,
    FLOAT,
    INT,
    INTERVAL,
    NUMERIC,
    STRING,
    TEMPORAL,
    TIMESTAMP,
)
from dpsql.types import family as type_family

__all__ = ["BOOL", "DATE", "DECIMAL", "DUCKDB_TYPE", "FLOAT", "INT", "INTERVAL", "NUMERIC",
           "STRING", "TEMPORAL", "TIMESTAMP", "type_family"]


@dataclass
class Context:
    """What the transforms know about one query: column families, backend options."""

    families: dict[str, str | None] = field(default_factory=dict)
    backend: str = ""
    options: dict = field(default_factory=dict)
    #: Column → the backend's type name, where one name has one type in the query.
    types: dict[str, str | None] = field(default_factory=dict)
    #: Table (lower-case) → its columns and their backend type names, for every table
    #: the query reads.
    tables: dict[str, dict[str, str]] = field(default_factory=dict)

    def family(self, node: exp.Expression | None) -> str | None:
        return infer(node, self.families)


def context(expression: exp.Expression, columns: Callable[[str], dict[str, str] | None],
            backend: str, **options) -> Context:
    """Families of every column the query reads (from the backend's metadata) and of
    every alias it defines (inferred, innermost query first)."""
    ctes = {cte.alias_or_name.lower() for cte in expression.find_all(exp.CTE)}
    seen: dict[str, set] = {}
    names: dict[str, set] = {}
    tables: dict[str, dict[str, str]] = {}
    for table in expression.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes or not name:
            continue
        tables[name] = columns(name) or {}
        for col, dtype in tables[name].items():
            seen.setdefault(col.lower(), set()).add(type_family(dtype))
            names.setdefault(col.lower(), set()).add(str(dtype).upper())
    families = {c: (f.pop() if len(f) == 1 else None) for c, f in seen.items()}
    types = {c: (t.pop() if len(t) == 1 else None) for c, t in names.items()}
    selects = list(expression.find_all(exp.Select))
    for select in reversed(selects):  # find_all is pre-order: reversed = innermost first
        for item in select.expressions:
            if isinstance(item, exp.Alias):
                families.setdefault(item.alias.lower(), infer(item.this, families))
    return Context(families, backend, options, types, tables)


def unsupported(backend: str, what: str) -> BackendError:
    """A construct this backend cannot run error-free: refused before any charge."""
    err = BackendError(
        f"{backend} cannot run {what} without a data-dependent error, so dpsql refuses it; "
        "nothing was charged")
    err.charged = False
    return err


# -- type inference ------------------------------------------------------------------

_PREDICATES = (exp.Predicate, exp.And, exp.Or, exp.Not, exp.Xor, exp.Boolean)


def _combine(families: Iterable[str | None]) -> str | None:
    fams = [f for f in families if f is not None]
    if not fams:
        return None
    if all(f in NUMERIC for f in fams):
        if FLOAT in fams:
            return FLOAT
        return DECIMAL if DECIMAL in fams else INT
    return fams[0]


def infer(node: exp.Expression | None, families: dict[str, str | None]) -> str | None:
    """The family of an expression's DuckDB result type (None when unknown)."""
    if node is None:
        return None

    def f(e):
        return infer(e, families)

    if isinstance(node, exp.Paren | exp.Try | exp.Alias):
        return f(node.this)
    if isinstance(node, exp.Column):
        return families.get(node.name.lower())
    if isinstance(node, exp.Literal):
        if node.is_string:
            return STRING
        return INT if re.fullmatch(r"[0-9]+", node.this) else DECIMAL
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Cast):  # TryCast too
        return type_family(node.to.sql(dialect="duckdb"))
    if isinstance(node, exp.Interval):
        return INTERVAL
    if isinstance(node, _PREDICATES):
        return BOOL
    if isinstance(node, exp.Add | exp.Sub):
        fams = (f(node.this), f(node.expression))
        if isinstance(node, exp.Sub) and set(fams) <= {DATE, TIMESTAMP}:
            # a difference of dates is a number of days in DuckDB and PostgreSQL (and
            # :func:`spark_date_diffs`); one with a timestamp is an interval
            return INT if set(fams) == {DATE} else INTERVAL
        if any(x in TEMPORAL for x in fams):
            return TIMESTAMP if TIMESTAMP in fams or INTERVAL in fams else DATE
        return _combine(fams)
    if isinstance(node, exp.Div | exp.Sqrt | exp.Ln | exp.Exp):
        return FLOAT
    if isinstance(node, exp.IntDiv):
        fams = (f(node.this), f(node.expression))
        return INT if all(x == INT for x in fams) else FLOAT
    if isinstance(node, exp.Mul | exp.Mod):
        return _combine((f(node.this), f(node.expression)))
    if isinstance(node, exp.Neg | exp.Abs | exp.Round | exp.Floor | exp.Ceil | exp.Sign):
        return f(node.this)
    if isinstance(node, exp.Count | exp.Length | exp.Year | exp.Month | exp.Day
                  | exp.Extract | exp.RowNumber):
        return INT
    if isinstance(node, exp.Lower | exp.Upper | exp.Substring | exp.Concat | exp.DPipe):
        return STRING
    if isinstance(node, exp.Sum | exp.Avg):
        return f(node.this)
    if isinstance(node, exp.Case):
        return _combine([f(i.args.get("true")) for i in node.args.get("ifs") or []]
                        + [f(node.args.get("default"))])
    if isinstance(node, exp.If):
        return _combine((f(node.args.get("true")), f(node.args.get("false"))))
    if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
        return _combine([f(node.this), *(f(e) for e in node.expressions)])
    if isinstance(node, exp.Nullif):
        return f(node.this)
    return None


# -- helpers ---------------------------------------------------------------------------


def bottom_up(node: exp.Expression, fn: Callable[[exp.Expression], exp.Expression]
               ) -> exp.Expression:
    """Applies ``fn`` to every node, children first (``fn`` sees translated children)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, bottom_up(value, fn))
        elif isinstance(value, list):
            node.set(key, [bottom_up(v, fn) if isinstance(v, exp.Expression) else v
                           for v in value])
    return fn(node)


def replace_all(expression: exp.Expression, kind, fn) -> exp.Expression:
    """Replaces every node of type ``kind`` (outermost first) by ``fn(node)``."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for node in list(expression.find_all(*kinds)):
        if node.parent is None and node is not expression:
            continue  # inside a node already replaced
        parent, key, index = node.parent, node.arg_key, node.index
        new = fn(node)  # may wrap ``node``: its place was recorded first
        if new is node:
            continue
        if parent is None:
            expression = new
        else:
            parent.set(key, new, index)
    return expression


def num_literal(text: str) -> exp.Expression:
    if text.startswith("-"):
        return exp.Neg(this=exp.Literal.number(text[1:]))
    return exp.Literal.number(text)


def sentinel_clamp(value: exp.Expression, low: str, high: str) -> exp.Expression:
    """``value`` if strictly inside (low, high), else NULL; ``value`` appears once.

    ``NULLIF(NULLIF(LEAST(GREATEST(v, low), high), high), low)``: GREATEST/LEAST map
    every out-of-range value (and NaN, which sorts last) onto an end, and the NULLIFs turn
    the ends into NULL.
    """
    lo, hi = num_literal(low), num_literal(high)
    clamped = exp.Least(this=exp.Greatest(this=value, expressions=[copy_node(lo)]),
                        expressions=[copy_node(hi)])
    return exp.Nullif(this=exp.Nullif(this=clamped, expression=hi), expression=lo)


def order_with_tiebreak(expression: exp.Expression, make_hash) -> exp.Expression:
    """Replaces the L0 order ``HASH(uid, keys..., seed)`` by this backend's keyed hash,
    followed by the keys themselves so that ties are broken by the user's own data (the
    distinct-value cap's order is followed by the value in the rewrite itself,
    :func:`dpsql.rewrite.per_user_aggregate._distinct_values`)."""
    for node in list(expression.find_all(exp.Anonymous)):
        if str(node.this).upper() != "HASH" or not isinstance(node.parent, exp.Ordered):
            continue
        ordered = node.parent
        order = ordered.parent
        args = list(node.expressions)
        uid, keys, seed = args[0], args[1:-1], args[-1]
        ordered.set("this", make_hash(uid, keys, seed))
        if isinstance(order, exp.Order):
            tail = [exp.Ordered(this=copy_node(k), nulls_first=True) for k in keys]
            order.set("expressions", [*order.expressions, *tail])
    return expression




def typed_tables(expression: exp.Expression, ctx: Context, value) -> exp.Expression:
    """Every catalog table in a FROM or JOIN is read through ``(SELECT <value of c> AS c,
    ... FROM t) AS t``, where ``value(column, type)`` gives the expression a column is
    read as (None: as it is). CTEs of the query keep their names; a table whose columns
    all read as they are is left alone."""
    ctes = {cte.alias_or_name.lower() for cte in expression.find_all(exp.CTE)}

    def read(table: exp.Table) -> exp.Expression:
        name = table.name.lower()
        columns = ctx.tables.get(name)
        if name in ctes or not columns or not isinstance(table.parent, exp.From | exp.Join):
            return table
        outputs, changed = [], False
        for column, dtype in columns.items():
            body = value(exp.column(column), dtype)
            changed = changed or body is not None
            outputs.append(exp.column(column) if body is None else exp.alias_(body, column))
        if not changed:
            return table
        plain = exp.Table(this=exp.to_identifier(table.name))
        body = exp.select(*outputs).from_(plain)
        return body.subquery(table.alias_or_name, copy=False)
    return replace_all(expression, exp.Table, read)



def is_constant(node: exp.Expression) -> bool:
    """A value that reads no row (and is not NULL): folded by the engine while planning."""
    return (node.find(exp.Column, exp.AggFunc, exp.Star) is None
            and not isinstance(node, exp.Null))



def date_literal(text: str, family: str) -> exp.Expression:
    kind = "TIMESTAMP" if family == TIMESTAMP else "DATE"
    return exp.Cast(this=exp.Literal.string(text), to=data_type(kind))



#: the session time zone, which dpsql sets to UTC: :data:`~dpsql.backends.spark.
#: SAFE_CONF`).
YEARS = {DATE: ("0001-01-01", "9999-12-31"),
                TIMESTAMP: ("0001-01-01 00:00:00", "9999-12-31 23:59:59.999999")}


def in_years(value: exp.Expression, family: str) -> exp.Expression:
    """``CASE WHEN value BETWEEN <year 1> AND <year 9999> THEN value END``."""
    lo, hi = (date_literal(t, family) for t in YEARS[family])
    return exp.Case(ifs=[exp.If(this=exp.Between(this=copy_node(value), low=lo, high=hi),
                                true=value)])


def guard_keys(expression: exp.Expression, ctx: Context, guard) -> exp.Expression:
    """Each group key ``k`` of family ``f`` becomes ``guard(k, f)`` (None: kept) where it
    is computed, in its SELECT item and in the GROUP BY, so that it still groups as it
    is released."""
    for select in expression.find_all(exp.Select):
        group = select.args.get("group")
        for item in select.expressions:
            if not (isinstance(item, exp.Alias) and item.alias.startswith("__k")):
                continue
            body = item.this
            if isinstance(body, exp.Column) and body.name.startswith("__k"):
                continue
            guarded = guard(body, ctx.family(body))
            if guarded is None:
                continue
            if group is not None:
                group.set("expressions", [copy_node(guarded) if g == body else g
                                          for g in group.expressions])
                # a window of this SELECT that partitions by the key (the ranks of
                # COUNT(DISTINCT ...) values) must name it as the GROUP BY now does
                for window in select.find_all(exp.Window):
                    if window.find_ancestor(exp.Select) is select:
                        window.set("partition_by", [
                            copy_node(guarded) if p == body else p
                            for p in window.args.get("partition_by") or []])
            item.set("this", guarded)
    return expression


def python_dates(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Group keys that are dates or timestamps outside years 1..9999 become NULL: the
    Python drivers of PostgreSQL and Spark cannot return them (an error on one person's
    value after the charge)."""
    def guard(body: exp.Expression, family: str | None) -> exp.Expression | None:
        if family not in (DATE, TIMESTAMP):
            return None
        return in_years(copy_node(body), family)
    return guard_keys(expression, ctx, guard)




#: Nodes the transforms of one query may copy, besides a multiple of its own size (see
#: :func:`copy_node`).
COPY_ALLOWANCE = 5_000
#: ... and that multiple.
COPY_FACTOR = 4
_copies: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "dpsql_transform_copies", default=None)


def copy_node(node: exp.Expression) -> exp.Expression:
    """``node.copy()``, counted: a transform that writes an argument twice doubles per
    nesting level (``GREATEST(GREATEST(...), ...)``, ``ABS(ABS(...))``), so 300
    characters of SQL could become gigabytes before the charge. Every copy the
    transforms make is counted against the query's allowance, and a query that would go
    beyond it is refused (before any charge) instead of being written out."""
    copied = node.copy()
    left = _copies.get()
    if left is not None:
        left[0] -= sum(1 for _ in copied.walk())
        if left[0] < 0:
            err = BackendError(
                "written for this database, the query would grow beyond the size dpsql "
                "allows (nested functions that the database needs written out twice); "
                "nothing was charged")
            err.charged = False
            raise err
    return copied


def apply(expression: exp.Expression, transforms, ctx: Context) -> exp.Expression:
    """Runs a backend's transforms on a copy of a rewritten query."""
    expression = expression.copy()
    size = sum(1 for _ in expression.walk())
    token = _copies.set([COPY_ALLOWANCE + COPY_FACTOR * size])
    try:
        for transform in transforms:
            expression = transform(expression, ctx)
    finally:
        _copies.reset(token)
    return expression
