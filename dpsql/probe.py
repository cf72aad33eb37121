"""Schema probes: a query that provably returns no rows is answered from the catalog.

SQL clients learn a table's columns by running a query that returns nothing: jupysql
sends ``SELECT * FROM "pums" WHERE 1=0``, others ``SELECT a, b FROM t LIMIT 0`` or
``... WHERE FALSE``. Such a query is answered without running anything on the data:
its columns and their types come from the catalog, it has no rows, and it costs
nothing.

Why this is DP-sound: the answer (the catalog's column names and types, and zero rows)
is the same on every database, so it is a function of public information only and
reveals nothing about any user; nothing reaches the backend. That holds only if the
query returns no rows on *every* database, so "provably" is syntactic and conservative:

* one SELECT of one catalog table (optionally aliased): no join, subquery, WITH,
  GROUP BY, HAVING, ORDER BY, OFFSET, DISTINCT or anything else;
* a select list of ``*``, ``t.*`` and plain columns of that table (optionally renamed
  with a plain alias): nothing to compute, so every type is the catalog's;
* and either ``LIMIT 0`` (a literal) with no WHERE, or a WHERE that folds to FALSE or
  NULL by three-valued logic over number, boolean and NULL literals alone (``1=0``,
  ``FALSE``, ``NULL``, ``1 = 1 AND 0 > 1``): no column, subquery or function anywhere
  in it, so its value cannot depend on the data.

Anything else, ``WHERE age = 0`` included, is not a probe and goes through the normal
pipeline (where a ``SELECT *`` is refused as before). A probe over an unknown table or
column is refused like any query, free.

>>> from dpsql.datasets import pums_catalog
>>> schema_probe('SELECT * FROM "pums" WHERE 1=0', pums_catalog())[:3]
[('pid', 'int'), ('age', 'int'), ('sex', 'int')]
>>> schema_probe("SELECT age AS a, p.sex FROM pums p LIMIT 0", pums_catalog())
[('a', 'int'), ('sex', 'int')]
>>> schema_probe("SELECT * FROM pums WHERE age = 0", pums_catalog()) is None
True
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.errors import DpsqlError, UnknownColumnError, UnknownTableError
from dpsql.validate import SAFE_NAME

#: The clauses a probe may have.
_PROBE_ARGS = frozenset({"expressions", "from_", "where", "limit"})


class _Unknown:
    """A value the folding does not know (a column, a function, a string...)."""


_UNKNOWN = _Unknown()


def schema_probe(sql: str | exp.Expression, catalog: Catalog) -> list[tuple[str, str]] | None:
    """The (name, catalog type) of each output column if ``sql`` is a schema probe.

    Returns None when ``sql`` is not provably empty (see the module docstring): the
    query then takes the normal path, which parses, validates and refuses or answers it.

    Raises:
        UnknownTableError, UnknownColumnError: a probe of a table or column the catalog
            does not have.
    """
    limits = catalog.limits
    if isinstance(sql, exp.Expression):  # already read (options lifted, parsed): not changed
        select = sql
    elif not isinstance(sql, str):
        return None
    else:
        from dpsql.bigquery_options import lift_dp_options
        from dpsql.parse import parse

        try:
            text, _ = lift_dp_options(sql, limits)
            select = parse(text, limits.max_sql_length)
        except DpsqlError:
            return None  # the normal path reports it
    if not isinstance(select, exp.Select):
        return None
    for count, node in enumerate(select.walk(), start=1):
        if count > limits.max_nodes or node.depth > limits.max_depth:
            return None  # refused by validation, with its reason
    if any(v for k, v in select.args.items() if k not in _PROBE_ARGS):
        return None
    table = select.args["from_"].this if select.args.get("from_") else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) \
            or any(v for k, v in table.args.items() if k not in ("this", "alias")):
        return None
    if table.args.get("alias") is not None and table.args["alias"].columns:
        return None
    if not _empty(select):
        return None
    name = table.name.lower()
    if not catalog.has_table(name):
        raise UnknownTableError(
            f"unknown table {name!r}; the catalog has: {', '.join(sorted(catalog.tables))}")
    alias = (table.alias or name).lower()
    columns = catalog.table(name).columns
    out: list[tuple[str, str]] = []
    for item in select.expressions:
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(body, exp.Star) or (isinstance(body, exp.Column)
                                          and isinstance(body.this, exp.Star)):
            if item is not body or (isinstance(body, exp.Column) and _other(body, alias)):
                return None
            out.extend((c.name, c.type) for c in columns.values())
            continue
        if not isinstance(body, exp.Column) or _other(body, alias):
            return None
        column = body.name.lower()
        if column not in columns:
            raise UnknownColumnError(
                f"unknown column {body.name!r} in table {name!r}; its columns are: "
                + ", ".join(columns))
        shown = item.alias if item is not body else body.name
        if not SAFE_NAME.fullmatch(shown):
            return None
        out.append((shown, columns[column].type))
    return out


def _other(col: exp.Column, alias: str) -> bool:
    """Whether a column names another table than the probe's (or a schema)."""
    return bool(col.args.get("db") or col.args.get("catalog")
                or (col.table and col.table.lower() != alias))


