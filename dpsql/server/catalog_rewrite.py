"""A catalog probe's PostgreSQL SQL as the probe database's DuckDB SQL.

sqlglot reads the probe as PostgreSQL and rewrites the few things DuckDB lacks or
spells otherwise: ``'t'::regclass`` becomes the table's oid, ``OPERATOR(pg_catalog.~)``
a regular expression match, ``COLLATE pg_catalog.default`` disappears, ``version()``,
``current_user`` and ``current_database()`` become the service's answers, PostgreSQL's
type names in casts become DuckDB's, and the ``pg_catalog`` tables and functions
DuckDB does not have come from the probe database's stand-ins
(:mod:`~dpsql.server.catalog_db`). Every function call is checked against the
allow-list (:mod:`~dpsql.server.catalog_functions`) before anything is rewritten.

Each rewrite is one function, chosen by the node's class from :data:`_FIXES`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from dpsql.errors import UnsupportedQueryError
from dpsql.server.catalog_db import EMULATED_TABLES, VERSION_TEXT
from dpsql.server.catalog_functions import check_function
from dpsql.server.catalog_functions import name_of as _name
from dpsql.sqlbuild import data_type

#: PostgreSQL type names in casts → DuckDB's (``::pg_catalog.text``, ``::oid``...).
_CASTS = {"regproc": "BIGINT", "regprocedure": "BIGINT", "regnamespace": "BIGINT",
          "regrole": "BIGINT", "oid": "BIGINT", "xid": "BIGINT", "regconfig": "BIGINT",
          "name": "VARCHAR", "char": "VARCHAR", '"char"': "VARCHAR", "bpchar": "VARCHAR",
          "text": "VARCHAR", "varchar": "VARCHAR", "text[]": "VARCHAR[]",
          "name[]": "VARCHAR[]", "int2vector": "VARCHAR", "oidvector": "VARCHAR",
          "int2": "SMALLINT", "int4": "INTEGER", "int8": "BIGINT", "bool": "BOOLEAN",
          "float4": "FLOAT", "float8": "DOUBLE", "int": "INTEGER", "integer": "INTEGER",
          "bigint": "BIGINT", "smallint": "SMALLINT", "boolean": "BOOLEAN",
          "pg_node_tree": "VARCHAR", "int2[]": "SMALLINT[]", "oid[]": "BIGINT[]",
          "regoper": "BIGINT", "aclitem[]": "VARCHAR[]"}


#: ``AS select`` / ``AS update``...: PostgreSQL takes these keywords as column aliases
#: (Metabase's table-privileges probe), sqlglot does not; they are quoted first.
_KEYWORD_ALIAS = re.compile(
    r"\bas\s+(select|insert|update|delete|table|role|schema)\b(?=\s*(,|\)|\bfrom\b|$))",
    re.IGNORECASE)


def quote_keyword_aliases(sql: str) -> str:
    """``AS select`` as ``AS "select"`` (see :data:`_KEYWORD_ALIAS`)."""
    return _KEYWORD_ALIAS.sub(lambda m: f'AS "{m.group(1).lower()}"', sql)


def rewrite_probe(sql: str, login: str, dataset: str) -> str:
    """The probe as DuckDB SQL (see the module docstring).

    Raises:
        UnsupportedQueryError: not one SELECT, or it calls a refused function.
    """
    try:
        trees = sqlglot.parse(quote_keyword_aliases(sql), read="postgres")
    except (sqlglot.errors.SqlglotError, RecursionError, ValueError):
        raise UnsupportedQueryError("cannot parse this catalog query") from None
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        raise UnsupportedQueryError("a catalog query must be one SELECT")
    tree = trees[0]
    for select in tree.find_all(exp.Select):
        if select.parent is None or isinstance(select.parent, exp.SetOperation):
            select.set("expressions", [_pg_named(e) for e in select.expressions])
    return _rewrite(tree, _Who(login, dataset)).sql(dialect="duckdb")


@dataclass(frozen=True)
class _Who:
    """What the service answers for the session's user and database."""

    login: str
    dataset: str


def _rewrite(node: exp.Expression, who: _Who) -> exp.Expression:
    """``node`` checked and rewritten, children first (sqlglot's own transform does not
    visit the operands of a node it replaced: a cast inside a cast, a collation inside
    an operator)."""
    for child in list(node.iter_expressions()):
        _rewrite(child, who)
    check_function(node)
    new = _fix(node, who)
    if new is not node and node.parent is not None:
        node.replace(new)
    return new


def _fix(node: exp.Expression, who: _Who) -> exp.Expression:
    """One node as DuckDB reads it: the rewrite for the nearest class of ``node`` in
    :data:`_FIXES`, or ``node`` itself."""
    fix = _for_class(_FIXES, node)
    return node if fix is None else fix(node, who)


def _for_class(table: dict[type, Any], node: exp.Expression) -> Any:
    """The entry of ``table`` for the nearest class in ``node``'s MRO (as ``isinstance``
    would choose), or None."""
    for cls in type(node).__mro__:
        if cls in table:
            return table[cls]
    return None


