"""Name resolution: every column of a query bound to the FROM clause it reads.

Shared by the outer query (:mod:`dpsql.analyze.analyze`) and per-user derived tables
(:mod:`dpsql.analyze.derived`), so both resolve names the same way.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.scope import Scope
from dpsql.errors import UnknownColumnError, UnsupportedQueryError
from dpsql.validate import AGGREGATES

#: ``meta`` key of an input column in HAVING or ORDER BY whose name is also an output
#: name: which of the two SQL means is decided once the group keys are known
#: (:meth:`dpsql.analyze.cells._Analysis.post_expr` and
#: :func:`dpsql.analyze.analyze.resolve_order`).
SHADOWS = "dpsql_shadows_output"


def output_name(item: exp.Expression) -> str:
    """The name of an output column: its alias, its column name, or its SQL text."""
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Column):
        return item.name
    return item.sql(dialect="duckdb")


def alias_target(select: exp.Select, alias: str) -> exp.Expression:
    """The expression of the output column called ``alias`` (lower case)."""
    for item in select.expressions:
        if isinstance(item, exp.Alias) and item.alias.lower() == alias:
            return item.this
    raise UnknownColumnError(f"unknown column {alias!r}")  # pragma: no cover


def qualify(select: exp.Select, scope: Scope, out_names: set[str]) -> exp.Select:
    """Resolves every column against the FROM clause.

    One table: unqualified, lower-case names. Several: ``alias.column``. Columns that
    name an output alias rather than a table column (allowed in GROUP BY, HAVING and
    ORDER BY) become ``__alias:<name>`` placeholders.
    """
    select = select.copy()
    select.set("joins", None)
    lowered = {n.lower() for n in out_names}
    for col in list(select.find_all(exp.Column)):
        if col.find_ancestor(exp.Subquery) is not None:
            continue  # a derived table or an IN subquery: resolved on its own
        if isinstance(col.this, exp.Star):
            raise UnsupportedQueryError("SELECT t.* would release raw rows")
        resolved = scope.resolve(col)
        name = col.name.lower()
        in_clause = col.find_ancestor(exp.Group, exp.Having, exp.Order)
        in_agg = col.find_ancestor(*AGGREGATES)
        if resolved is not None:
            if (name in lowered and not col.table and in_agg is None
                    and isinstance(in_clause, exp.Having | exp.Order)):
                # an output has this input column's name: post_expr and the ORDER BY
                # loop decide which one is meant, as DuckDB's binder does
                resolved.meta[SHADOWS] = name
            col.replace(resolved)
            continue
        if in_clause is not None and in_agg is None and name in lowered and not col.table:
            col.replace(exp.column(f"__alias:{name}"))
            continue
        tables = ", ".join(s.table.name for s in scope.sources if not s.hidden)
        raise UnknownColumnError(
            f"unknown column {col.name!r} in table {tables!r}; its columns are: "
            + ", ".join(c for s in scope.sources if not s.hidden for c in s.table.columns)
        )
    return select