def _empty(select: exp.Select) -> bool:
    """LIMIT 0 without WHERE, or a WHERE that folds to FALSE or NULL."""
    where = select.args.get("where")
    limit = select.args.get("limit")
    if limit is not None:
        n = limit.args.get("expression")
        if not (isinstance(limit, exp.Limit) and isinstance(n, exp.Literal) and n.is_int
                and not limit.args.get("offset") and not limit.args.get("expressions")):
            return False
        if int(n.this) == 0 and where is None:
            return True
    return where is not None and _fold(where.this) in (False, None)


def _fold(e: exp.Expression):
    """SQL's value of a literal-only condition: True, False, None (NULL), a Decimal, or
    :data:`_UNKNOWN` for anything else (a column, a function, a string, a type mix)."""
    if isinstance(e, exp.Paren):
        return _fold(e.this)
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Literal):
        # plain integers of at most 18 digits only: every database reads them exactly,
        # while 1e-400, 2e308 or a 39-digit decimal are rounded (DuckDB: 1e-400 = 0)
        if e.is_string or not re.fullmatch(r"[0-9]{1,18}", e.this):
            return _UNKNOWN
        return Decimal(e.this)
    if isinstance(e, exp.Neg):
        v = _fold(e.this)
        return -v if isinstance(v, Decimal) else (None if v is None else _UNKNOWN)
    if isinstance(e, exp.Not):
        v = _fold(e.this)
        return (not v) if isinstance(v, bool) else (None if v is None else _UNKNOWN)
    if isinstance(e, exp.And | exp.Or):
        a, b = _fold(e.this), _fold(e.expression)
        if not all(v is None or isinstance(v, bool) for v in (a, b)):
            return _UNKNOWN
        if isinstance(e, exp.And):
            return False if False in (a, b) else (None if None in (a, b) else True)
        return True if True in (a, b) else (None if None in (a, b) else False)
    compare = {exp.EQ: lambda x, y: x == y, exp.NEQ: lambda x, y: x != y,
               exp.LT: lambda x, y: x < y, exp.LTE: lambda x, y: x <= y,
               exp.GT: lambda x, y: x > y, exp.GTE: lambda x, y: x >= y}.get(type(e))
    if compare is not None:
        a, b = _fold(e.this), _fold(e.expression)
        if a is _UNKNOWN or b is _UNKNOWN:
            return _UNKNOWN
        if a is None or b is None:
            return None
        if isinstance(a, Decimal) and isinstance(b, Decimal):
            try:
                return compare(a, b)
            except InvalidOperation:  # NaN
                return _UNKNOWN
        if isinstance(a, bool) and isinstance(b, bool) and type(e) in (exp.EQ, exp.NEQ):
            return compare(a, b)
        return _UNKNOWN
    return _UNKNOWN


__all__ = ["schema_probe"]
