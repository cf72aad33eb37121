"""``x IN (SELECT ...)`` subqueries: over public tables only, their names bound by identity."""

from __future__ import annotations

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.errors import UnknownColumnError, UnsupportedQueryError


def check_in_subqueries(select: exp.Select, catalog: Catalog) -> exp.Select:
    """``x IN (SELECT ...)`` may read public tables only: the set is then public data.

    Names bind by identity: every table of the subquery gets a fresh alias and every
    column in it is qualified with the alias of the subquery table that has it, so no
    column can bind to a row of the outer (private) query, whatever the names
    (``pid IN (SELECT k FROM pub WHERE people.age > 50)`` is refused: ``people`` is not
    a table of the subquery).
    """
    if not any(n.args.get("query") is not None for n in select.find_all(exp.In)):
        return select
    select = select.copy()
    count = 0
    for node in list(select.find_all(exp.In)):
        query = node.args.get("query")
        if query is None:
            continue
        inner = query.this if isinstance(query, exp.Subquery) else query
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
            raise UnsupportedQueryError("IN (SELECT ...) must select exactly one column")
        if inner.find(exp.Subquery) is not None or inner.args.get("with_") or any(
                n.args.get("query") is not None for n in inner.find_all(exp.In)):
            raise UnsupportedQueryError("IN (SELECT ...) may not hold further subqueries")
        tables = list(inner.find_all(exp.Table))
        aliases: dict[str, tuple[str, str]] = {}
        for table in tables:
            name = table.name.lower()
            if not catalog.has_table(name) or not catalog.table(name).public:
                raise UnsupportedQueryError(
                    f"IN (SELECT ...) may read only public tables; {name!r} is "
                    + ("private" if catalog.has_table(name) else "not in the catalog"))
            alias = (table.alias or name).lower()
            if alias in aliases:
                raise UnsupportedQueryError(
                    f"table alias {alias!r} is used twice in IN (SELECT ...); rename one")
            aliases[alias] = (name, f"__in{count}")
            count += 1
        for col in list(inner.find_all(exp.Column)):
            name = col.name.lower()
            if col.table:
                owner = aliases.get(col.table.lower())
                if owner is None or not catalog.table(owner[0]).has_column(name):
                    raise UnknownColumnError(
                        f"unknown column {col.sql(dialect='duckdb')!r} in IN (SELECT ...): "
                        "a subquery may read only its own tables")
            else:
                owners = [a for a in aliases.values() if catalog.table(a[0]).has_column(name)]
                if len(owners) != 1:
                    raise UnknownColumnError(
                        f"{'ambiguous' if owners else 'unknown'} column {col.name!r} in "
                        "IN (SELECT ...)")
                owner = owners[0]
            col.replace(exp.column(name, table=owner[1]))
        for table in tables:
            name = table.name.lower()
            fresh = aliases[(table.alias or name).lower()][1]
            table.replace(exp.Table(this=exp.to_identifier(name),
                                    alias=exp.TableAlias(this=exp.to_identifier(fresh))))
    return select
