"""Normalisation passes for the SQL that BI tools and notebooks send around a query.

Part of :mod:`dpsql.normalize` (its :data:`~dpsql.normalize.PASSES` run these after its
own): each pass rewrites one client spelling into SQL the rest of the pipeline already
answers, and says why the two mean the same. The output goes through the validator,
analysis and the output check like any query; nothing here is trusted or widens what
can be released.

* :func:`parenthesised_tables` -- ``FROM (t) AS c`` and ``FROM (a JOIN b USING (k))``
  (SmartNoise SQL's tests write both) as the tables and joins they bracket; runs
  first, so the other passes see plain joins;
* :func:`constants` -- ``CURRENT_DATE``, ``CURRENT_TIMESTAMP``, ``NOW()``, ``PI()`` as
  the literal they stand for, computed once, in Python, before the charge;
* :func:`whole_table_windows` -- jupysql's ``percentile_disc(p) WITHIN GROUP (ORDER BY
  x) OVER ()`` over a table without GROUP BY as the whole-table aggregate;
* :func:`released_rows` -- Superset's and Metabase's ``SELECT * FROM (<query>) AS
  virtual_table LIMIT 1000``, ibis's top-k, jupysql's ``--with`` snippets and a CTE
  aggregate filtered outside: an outer query that only projects, filters, orders or
  limits an aggregate's released rows becomes that aggregate's own outer expressions,
  HAVING, ORDER BY and LIMIT, which post-processing evaluates on released rows.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.errors import UnknownColumnError, UnsupportedQueryError

# -- an outer query over an aggregate's released rows ------------------------------------


def released_rows(expression: exp.Expression, catalog: Catalog | None) -> exp.Expression:
    """``SELECT f(cols) FROM (<aggregate query>) AS t WHERE p ORDER BY o LIMIT n``
    as the aggregate query with ``f`` in its select list and ``p``, ``o``, ``n`` in its
    HAVING, ORDER BY and LIMIT.

    Why this is post-processing. The inner query is an aggregate (it has a GROUP BY or
    an aggregate in its own select list), so dpsql releases its rows with DP, and the
    outer query is a function of that released table only:

    * its FROM is that one derived table (or the one CTE it names), with no join, so
      every column it names is resolved here to one of the inner query's output
      columns, by name, and is replaced by that output's expression: a name that is not
      an output column is refused (:class:`~dpsql.errors.UnknownColumnError`), never
      looked up in a catalog table;
    * it has no aggregate, GROUP BY, HAVING, DISTINCT, window, subquery or EXISTS of
      its own (any of them is refused here, before the charge, when the inner query
      aggregates): nothing in it reads a row other than a released one, and nothing
      in it combines released rows (an outer aggregate over the released table would
      be post-processing too, but it is another query shape, refused for now);
    * the result is an aggregate query of the language dpsql already answers: the outer
      filter joins the inner HAVING (``HAVING h AND p``), the outer order and limit
      replace the inner ones, the outer select list projects expressions of the inner
      outputs. dpsql evaluates HAVING, ORDER BY, LIMIT and expressions over aggregates
      and group keys in post-processing, on the noisy values and released keys only
      (:mod:`dpsql.postprocess`), so the rewritten query releases exactly the rows the
      outer query would compute from the released table, and is analysed, bounded,
      charged and checked like any query the analyst could write directly.

    The rewrite is exact SQL: a WHERE over a derived table's columns is a HAVING over the
    expressions they stand for (the inner rows are its groups), ORDER BY/LIMIT of the
    outer query apply to the same rows. Two cases are not exact and are refused: an
    outer filter or order over an inner LIMIT/OFFSET (the inner limit picks the rows
    first), and a LIMIT or OFFSET that is not a whole-number literal. Inner and outer
    LIMIT/OFFSET combine (``OFFSET a LIMIT b`` then ``OFFSET c LIMIT d`` is ``OFFSET
    a + c LIMIT min(d, b − c)``). An inner ORDER BY without a LIMIT is kept unless the
    outer query orders. Nested wrappers are unwrapped one after another.

    A query whose inner table does not aggregate (a row-level derived table) or whose
    outer query aggregates (over a per-user derived table) is left as it is: the
    analysis answers those (:mod:`dpsql.analyze.derived`).
    """
    if not isinstance(expression, exp.Select):
        return expression
    while True:
        flat = _flatten(expression)
        if flat is None:
            return expression
        expression = flat


def _set_with(flat: exp.Select, outer: list[exp.CTE]) -> None:
    """Gives ``flat`` the outer query's WITH tables, then its own (names must differ)."""
    inner_with = flat.args.get("with_")
    rest = outer + ([c.copy() for c in inner_with.expressions] if inner_with is not None
                    else [])
    names = [c.alias_or_name.lower() for c in rest]
    if len(names) != len(set(names)):
        raise UnsupportedQueryError("two WITH tables have the same name")
    flat.set("with_", exp.With(expressions=rest) if rest else None)


