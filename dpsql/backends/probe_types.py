"""The engine's own type of every node of a tree: the types the allow-lists are read with.

:func:`expression_types` asks the engine to bind a probe query per SELECT of the final
tree, over a relation of typed NULLs built from the catalog tables' real column types
(see :mod:`dpsql.backends.total`). Nothing is read, and no rule of how the engine types
literals, CASE branches or casts is written here, so dpsql's idea of a type cannot differ
from the engine's. Where the engine cannot type a node, the node has no type, which no
allow-list entry accepts: it is guarded (or refused).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from dpsql.backends.total import Types


@functools.lru_cache(maxsize=1024)
def _type(name: str, dialect: str) -> exp.DataType:
    """``DataType.build(name)`` (which parses the name), kept: callers copy it.

    Names are DuckDB's words, as every backend reports its types. ``FLOAT`` is
    float4 there but float8 in PostgreSQL's grammar, so it is built as ``REAL`` for
    PostgreSQL: built as written, the probe typed a REAL column as DOUBLE PRECISION,
    and constants beyond float4's range (a bound of 1e39) passed the check and failed
    in PostgreSQL's planning after the charge (attack review)."""
    if dialect == "postgres" and name.upper() == "FLOAT":
        name = "REAL"
    return exp.DataType.build(name, dialect=dialect, udt=True)


def _typed_null(name: str, dialect: str) -> exp.Cast:
    return exp.Cast(this=exp.Null(), to=_type(name, dialect).copy())


@functools.lru_cache(maxsize=1024)
def _placeholders(columns: tuple[tuple[str, str], ...], alias: str, dialect: str) -> str:
    """``(SELECT CAST(NULL AS t) AS c, ...) AS alias``: a relation of typed NULLs (its
    text; the same columns recur in every probe of a scope and across queries)."""
    items = [exp.alias_(_typed_null(t, dialect), exp.to_identifier(c, quoted=True))
             for c, t in columns]
    return exp.Subquery(this=exp.Select(expressions=items),
                        alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))
                        ).sql(dialect=dialect)


def probe_sql(items: list[str], relations: list[str]) -> str:
    """The text of one probe: ``SELECT <item> AS __t0, ... FROM <relation> CROSS JOIN ...``.

    Written from texts sqlglot wrote (each item and relation), joined exactly as
    sqlglot joins a SELECT's parts in every dialect dpsql probes (pinned by
    ``tests/test_probes.py``): building the SELECT as a tree and writing it again cost
    more than the rest of the typing."""
    sql = "SELECT " + ", ".join(f"{item} AS __t{i}" for i, item in enumerate(items))
    if relations:
        sql += " FROM " + " CROSS JOIN ".join(relations)
    return sql


#: Nodes that are not values of their own; their value children are looked through.
_NOT_VALUES = (exp.Alias, exp.Paren, exp.DataType, exp.DataTypeParam, exp.Var, exp.Identifier,
               exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.Limit,
               exp.Offset, exp.WindowSpec, exp.Star, exp.Distinct, exp.If, exp.Tuple,
               exp.IgnoreNulls, exp.RespectNulls, exp.TableAlias)
#: Constants, kept as written in a probe (how the engine types a literal depends on
#: where it stands, so a literal is never replaced by a typed stand-in).
_CONSTANTS = (exp.Literal, exp.Null, exp.Boolean)


def _constant(node: exp.Expression) -> bool:
    while isinstance(node, exp.Paren | exp.Neg):
        node = node.this
    return isinstance(node, _CONSTANTS) or (isinstance(node, exp.Interval)
                                            and isinstance(node.this, exp.Literal))


def _value_children(node: exp.Expression) -> list[exp.Expression]:
    """The nearest value nodes below ``node`` (through brackets, CASE branches, window
    specs and the like; a window's function counts as the window itself)."""
    out: list[exp.Expression] = []

    def visit(child: exp.Expression) -> None:
        if isinstance(child, exp.Select | exp.Union) or (
                isinstance(child, exp.Subquery) and isinstance(child.parent, exp.In)):
            return  # an IN's set: typed with the IN (a stand-in query of its type)
        if isinstance(child, _NOT_VALUES) or (isinstance(child, exp.RowNumber | exp.AggFunc)
                                               and isinstance(child.parent, exp.Window)
                                               and child.arg_key == "this"):
            for grand in child.iter_expressions():
                visit(grand)
            return
        out.append(child)

    for child in node.iter_expressions():
        visit(child)
    return out