def _fix_column(node: exp.Column, who: _Who) -> exp.Expression:
    """``current_user`` and friends written as bare names; ``pg_catalog.t.c`` as
    ``t.c`` (DuckDB binds a column by its table's name only)."""
    if not node.table and _name(node) in ("current_user", "session_user", "current_role",
                                          "user"):
        return exp.Literal.string(who.login)
    if not node.table and _name(node) == "current_catalog":
        return exp.Literal.string(who.dataset)
    if node.args.get("db") is not None:
        node.set("db", None)
        node.set("catalog", None)
    return node


def _fix_dot(node: exp.Dot, who: _Who) -> exp.Expression:
    """``pg_catalog.f(...)`` as ``f(...)``; ``(_pg_expandarray(a)).n`` and ``.x`` as
    ``a``'s subscripts and elements."""
    if isinstance(node.this, exp.Identifier) and node.this.name.lower() == "pg_catalog" \
            and isinstance(node.expression, exp.Func | exp.Literal):
        return node.expression
    if isinstance(node.this, exp.Paren) and _name(node.expression) in ("n", "x"):
        inner = node.this.this
        if isinstance(inner, exp.Dot):
            inner = inner.expression
        if isinstance(inner, exp.Anonymous) and _name(inner) == "_pg_expandarray":
            arr = inner.expressions[0]
            if _name(node.expression) == "n":
                return exp.Anonymous(this="generate_subscripts",
                                     expressions=[arr, exp.Literal.number(1)])
            return exp.Unnest(expressions=[arr])
    return node


#: PostgreSQL's ``OPERATOR(pg_catalog.op)`` → DuckDB's expression for it.
_OPERATORS: dict[str, Callable[[exp.Expression, exp.Expression], exp.Expression]] = {
    "~": lambda left, right: exp.RegexpLike(this=left, expression=right),
    "!~": lambda left, right: exp.Not(this=exp.RegexpLike(this=left, expression=right)),
    "~*": lambda left, right: exp.RegexpILike(this=left, expression=right),
    "!~*": lambda left, right: exp.Not(this=exp.RegexpILike(this=left, expression=right)),
    "=": lambda left, right: exp.EQ(this=left, expression=right),
    "<>": lambda left, right: exp.NEQ(this=left, expression=right),
}


def _fix_operator(node: exp.Operator, who: _Who) -> exp.Expression:
    """``a OPERATOR(pg_catalog.~) b`` as DuckDB's expression; other operators refused."""
    op = str(node.args.get("operator", "")).split(".")[-1].strip()
    build = _OPERATORS.get(op)
    if build is None:
        raise UnsupportedQueryError(f"operator {op!r} in a catalog query")
    return build(node.this, node.expression)


def _fix_cast(node: exp.Cast, who: _Who) -> exp.Expression:
    """Casts to PostgreSQL's ``reg*`` and catalog types as DuckDB's (see :data:`_CASTS`)."""
    target = _cast_target(node.to)
    if target == "regclass":
        return _regclass(node.this)
    if target in ("regtype",):
        return exp.func("format_type", node.this, exp.null())
    if target.startswith("reg") and isinstance(node.this, exp.Literal):
        return exp.Null()  # 'pg_catalog.array_in'::regproc: no functions here
    if target in _CASTS:  # not exp.cast, which copies (and so hides) the operand
        return exp.Cast(this=node.this, to=data_type(_CASTS[target]))
    return node


def _regclass(inner: exp.Expression) -> exp.Expression:
    """``x::regclass``: the oid of the table a literal names, ``to_regclass`` of a
    computed name, else the operand (already an oid)."""
    if isinstance(inner, exp.Literal) and inner.is_string:
        rel = inner.this.split(".")[-1].strip('"')
        return exp.paren(sqlglot.parse_one(
            "SELECT oid FROM pg_catalog.pg_class WHERE relname = "
            f"{exp.Literal.string(rel).sql()} LIMIT 1", read="duckdb"))
    if isinstance(inner, exp.Anonymous | exp.DPipe | exp.Concat) or (
            isinstance(inner, exp.Cast) and _cast_target(inner.to) in ("text", "varchar")):
        return exp.Anonymous(this="to_regclass", expressions=[inner])
    return inner


def _fix_table(node: exp.Table, who: _Who) -> exp.Expression:
    """``pg_catalog.unnest(...)`` in FROM without its schema; the emulated
    ``pg_catalog`` tables and ``information_schema.columns`` as the probe database's
    table macros."""
    if isinstance(node.this, exp.Func) and node.db.lower() == "pg_catalog":
        node.set("db", None)
        return node
    name = node.name.lower()
    if node.db.lower() == "information_schema" and name == "columns":
        return _table_macro("dpsql_information_schema_columns", node)
    if node.db.lower() in ("pg_catalog", "") and name in EMULATED_TABLES:
        return _table_macro(f"dpsql_{name}", node)
    return node


def _table_macro(macro: str, node: exp.Table) -> exp.Table:
    """A call of the table macro ``macro`` under the name ``node`` is known by."""
    return exp.Table(this=exp.Anonymous(this=macro),
                     alias=exp.TableAlias(this=exp.to_identifier(node.alias or node.name)))