def _flatten(outer: exp.Select) -> exp.Select | None:
    """One wrapper written out: ``outer`` as its inner aggregate query with the outer
    select list, filter, order and limit (see :func:`released_rows`), or None when
    ``outer`` is not such a wrapper (analysis decides what it is)."""
    source = _released_source(outer)
    if source is None:
        return None
    inner, alias, cte = source
    if not _aggregates(inner) or _own_aggregates(outer) or outer.args.get("group") \
            or outer.args.get("having"):
        return None  # a row-level derived table, or an outer aggregate: analysis decides
    _check_outer(outer)
    outputs = _outputs(inner)
    flat = inner.copy()
    _carry_with(flat, outer, cte)
    resolve = _resolver(outputs, alias)
    items = _outer_items(outer, inner, resolve, alias)
    _check_no_rebinding(items, inner, outputs, alias)
    flat.set("expressions", items)
    _move_filter_and_order(flat, outer, inner, items, resolve, alias)
    _combine_limits(flat, inner, outer)
    return flat


def _ctes(select: exp.Select) -> list[exp.CTE]:
    """The WITH tables of ``select`` itself (none: an empty list)."""
    with_ = select.args.get("with_")
    return list(with_.expressions) if with_ is not None else []


def _released_source(outer: exp.Select) -> tuple[exp.Select, str, exp.CTE | None] | None:
    """What ``outer`` reads: (the inner query, unwrapped inside first; the name the
    outer query gives it; the WITH table it names, if one), or None when ``outer``
    reads anything but one derived table or one of its own WITH tables."""
    from_ = outer.args.get("from_")
    if from_ is None or outer.args.get("joins"):
        return None
    source = from_.this
    if isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select):
        # a wrapper of a wrapper: inside first
        return released_rows(source.this, None), source.alias, None
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier) \
            and not source.args.get("db"):
        cte = next((c for c in _ctes(outer)
                    if c.alias_or_name.lower() == source.name.lower()), None)
        if cte is None or not isinstance(cte.this, exp.Select):
            return None
        return released_rows(cte.this, None), source.alias or source.name, cte
    return None


def _carry_with(flat: exp.Select, outer: exp.Select, cte: exp.CTE | None) -> None:
    """Gives ``flat`` the outer query's WITH tables; the flattened one stays only if
    another WITH table reads it."""
    ctes = _ctes(outer)
    if cte is not None:
        rest = [c.copy() for c in ctes if c is not cte or any(
            t.name.lower() == cte.alias_or_name.lower()
            for o in ctes if o is not cte for t in o.find_all(exp.Table))]
        _set_with(flat, rest)
    elif outer.args.get("with_") is not None:
        _set_with(flat, [c.copy() for c in ctes])