class _Prober:
    """Types every value node of a tree by binding small probes on the engine.

    Per SELECT (innermost first): the columns as written, over a relation of typed NULLs
    shaped like the SELECT's sources (the engine resolves the names); the constants as
    written; then each operation, lowest first, with its operands replaced by columns
    of their types (constants kept as written), one probe per height. Nothing is read.
    """

    def __init__(self, tree: exp.Expression, table_columns: Callable[[str], dict | None],
                 bind: Callable[[str], list[str]], dialect: str):
        self.table_columns = table_columns
        self.bind = bind
        self.dialect = dialect
        # what ``node.sql(dialect=...)`` looks up on every call (a new Dialect object
        # each time), once: its ``generate`` is then exactly what ``node.sql`` runs
        self._writer = Dialect.get_or_raise(dialect)
        self._children: dict[int, list[exp.Expression]] = {}
        self.types = Types()
        self.outputs: dict[int, list[tuple[str, str | None]]] = {}
        self.ctes: dict[str, exp.Expression] = {}
        self.tree = tree
        for cte in tree.find_all(exp.CTE):
            self.ctes.setdefault(cte.alias_or_name.lower(), cte.this)

    def run(self) -> Types:
        for select in _innermost_first(self.tree):
            self.scope(select)
        return self.types

    def query_outputs(self, query: exp.Expression) -> list[tuple[str, str | None]]:
        while isinstance(query, exp.Subquery | exp.Union):
            query = query.this
        return self.outputs.get(id(query), [])

    def sources(self, select: exp.Select) -> list[tuple[str, list[tuple[str, str]]]] | None:
        out = []
        from_ = select.args.get("from_")
        nodes = [from_.this] if from_ is not None else []
        nodes += [j.this for j in select.args.get("joins") or []]
        for node in nodes:
            if isinstance(node, exp.Table):
                name = node.name.lower()
                if name in self.ctes and not node.args.get("db"):
                    cols = self.query_outputs(self.ctes[name])
                else:
                    raw = self.table_columns(name) or {}
                    cols = [(c, str(t)) for c, t in raw.items()]
            elif isinstance(node, exp.Subquery):
                cols = self.query_outputs(node.this)
            else:
                return None
            # a column of unknown type is left out: what reads it fails to bind and
            # stays untyped, the rest of the scope is typed
            cols = [(c, t) for c, t in cols if t is not None]
            if not cols:
                return None
            out.append((node.alias_or_name, cols))
        return out

    def scope(self, select: exp.Select) -> None:
        sources = self.sources(select)
        nodes = _scope_nodes(select)
        for node in nodes:
            query = node.args.get("query") if isinstance(node, exp.In) else None
            if query is not None:
                outs = self.query_outputs(query)
                self.types.set(query, outs[0][1] if len(outs) == 1 else None)
        columns = [n for n in nodes if isinstance(n, exp.Column)]
        if sources is not None and columns:
            relations = [_placeholders(tuple(cols), alias, self.dialect)
                         for alias, cols in sources]
            self.probe(columns, self._text, relations)
        constants = [n for n in nodes if _constant(n)]
        self.probe(constants, self._text, [])
        height: dict[int, int] = {}
        rest = [n for n in nodes if not isinstance(n, exp.Column) and not _constant(n)]

        def measure(node: exp.Expression) -> int:
            if id(node) not in height:
                height[id(node)] = 1 + max((measure(c) for c in self.value_children(node)
                                            if not isinstance(c, exp.Column)
                                            and not _constant(c)), default=0)
            return height[id(node)]

        levels: dict[int, list[exp.Expression]] = {}
        for node in rest:
            levels.setdefault(measure(node), []).append(node)
        for level in sorted(levels):
            self.operations(levels[level])
        outs = []
        for item in select.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                              and isinstance(item.this, exp.Star)):
                qualifier = item.table.lower() if isinstance(item, exp.Column) else None
                for alias, cols in sources or []:
                    if qualifier is None or alias.lower() == qualifier:
                        outs.extend(cols)
                if sources is None:
                    outs.append(("*", None))
                continue
            outs.append((item.alias_or_name, self.types(item.unalias())))
        self.outputs[id(select)] = outs

    def operations(self, nodes: list[exp.Expression]) -> None:
        """Types operations whose operands are typed: each with its operands as columns."""
        plain, aggregates = [], []
        for node in nodes:
            kids = [c for c in self.value_children(node) if not _constant(c)]
            if any(self.types(c) is None for c in kids):
                continue  # an operand of unknown type: the operation has none either
            (aggregates if isinstance(node, exp.AggFunc) else plain).append((node, kids))
        for group in (plain, aggregates):
            if not group:
                continue
            columns: list[tuple[str, str]] = []
            stand_ins: dict[int, str] = {}
            for _, kids in group:
                for kid in kids:
                    if id(kid) not in stand_ins:
                        stand_ins[id(kid)] = f"__p{len(stand_ins)}"
                        columns.append((stand_ins[id(kid)], self.types(kid)))
            relations = [_placeholders(tuple(columns), "__p", self.dialect)] if columns else []
            self.probe([n for n, _ in group],
                       lambda n, m=stand_ins: self._writer.generate(self._stand_in(n, m),
                                                                    copy=False),
                       relations)

    def _text(self, node: exp.Expression) -> str:
        """A node's text as it stands alone (sqlglot writes a copy, without its parent:
        how it writes a node may depend on the parent, and in a probe it stands alone)."""
        return self._writer.generate(node, copy=True)

    def value_children(self, node: exp.Expression) -> list[exp.Expression]:
        """:func:`_value_children`, remembered per node (the tree does not change while
        it is typed; a stand-in swaps a node's operands only while it copies the node,
        and puts them back)."""
        kids = self._children.get(id(node))
        if kids is None:
            kids = self._children[id(node)] = _value_children(node)
        return kids

    def _stand_in(self, node: exp.Expression, stand_ins: dict[int, str]) -> exp.Expression:
        """A copy of ``node`` with its non-constant operands as columns (or typed scalar
        subqueries for nested queries)."""
        swapped = []
        for kid in self.value_children(node):
            if _constant(kid):
                continue
            name = stand_ins[id(kid)]
            new = exp.column(exp.to_identifier(name, quoted=True))
            swapped.append((kid, new))
        for kid, new in swapped:
            kid.replace(new)
        try:
            copy = node.copy()
        finally:
            for kid, new in swapped:
                new.replace(kid)
        query = copy.args.get("query") if isinstance(copy, exp.In) else None
        if query is not None:
            outs = self.query_outputs(node.args["query"])
            if len(outs) == 1 and outs[0][1] is not None:
                query.replace(exp.Subquery(this=exp.Select(expressions=[
                    _typed_null(outs[0][1], self.dialect)])))
        if isinstance(copy, exp.Subquery):
            outs = self.query_outputs(node.this)
            if len(outs) == 1 and outs[0][1] is not None:
                copy = exp.Subquery(this=exp.Select(expressions=[
                    _typed_null(outs[0][1], self.dialect)]))
        return copy

    def probe(self, nodes: list[exp.Expression], make: Callable[[exp.Expression], str],
              relations: list[str]) -> None:
        """Types ``nodes`` by one probe over ``relations``, one column per node (each
        written by ``make``); if the engine cannot bind them together, one probe each."""
        if nodes:
            self._bind(nodes, [make(n) for n in nodes], relations, one_by_one=True)

    def _bind(self, nodes: list[exp.Expression], items: list[str], relations: list[str],
              one_by_one: bool) -> None:
        try:
            types = self.bind(probe_sql(items, relations))
        except Exception:  # noqa: BLE001 - the engine cannot type it: no type
            types = None
        if types is None or len(types) != len(nodes):
            if one_by_one and len(nodes) > 1:
                for node, item in zip(nodes, items, strict=True):
                    self._bind([node], [item], relations, one_by_one=False)
            return
        for node, t in zip(nodes, types, strict=True):
            self.types.set(node, t)
            if isinstance(node, exp.Window):
                self.types.set(node.this, t)