def _fix_anonymous(node: exp.Anonymous, who: _Who) -> exp.Expression:
    """The functions sqlglot does not know, by name (see :data:`_ANONYMOUS`)."""
    fix = _ANONYMOUS.get(_name(node))
    return node if fix is None else fix(node)


def _json_object(node: exp.Expression, who: _Who | None = None) -> exp.Expression:
    """``json_build_object(k, v, ...)`` (sqlglot may read it as a JSONObject) as
    DuckDB's ``json_object``."""
    args = node.expressions
    if isinstance(node, exp.JSONObject):  # sqlglot's reading of it
        args = [x for kv in node.expressions for x in (
            (kv.this, kv.expression) if isinstance(kv, exp.JSONKeyValue) else (kv,))]
    return exp.Anonymous(this="json_object", expressions=args)


def _pg_get_expr(node: exp.Anonymous) -> exp.Expression:
    """``pg_get_expr(e, rel, pretty)``: the pretty flag has no effect."""
    if len(node.expressions) > 2:
        node.set("expressions", node.expressions[:2])
    return node


#: Functions sqlglot leaves anonymous, by name → their rewrite.
_ANONYMOUS: dict[str, Callable[[exp.Anonymous], exp.Expression]] = {
    "version": lambda node: exp.Literal.string(VERSION_TEXT),
    "json_build_object": _json_object,
    "jsonb_build_object": _json_object,
    "current_setting": lambda node: exp.Anonymous(this="dpsql_current_setting",
                                                  expressions=node.expressions[:1]),
    "format_type": lambda node: exp.Anonymous(this="dpsql_format_type",
                                              expressions=node.expressions),
    "pg_get_expr": _pg_get_expr,
}


def _fix_format(node: exp.Format, who: _Who) -> exp.Expression:
    """PostgreSQL's ``format()`` as DuckDB's ``printf``."""
    fmt = node.this.this.replace("%I", "%s").replace("%L", "'%s'")
    return exp.Anonymous(this="printf",
                         expressions=[exp.Literal.string(fmt), *node.expressions])


#: Node class → its rewrite, for the nearest class in a node's MRO.
_FIXES: dict[type, Callable[[Any, _Who], exp.Expression]] = {
    exp.CurrentVersion: lambda node, who: exp.Literal.string(VERSION_TEXT),
    exp.CurrentUser: lambda node, who: exp.Literal.string(who.login),
    exp.SessionUser: lambda node, who: exp.Literal.string(who.login),
    exp.CurrentDatabase: lambda node, who: exp.Literal.string(who.dataset),
    exp.CurrentSchema: lambda node, who: exp.Literal.string("public"),
    exp.Column: _fix_column,
    exp.Dot: _fix_dot,
    exp.Collate: lambda node, who: node.this,
    exp.Operator: _fix_operator,
    exp.Cast: _fix_cast,
    exp.Table: _fix_table,
    exp.Anonymous: _fix_anonymous,
    exp.JSONObject: _json_object,
    exp.Format: _fix_format,
}

#: Output names PostgreSQL gives the functions sqlglot reads as their own classes.
_OUTPUT_NAMES: dict[type, str] = {
    exp.CurrentUser: "current_user",
    exp.SessionUser: "session_user",
    exp.CurrentVersion: "version",
    exp.CurrentDatabase: "current_database",
    exp.CurrentSchema: "current_schema",
}


def _pg_named(e: exp.Expression) -> exp.Expression:
    """An unnamed output column gets PostgreSQL's name for it (``version``, ``count``,
    ``?column?``), not DuckDB's (clients read the names)."""
    if isinstance(e, exp.Alias | exp.Star) or (isinstance(e, exp.Column) and
                                               isinstance(e.this, exp.Star)):
        return e
    inner = e
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, exp.Column):
        return e
    if isinstance(inner, exp.Dot) and isinstance(inner.expression, exp.Func):
        inner = inner.expression
    return exp.alias_(e, _output_name(e, inner), quoted=True)


def _output_name(e: exp.Expression, inner: exp.Expression) -> str:
    """PostgreSQL's name for the unnamed output ``e``, whose value is ``inner``."""
    name = _for_class(_OUTPUT_NAMES, inner)
    if name is not None:
        return name
    if isinstance(inner, exp.Anonymous):
        return inner.name.lower()
    if isinstance(inner, exp.Func):
        return inner.sql_name().lower()
    if isinstance(e, exp.Cast) and isinstance(inner, exp.Literal):
        return _cast_target(e.to).split(".")[-1]
    return "?column?"


def _cast_target(to: exp.DataType) -> str:
    """The type a cast names, lower case, without ``pg_catalog.`` or quotes."""
    if isinstance(to, exp.ObjectIdentifier):
        return to.name.lower()
    kind = to.args.get("kind")
    if isinstance(kind, exp.Dot):
        return kind.expression.name.lower()
    if to.this == exp.DataType.Type.USERDEFINED and kind is not None:
        return kind.name.lower() if hasattr(kind, "name") else str(kind).lower()
    return to.sql("postgres").lower().replace("pg_catalog.", "").replace('"', "")