def _resolver(outputs: dict[str, exp.Expression], alias: str
              ) -> Callable[[exp.Expression], exp.Expression]:
    """A transform that replaces each column of the outer query by the inner output
    expression it names; a column that names no single output is refused."""

    def resolve(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            if node.table and node.table.lower() != (alias or "").lower():
                raise UnknownColumnError(
                    f"column {node.sql(dialect='duckdb')[:80]!r}: the outer query reads "
                    f"only {alias!r}, the rows of the query inside it")
            found = outputs.get(node.name.lower())
            if found is None:
                raise UnknownColumnError(
                    f"column {node.name[:80]!r} is not an output of the query inside "
                    f"{alias!r}; its outputs are {', '.join(sorted(outputs)) or 'unnamed'}")
            if found is _AMBIGUOUS:
                raise UnsupportedQueryError(
                    f"column {node.name[:80]!r} names two outputs of the query inside "
                    f"{alias!r}: give them different aliases")
            return exp.paren(found.copy(), copy=False) if not isinstance(
                found, exp.Column) else found.copy()
        return node

    return resolve


def _outer_items(outer: exp.Select, inner: exp.Select,
                 resolve: Callable[[exp.Expression], exp.Expression],
                 alias: str) -> list[exp.Expression]:
    """The outer select list over the inner outputs, each named as the analyst named
    it (``*`` is the inner select list)."""
    items = []
    for item in outer.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                          and isinstance(item.this, exp.Star)):
            if isinstance(item, exp.Column) and item.table.lower() != (alias or "").lower():
                raise UnknownColumnError(
                    f"{item.sql(dialect='duckdb')[:80]!r}: the outer query reads only "
                    f"{alias!r}")
            items += [i.copy() for i in inner.expressions]
            continue
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(item, exp.Alias):
            name, quoted = item.alias, item.args["alias"].quoted
        elif isinstance(item, exp.Column):
            name, quoted = item.name, item.this.quoted
        else:
            name, quoted = item.sql(dialect="duckdb", comments=False), True
        value = body.copy().transform(resolve)
        if isinstance(value, exp.Paren):
            value = value.this
        if len(name) <= 128:
            items.append(exp.alias_(value, name, quoted=quoted))
        else:
            items.append(value)
    return items


def _check_no_rebinding(items: list[exp.Expression], inner: exp.Select,
                        outputs: dict[str, exp.Expression], alias: str) -> None:
    """Refuses an outer output name that is also a column inside with another meaning.

    HAVING, ORDER BY or GROUP BY of the written-out query could bind the name to this
    output instead of the column it names inside: never rebind.
    """
    inner_names = {c.name.lower() for c in inner.find_all(exp.Column)}
    for item in items:
        name = item.alias_or_name.lower()
        same = outputs.get(name)
        body = item.this if isinstance(item, exp.Alias) else item
        if name in inner_names and not (
                (isinstance(body, exp.Column) and body.name.lower() == name)
                or (same is not None and same is not _AMBIGUOUS and same == body)):
            raise UnsupportedQueryError(
                f"output name {item.alias[:80]!r} is also a column of the query inside "
                f"{alias!r}: choose another alias")


def _move_filter_and_order(flat: exp.Select, outer: exp.Select, inner: exp.Select,
                           items: list[exp.Expression],
                           resolve: Callable[[exp.Expression], exp.Expression],
                           alias: str) -> None:
    """The outer WHERE as (part of) ``flat``'s HAVING, the outer ORDER BY as its order;
    refused over an inner LIMIT/OFFSET, which picks the rows first."""
    where = outer.args.get("where")
    order = outer.args.get("order")
    if (where is not None or order is not None) and (
            inner.args.get("limit") or inner.args.get("offset")):
        raise UnsupportedQueryError(
            f"the query inside {alias!r} has a LIMIT or OFFSET: the outer WHERE or ORDER "
            "BY would apply after it; filter and order inside (HAVING, ORDER BY) instead")
    if where is not None:
        condition = where.this.copy().transform(resolve)
        having = flat.args.get("having")
        if having is not None:
            condition = exp.and_(exp.paren(having.this.copy()), exp.paren(condition))
        flat.set("having", exp.Having(this=condition))
    if order is not None:
        # ORDER BY may name an output of the outer query itself (SQL binds those first)
        mine = {i.alias.lower() for i in items if isinstance(i, exp.Alias)}
        flat.set("order", order.copy().transform(
            lambda n: n if isinstance(n, exp.Column) and not n.table
            and n.name.lower() in mine else resolve(n)))


