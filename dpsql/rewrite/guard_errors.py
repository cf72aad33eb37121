"""Pass (the last): no expression of the final SQL can fail on some rows only.

An expression that fails for some rows only — a CAST of a bad string, a division by a
zero in one row, an integer overflow in ``age * K`` for large ages, a string column
compared with a number — would let an analyst learn about the data from *whether* the
query fails, for almost no budget (``CASE WHEN pid = 5 THEN age * K ELSE 0 END``
binary-searches one person's age). So this pass runs **after every other pass**, over
every SELECT of the final tree (the per-user and L0 layers, derived tables, CTEs and IN
subqueries alike), and for each scalar expression — select items, GROUP BY keys, WHERE,
JOIN and HAVING conditions, aggregate arguments, window orders:

* a node that can raise on some row (decided by
  :func:`dpsql.rewrite.check_guards.node_failure` from the types of its operands) is
  wrapped in ``TRY(...)``, which turns any runtime error into NULL; a CAST that can fail
  becomes TRY_CAST and every divisor that may be zero ``NULLIF(b, 0)`` (inside TRY too,
  so that engines without TRY, whose dialect layer rewrites each operation, agree);
* a value used as a condition that is not a boolean becomes ``TRY_CAST(v AS BOOLEAN)``;
* a SUM or AVG of a value whose total could overflow sums it as DOUBLE instead;
* what no guard can catch — a LIKE pattern that is not a constant valid on every
  engine, a REPLACE that can lengthen strings (running out of memory is not caught by
  TRY) — is refused, before the charge.

Nodes that cannot fail stay bare (columns, literals, comparisons of values of one type,
clamps), so filters still push down. Aggregates ignore the NULLs; a NULL key becomes a
group of its own; a NULL predicate drops the row. The backend then checks the final SQL
again (:func:`dpsql.rewrite.check_guards.check_guards`) with the database's exact
types, and refuses anything this pass could not prove safe.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.backends.dialects import DUCKDB_FAILURES
from dpsql.errors import UnsupportedQueryError
from dpsql.rewrite.check_guards import (
    NUMBERS,
    Typer,
    _boolable,
    node_failure,
    refuse,
    type_of_catalog,
    unguardable,
)

_FAILURES = DUCKDB_FAILURES  # the rewrite writes DuckDB; other engines translate it
_UNWRAPPABLE = (exp.AggFunc, exp.Window, exp.Select, exp.Subquery)


def guard_errors(expression: exp.Select, plan: Plan) -> exp.Select:
    """Guards every expression of the final tree that could fail on some rows.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite.statistics_query import statistics_query
    >>> plan = _demo_plan("SELECT SUM(age * 2) FROM pums WHERE CAST(educ AS INT) / age > 1")
    >>> print(guard_errors(statistics_query(plan), plan).sql(pretty=True))
    SELECT
      SUM(CAST(TRY(age * 2) AS DOUBLE)) AS __s0
    FROM pums
    WHERE
      TRY_CAST(educ AS INT) / NULLIF(age, 0) > 1

    (``age * 2`` may overflow: TRY; its sum is unbounded here, so it sums as DOUBLE; the
    clamps of :func:`~dpsql.rewrite.clamp_values.clamp_values` would bound it instead.)
    """
    if getattr(plan, "guards_in_backend", False):
        # the backend guards by its allow-list (:mod:`dpsql.backends.total`), typed by
        # the engine itself; only what no guard of any engine catches is refused here
        _refuse_unguardable(expression)
        return expression
    typer = Typer(expression, catalog_columns(plan))
    _fix_unguardable(expression, typer)
    _Guard(typer).visit(expression)
    return expression


def _refuse_unguardable(expression: exp.Expression) -> None:
    """Refuses what no guard catches on any engine: a LIKE pattern that is not a constant
    valid everywhere, LIKE ... ESCAPE, a REPLACE that can lengthen strings (running out
    of memory is not an error TRY catches), an IN subquery over other than a public set.
    """
    for node in expression.walk():
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            _check_in_subquery(node)
        if isinstance(node, exp.Like | exp.ILike | exp.Escape | exp.Replace):
            reason = unguardable(node, None, None)
            if reason is not None:
                raise refuse(reason)


def catalog_columns(plan: Plan):
    """``columns(table)``: the column types of every table the plan reads.

    The database's own types when the engine gave them (``plan.backend_columns``, the
    backend's ``columns``: exact widths and scales, so fewer guards are needed and
    filters still push down); else the catalog's (a ``float`` column may then be any
    number, an ``int`` any width, and more is guarded).
    """
    backend_columns = getattr(plan, "backend_columns", None)
    if callable(backend_columns):
        return backend_columns
    tables = {}

    def add(scope) -> None:
        for source in scope.sources:
            if source.derived is None:
                tables.setdefault(source.table.name.lower(), source.table)
            for table in source.reads:
                tables.setdefault(table.name.lower(), table)
            if source.inner is not None:
                add(source.inner)

    add(plan.scope)
    catalog = getattr(plan, "catalog", None)

    def columns(name: str):
        table = tables.get(name)
        if table is None and catalog is not None and catalog.has_table(name):
            table = catalog.table(name)  # a public table read by IN (SELECT ...)
        if table is None:
            return None
        return {c.lower(): type_of_catalog(col.type) for c, col in table.columns.items()}

    return columns


def _fix_unguardable(expression: exp.Expression, typer: Typer) -> None:
    """Refuses what no guard catches; sums whose total may overflow become DOUBLE sums.

    SELECTs are taken innermost first (a CTE or derived table before the query that reads
    it), so that a sum over another query's column sees that column's final type.
    """
    for node in expression.walk():
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            _check_in_subquery(node)
        if not isinstance(node, exp.Sum | exp.Avg):
            reason = unguardable(node, typer, _FAILURES)
            if reason is not None:
                raise refuse(reason)
    for select in _innermost_first(expression):
        for node in list(select.find_all(exp.Sum, exp.Avg)):
            if node.find_ancestor(exp.Select) is not select:
                continue
            reason = unguardable(node, typer, _FAILURES)
            if reason is None:
                continue
            if typer.type(node.this).family in NUMBERS:
                # a DOUBLE total cannot overflow (it becomes inf, which the clamps bound)
                node.set("this", exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE")))
                typer.reset()
                reason = unguardable(node, typer, _FAILURES)
            if reason is not None:
                raise refuse(reason)


def _check_in_subquery(node: exp.In) -> None:
    """An analyst's ``IN (SELECT ...)`` must be ``column IN (SELECT column FROM public ...)``,
    a conjunct of WHERE: then the set is public data and the test cannot fail per row
    (dpsql's own ``__uid IN (SELECT __uid FROM __over)`` reads its own CTE)."""
    query = node.args["query"]
    inner = query.this if isinstance(query, exp.Subquery) else query
    from_ = inner.args.get("from_") if isinstance(inner, exp.Select) else None
    if from_ is not None and isinstance(from_.this, exp.Table) \
            and from_.this.name.startswith("__"):
        return
    conjunct: exp.Expression = node
    while isinstance(conjunct.parent, exp.Paren | exp.And):  # (a AND b) AND c too
        conjunct = conjunct.parent
    if isinstance(node.this, exp.Column) and isinstance(conjunct.parent, exp.Where):
        return
    raise UnsupportedQueryError(
        "a subquery in WHERE must be a bare `column IN (SELECT column FROM public_table ...)` "
        "condition, joined to the rest with AND")


def _innermost_first(expression: exp.Expression) -> list[exp.Select]:
    out: list[exp.Select] = []

    def visit(node: exp.Expression) -> None:
        for child in node.iter_expressions():
            visit(child)
        if isinstance(node, exp.Select):
            out.append(node)

    visit(expression)
    return out


class _Guard:
    def __init__(self, typer: Typer):
        self.typer = typer

    def visit(self, node: exp.Expression) -> None:
        """Guards ``node``'s subtree, children first.

        Each node that can fail gets its **own** ``TRY`` (``TRY(TRY(a * b) + c)``, not
        ``TRY(a * b + c)``): DuckDB computes a repeated subexpression once, below the
        expression that uses it, so a failing node must carry its guard with it.
        """
        typer = self.typer
        if isinstance(node, exp.Where | exp.Having):
            self._condition(node, "this")
        elif isinstance(node, exp.Join) and node.args.get("on") is not None:
            self._condition(node, "on")
        elif isinstance(node, exp.And | exp.Or | exp.Xor):
            self._condition(node, "this")
            self._condition(node, "expression")
        elif isinstance(node, exp.Not | exp.If):
            self._condition(node, "this")
        if isinstance(node, exp.Div | exp.IntDiv | exp.Mod):
            divisor = node.expression
            if not typer.type(divisor).excludes_zero():
                node.set("expression", exp.Nullif(this=divisor, expression=exp.Literal.number(0)))
                typer.forget(node)
        for child in list(node.iter_expressions()):
            self.visit(child)
        if isinstance(node, exp.If) and isinstance(node.parent, exp.Case):
            return  # a branch is not an expression: its CASE is checked (and guarded) whole
        reason = node_failure(node, typer, _FAILURES)
        if reason is None:
            return
        if type(node) is exp.Cast:
            _wrap(node, lambda n: exp.TryCast(this=n.this, to=n.args["to"]))
        elif not node.find(*_UNWRAPPABLE) and not isinstance(node.parent, exp.Try):
            _wrap(node, lambda n: exp.Try(this=n))
        # else: over an aggregate or a subquery no TRY can help; the backend's check
        # (check_guards, with the database's types) decides

    def _condition(self, node: exp.Expression, key: str) -> None:
        """A condition that is not a boolean (nor a number) becomes TRY_CAST(.. AS BOOLEAN)."""
        cond = node.args.get(key)
        if cond is None or _boolable(self.typer.type(cond)):
            return
        node.set(key, exp.TryCast(this=cond, to=exp.DataType.build("BOOLEAN")))


def _wrap(node: exp.Expression, make) -> exp.Expression:
    """Puts ``make(node)`` where ``node`` was (the new node may contain ``node``)."""
    parent, key, index = node.parent, node.arg_key, node.index
    new = make(node)
    if parent is not None:
        parent.set(key, new, index)
    return new


__all__ = ["catalog_columns", "guard_errors"]