def _scope_nodes(select: exp.Select) -> list[exp.Expression]:
    """The value nodes of one SELECT, without the insides of nested queries."""
    out: list[exp.Expression] = []

    def visit(node: exp.Expression) -> None:
        if isinstance(node, exp.Select | exp.Union):
            return  # a nested query is a scope of its own
        if isinstance(node, exp.Subquery):
            if not isinstance(node.parent, exp.In):
                out.append(node)  # a scalar subquery: a value of its output's type
            return
        if not isinstance(node, _NOT_VALUES) and not (
                isinstance(node, exp.RowNumber | exp.AggFunc)
                and isinstance(node.parent, exp.Window) and node.arg_key == "this"):
            out.append(node)
        for child in node.iter_expressions():
            visit(child)

    for child in select.iter_expressions():
        if isinstance(child, exp.With | exp.From | exp.Limit | exp.Offset):
            continue
        if isinstance(child, exp.Join):
            if child.args.get("on") is not None:
                visit(child.args["on"])
            continue
        visit(child)
    return out


def _innermost_first(tree: exp.Expression) -> list[exp.Select]:
    """Every SELECT after those it reads: nested queries first, and a query's WITH tables
    (in order) before anything else of it."""
    out: list[exp.Select] = []

    def visit(node: exp.Expression) -> None:
        children = list(node.iter_expressions())
        if any(isinstance(c, exp.With) for c in children):  # (a stable sort: else a no-op)
            children.sort(key=lambda c: not isinstance(c, exp.With))
        for child in children:
            visit(child)
        if isinstance(node, exp.Select):
            out.append(node)

    visit(tree)
    return out


def expression_types(tree: exp.Expression, table_columns: Callable[[str], dict | None],
                     bind: Callable[[str], list[str]], dialect: str) -> Types:
    """The engine's type of every value node of ``tree`` (None where it cannot say).

    Args:
        tree: the tree the backend will run.
        table_columns: ``columns(table) -> {column: engine type name}`` of database tables.
        bind: binds one SELECT on the engine, reading no data, and returns its output
            column types as type names (DuckDB: a relation's ``types``).
        dialect: the SQL dialect of ``bind``.
    """
    return _Prober(tree, table_columns, bind, dialect).run()