_AMBIGUOUS = exp.Null()


def _outputs(inner: exp.Select) -> dict[str, exp.Expression]:
    """The inner query's output names and the expressions they stand for."""
    found: dict[str, exp.Expression] = {}
    for item in inner.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                          and isinstance(item.this, exp.Star)):
            raise UnsupportedQueryError(
                "the query inside an outer query selects *: name its columns")
        name = item.alias_or_name.lower()
        if not name:
            continue  # an unnamed expression: SELECT * keeps it, a name cannot reach it
        body = item.this if isinstance(item, exp.Alias) else item
        found[name] = _AMBIGUOUS if name in found else body
    return found


def _aggregates(select: exp.Select) -> bool:
    """Whether ``select`` aggregates (a GROUP BY, or an aggregate of its own)."""
    return bool(select.args.get("group")) or _own_aggregates(select)


def _own_aggregates(select: exp.Select) -> bool:
    """Whether ``select``'s own select list calls an aggregate (not a subquery's)."""
    return any(isinstance(n, exp.AggFunc) and n.find_ancestor(exp.Select) is select
               for item in select.expressions for n in item.walk())


def _check_outer(outer: exp.Select) -> None:
    """Refuses what would make the outer query read more than the released rows."""
    if outer.args.get("distinct"):
        raise UnsupportedQueryError(
            "SELECT DISTINCT over an aggregate's rows is not supported: the rows are "
            "already one per group")
    for key in ("laterals", "windows", "qualify", "sample", "into", "locks", "kind",
                "settings"):
        if outer.args.get(key):
            raise UnsupportedQueryError(
                f"{key.upper()} is not supported in a query over an aggregate's rows")
    from_ = outer.args["from_"]
    for part in [*outer.expressions, outer.args.get("where"), outer.args.get("order")]:
        if part is None:
            continue
        for node in part.walk():
            if isinstance(node, exp.Window):
                raise UnsupportedQueryError(
                    "a window function (OVER) over an aggregate's released rows is not "
                    "supported: order and limit them with ORDER BY and LIMIT")
            if isinstance(node, exp.Select | exp.Subquery | exp.Exists) and \
                    node.find_ancestor(exp.From) is not from_:
                raise UnsupportedQueryError(
                    "a subquery in a query over an aggregate's released rows is not "
                    "supported: it could read rows that were not released")


def _combine_limits(flat: exp.Select, inner: exp.Select, outer: exp.Select) -> None:
    """``OFFSET a LIMIT b`` (inner) then ``OFFSET c LIMIT d`` (outer), as one."""
    a = _whole(inner, "offset") or 0
    b = _whole(inner, "limit")
    c = _whole(outer, "offset") or 0
    d = _whole(outer, "limit")
    if outer.args.get("order") is not None:
        # the outer order replaces the inner one; an inner limit was refused above
        a, b = 0, None
    limit = d if b is None else (max(b - c, 0) if d is None else min(d, max(b - c, 0)))
    offset = a + c
    flat.set("limit", exp.Limit(expression=exp.Literal.number(limit))
             if limit is not None else None)
    flat.set("offset", exp.Offset(expression=exp.Literal.number(offset)) if offset else None)


def _whole(select: exp.Select, key: str) -> int | None:
    """The whole-number literal of ``select``'s LIMIT or OFFSET (None: there is none)."""
    node = select.args.get(key)
    if node is None:
        return None
    value = node.expression
    if not (isinstance(value, exp.Literal) and not value.is_string
            and value.this.isdigit() and len(value.this) <= 18):
        raise UnsupportedQueryError(
            f"{key.upper()} of a query over an aggregate's rows must be a whole-number "
            "literal")
    return int(value.this)


# -- parenthesised tables and joins ---------------------------------------------------------


def parenthesised_tables(expression: exp.Expression, catalog: Catalog | None) -> exp.Expression:
    """``FROM (t) AS c`` as ``FROM t AS c``; ``FROM (a JOIN b ON p) JOIN c`` as ``FROM a
    JOIN b ON p JOIN c``.

    Brackets around one table name that table: with an alias outside, the table takes
    that alias (an alias inside as well is refused: which one would name it?). Brackets
    around joins in the first FROM position change nothing either: SQL joins left to
    right, so ``(a ⋈ b) ⋈ c`` is ``a ⋈ b ⋈ c`` for every join type. Only unaliased
    bracketed joins are written out (an alias would hide the inner tables' names, which
    is another scope), and only first in FROM (``a LEFT JOIN (b JOIN c)`` is not
    ``a LEFT JOIN b JOIN c``); anything else is left for the validator to refuse.
    """
    if not isinstance(expression, exp.Select):
        return expression
    if not any(isinstance(s.this, exp.Table) for s in expression.find_all(exp.Subquery)):
        return expression
    expression = expression.copy()
    for sub in list(expression.find_all(exp.Subquery)):
        table = sub.this
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            continue
        joins = table.args.get("joins") or []
        alias = sub.args.get("alias")
        if not joins:
            if alias is not None and table.alias:
                raise UnsupportedQueryError(
                    f"table {table.name[:80]!r} has two aliases, {table.alias[:80]!r} inside "
                    f"the brackets and {alias.name[:80]!r} outside: keep one")
            plain = table.copy()
            if alias is not None:
                if alias.args.get("columns"):
                    continue  # renamed columns: left to the validator
                plain.set("alias", alias.copy())
            sub.replace(plain)
            continue
        holder = sub.parent
        select = holder.parent if isinstance(holder, exp.From) else None
        if alias is not None or not isinstance(select, exp.Select) or any(
                isinstance(j.this, exp.Subquery) and isinstance(j.this.this, exp.Table)
                and j.this.this.args.get("joins") for j in joins):
            continue
        first = table.copy()
        first.set("joins", None)
        select.set("from_", exp.From(this=first))
        select.set("joins", [j.copy() for j in joins] + list(select.args.get("joins") or []))
    return expression


# -- public constants ----------------------------------------------------------------------


def constants(expression: exp.Expression, catalog: Catalog | None,
              now: datetime.datetime | None = None) -> exp.Expression:
    """``CURRENT_DATE``, ``CURRENT_TIMESTAMP``, ``NOW()``, ``TODAY()``, ``PI()`` as literals.

    Each is a public constant: it does not depend on the data. dpsql reads the clock
    once per query, here, before anything is charged, and writes the value into the
    query as a literal (``CAST('2026-11-26' AS DATE)``, ``CAST('2026-11-26
    17:40:31.123456' AS TIMESTAMP)``, ``CAST(3.141592653589793 AS DOUBLE)``), so that
    every backend, and the analysis that derives bounds and domains, sees the same value,
    and no backend evaluates a clock after the charge. The time is this machine's local
    wall-clock time, as DuckDB's own ``CURRENT_DATE`` gives it in its default time zone;
    ``CURRENT_TIMESTAMP`` becomes a ``TIMESTAMP`` without time zone (group keys and
    comparisons with ``TIMESTAMP`` columns need no zone). An unnamed output keeps the
    name the analyst wrote (``current_date``).
    """
    if not isinstance(expression, exp.Select):
        return expression

    def constant(node: exp.Expression) -> bool:
        if isinstance(node, exp.CurrentDate | exp.CurrentTimestamp | exp.Pi):
            return not any(v is not None for v in node.args.values())
        return isinstance(node, exp.Anonymous) and isinstance(node.this, str) and (
            node.this.upper() in ("NOW", "TODAY")) and not node.expressions

    if not any(constant(n) for n in expression.walk()):
        return expression
    now = now or datetime.datetime.now()
    expression = expression.copy()
    for select in expression.find_all(exp.Select):
        _keep_names(select, constant)

    def literal(node: exp.Expression) -> exp.Expression:
        if not constant(node):
            return node
        name = node.this.upper() if isinstance(node, exp.Anonymous) else None
        if isinstance(node, exp.CurrentDate) or name == "TODAY":
            return exp.cast(exp.Literal.string(now.date().isoformat()), "DATE")
        if isinstance(node, exp.Pi):
            return exp.cast(exp.Literal.number(repr(math.pi)), "DOUBLE")
        return exp.cast(exp.Literal.string(now.isoformat(sep=" ")), "TIMESTAMP")

    return expression.transform(literal)


def _keep_names(select: exp.Select, rewritten: Callable[[exp.Expression], bool]) -> None:
    """Names each unnamed output the pass will rewrite by what the analyst wrote.

    An output without an alias is named by its SQL text; a rewrite would otherwise
    rename it (``VAR(age)`` would come back as ``VARIANCE(age)``). Output names never
    reach a backend; names longer than an identifier stay unnamed.
    """
    for item in select.expressions:
        if not isinstance(item, exp.Alias | exp.Column) and any(
                rewritten(n) for n in item.walk()):
            name = item.sql(dialect="duckdb", comments=False)
            if len(name) <= 128:
                item.replace(exp.alias_(item.copy(), name, quoted=True))


# -- an aggregate OVER () over a whole table ---------------------------------------------


def whole_table_windows(expression: exp.Expression,
                        catalog: Catalog | None) -> exp.Expression:
    """``SELECT percentile_disc(p) WITHIN GROUP (ORDER BY x) OVER () FROM t`` as the
    aggregate ``SELECT percentile_disc(p) WITHIN GROUP (ORDER BY x) FROM t``.

    jupysql's ``%sqlplot boxplot`` asks for its quartiles this way. Why this is a
    whole-table aggregate and not a window over private rows: a window with no PARTITION
    BY, no ORDER BY and no frame is the whole input for every row, so an aggregate over
    it has one value, the aggregate of all rows, on every row. Exactly when the query
    has no GROUP BY, HAVING or aggregate outside a window, and every output is built from
    such windows and constants (no column outside them), all its rows are that one
    row repeated, once per input row. dpsql answers that row once, with DP, as the
    aggregate query (how many times it repeats is the table's row count, private, and
    never released; when no row matches, SQL returns no row and dpsql its one noisy
    row, as for any aggregate: whether a row exists is private); ``SELECT DISTINCT``
    over it is the same single row. The argument holds for any aggregate; the pass
    takes the form clients send, ``PERCENTILE_CONT/DISC(p) WITHIN GROUP (ORDER BY x)
    OVER ()``, only. Any other
    window (a PARTITION BY, an ORDER BY, a frame, a ranking function, a column next to
    the window, ``COUNT(*) OVER ()``) is left as it is, and refused by the validator.
    """
    if not isinstance(expression, exp.Select):
        return expression
    windows = [w for w in expression.find_all(exp.Window)
               if w.find_ancestor(exp.Select) is expression]
    if not windows or expression.args.get("group") or expression.args.get("having") \
            or expression.args.get("qualify") or expression.args.get("windows"):
        return expression
    for w in windows:
        if (w.args.get("partition_by") or w.args.get("order") or w.args.get("spec")
                or w.args.get("alias") or not isinstance(w.this, exp.WithinGroup)
                or not isinstance(w.this.this, exp.PercentileCont | exp.PercentileDisc)
                or w.find_ancestor(exp.Window, exp.AggFunc) is not None):
            return expression
    for item in expression.expressions:
        for node in item.walk():
            outside = node.find_ancestor(exp.Window) is None and not isinstance(
                node, exp.Window)
            if outside and isinstance(node, exp.Column | exp.Star | exp.AggFunc
                                      | exp.Select | exp.Subquery):
                return expression
    expression = expression.copy()
    _keep_names(expression, lambda n: isinstance(n, exp.Window))
    for w in [w for w in expression.find_all(exp.Window)
              if w.find_ancestor(exp.Select) is expression]:
        w.replace(w.this)
    expression.set("distinct", None)
    return expression


#: The passes in the order they run (after :data:`dpsql.normalize.PASSES`' own).
PASSES = (constants, whole_table_windows, released_rows)
#: The pass that runs before :data:`dpsql.normalize.PASSES`' own.
FIRST = (parenthesised_tables,)
