"""Row-level derived tables and CTEs in FROM, written out into the queries that read them.

**Row-level derived tables** (:func:`inline_row_derived`). A derived table or CTE that
only filters and projects the rows of one table::

    SELECT COUNT(*) FROM (SELECT p.pid, p.age FROM pums AS p) AS anon_1
    WITH adults AS (SELECT sex, age FROM pums WHERE age >= 18)
    SELECT sex, COUNT(*) FROM adults GROUP BY sex

is the same rows under another name. It is written out into the query that reads it:
each reference to one of its columns becomes the expression it projects (in
parentheses), its WHERE joins the outer WHERE (or the ON of the LEFT JOIN that brings it
in), and its table takes the derived table's alias. Why this is sound: the result is
*equivalent SQL*, the same rows with the same values, so every fact the analysis then
uses (user key, bounds, domains, foreign keys, uniqueness in the database) is a fact of
the query the analyst wrote. Nothing is borrowed by name: ``pid + 0 AS pid`` becomes
``(d.pid + 0)``, an expression, not the user key; ``age * 1000 AS age`` gets the bounds
interval arithmetic gives ``age * 1000``; ``sex + 0 AS sex`` gets the domain the image
of ``sex``'s domain under ``+ 0`` gives, like any expression. Equivalence holds because:

* only a SELECT with a select list, a FROM, INNER/LEFT/comma joins and a WHERE is
  inlined: no aggregate, GROUP BY, HAVING, DISTINCT, ORDER BY, LIMIT/OFFSET, window, set
  operation or nested WITH, and no subquery except ``IN (SELECT ...)`` over public
  tables (checked later as anywhere else). Its sources are catalog tables or per-user
  derived tables. Filtering commutes with the outer query's joins: ``σ_w(A) ⋈ B =
  σ_w(A ⋈ B)`` for an INNER join or the preserved side of a LEFT join, and ``B ⟕_θ
  σ_w(A) = B ⟕_{θ ∧ w} A`` for the side a LEFT JOIN brings in;
* a derived table that joins several sources is inlined only first in FROM, where SQL's
  left-to-right joins make ``(A ⋈ B) ⋈ X`` exactly ``A ⋈ B ⋈ X``; its sources are
  renamed ``<alias>_<inner alias>`` (refused if the query uses that name), a name the
  outer query cannot write (see below), and their joins are checked by the FROM
  analysis like any the analyst wrote (users matched, keys unique in the database);
* on the side a LEFT JOIN brings in, a derived column is NULL where nothing matched,
  but an expression over the table's NULL columns need not be (``COALESCE(x, 0)``,
  ``1``): there, only plain column references are inlined;
* names bind as SQL binds them: every column inside refers to the inner table (a
  reference to the outer query is refused: correlated derived tables are not
  supported), every column outside that names the derived table refers to one of its
  select-list names (the hidden columns of the inner table are not visible, nor are the
  inner aliases or the new ones: only the outer FROM's names qualify), and a name
  that the written-out tables would bind differently (the inner table's other columns
  shadowing an outer one, an ORDER BY/HAVING output alias that is also a derived
  column) is qualified or refused, never silently rebound;
* the inner table takes the derived table's alias, which is unique in the outer FROM, so
  the same table read twice (or a CTE referenced twice) stays two sources, and a CTE named
  like a catalog table stands for its own definition (see :func:`inline_ctes`).

Derived tables are written out innermost first, so nested ones work. Derived tables that
aggregate per user are analysed by :mod:`dpsql.analyze.derived`.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.errors import UnknownColumnError, UnknownTableError, UnsupportedQueryError
from dpsql.validate import AGGREGATES, SAFE_NAME


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


#: The clauses a row-level derived table may have: a select list, one source, a WHERE.
_ROW_LEVEL_ARGS = frozenset({"expressions", "from_", "joins", "where"})


@dataclasses.dataclass
class _RowDerived:
    """A row-level derived table about to be written out."""

    alias: str  # its alias in the outer query (lower case)
    node: exp.Subquery  # where it stands in the outer FROM
    join: exp.Join | None  # the JOIN that brings it in (None in FROM)
    source: exp.Expression  # what it reads first, now aliased ``alias``
    joins: list[exp.Join]  # what it joins to it (only first in FROM), renamed
    aliases: list[str]  # the new aliases of its sources
    hidden: frozenset[str]  # every column of its sources (visible after inlining)
    #: select-list name -> projected expression (columns qualified ``alias``); None
    #: for a name selected twice
    columns: dict[str, exp.Expression | None]
    where: exp.Expression | None
    left: bool  # brought in by a LEFT JOIN: its columns are NULL where nothing matched
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)


def inline_row_derived(select: exp.Select, catalog: Catalog,
                       max_nodes: int | None = None) -> exp.Select:
    """Writes row-level derived tables and CTEs out into the queries that read them.

    See the module docstring for what is inlined and why the result is equivalent SQL.
    Run after :func:`inline_ctes` (a CTE is then a derived table) and before the IN
    subqueries are checked and the FROM clause is resolved.

    >>> from sqlglot import parse_one
    >>> from dpsql.datasets import pums_catalog
    >>> q = parse_one("SELECT sex, COUNT(*) FROM (SELECT sex, age * 2 AS a FROM pums "
    ...               "WHERE age >= 18) AS d WHERE a > 60 GROUP BY sex")
    >>> print(inline_row_derived(q, pums_catalog()).sql(pretty=True))
    SELECT
      d.sex AS sex,
      COUNT(*)
    FROM pums AS d
    WHERE
      d.age >= 18 AND (
        d.age * 2
      ) > 60
    GROUP BY
      d.sex

    Raises:
        UnknownColumnError: a name the derived table does not select, or one that is
            ambiguous.
        UnsupportedQueryError: a derived table that reads the outer query, a LEFT-joined
            one whose used column is an expression, or a written-out query beyond
            ``max_nodes`` syntax nodes.
    """
    select = select.copy()
    _inline(select, catalog, max_nodes)
    return select


def _inline(select: exp.Select, catalog: Catalog, max_nodes: int | None) -> None:
    from_ = select.args.get("from_")
    if from_ is None:
        return
    items = [(from_.this, None)] + [(j.this, j) for j in select.args.get("joins") or []]
    if any((j.args.get("side") or "").upper() in ("RIGHT", "FULL") for _, j in items[1:]):
        return  # a filter would not commute with them; refused by the FROM analysis
    for node, _ in items:  # innermost first
        if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
            _inline(node.this, catalog, max_nodes)
    found: dict[str, _RowDerived] = {}
    visible: list[tuple[str, set[str], _RowDerived | None]] = []
    for node, join in items:
        info = _row_derived(node, join, catalog)
        if info is not None:
            found[info.alias] = info
            visible.append((info.alias, set(info.columns), info))
        else:
            visible.append(_visible(node, catalog))
    if not found:
        return
    seen: set[str] = set()
    for alias, _, _ in visible:
        if alias in seen:
            raise UnsupportedQueryError(f"table alias {alias!r} is used twice; rename one")
        seen.add(alias)
    taken = [v[0] for v in visible if v[2] is None]
    for info in found.values():
        for fresh in info.aliases:
            if fresh != info.alias and (fresh in taken or fresh in found):
                raise UnsupportedQueryError(
                    f"derived table {info.alias!r} joins tables inside, which are written out "
                    f"as {fresh!r}, a name the query already uses; rename one")
            taken.append(fresh)
    room = None
    if max_nodes is not None:
        room = max_nodes - sum(1 for _ in select.walk())
    _rebind(select, visible, found, room, max_nodes)
    extra = []
    for info in found.values():
        info.node.replace(info.source)
        if info.joins:  # first in FROM: (A ⋈ B) ⋈ X is A ⋈ B ⋈ X, left to right
            select.set("joins", [*info.joins, *(select.args.get("joins") or [])])
        if info.where is None:
            continue
        if info.left:  # B LEFT JOIN σ_w(A) ON θ  =  B LEFT JOIN A ON θ AND w
            info.join.set("on", exp.and_(info.join.args["on"], info.where.copy()))
        else:  # σ_w(A) ⋈ B = σ_w(A ⋈ B), and the same for the preserved side of a LEFT JOIN
            extra.append(info.where.copy())
    if extra:
        where = select.args.get("where")
        select.set("where", exp.Where(this=exp.and_(*extra, *([where.this] if where else []))))


def _visible(node: exp.Expression, catalog: Catalog) -> tuple[str, set[str], None]:
    """The alias of a source left as it is, and the column names it shows the query."""
    if isinstance(node, exp.Table):
        name = node.name.lower()
        columns = set(catalog.table(name).columns) if catalog.has_table(name) else set()
        return (node.alias or name).lower(), columns, None
    if isinstance(node, exp.Subquery):
        return (node.alias or "").lower(), set(_select_names(node)), None
    return "", set(), None


def _select_names(node: exp.Subquery) -> list[str]:
    alias = node.args.get("alias")
    if alias is not None and alias.columns:
        return [c.name.lower() for c in alias.columns]
    inner = node.this
    if not isinstance(inner, exp.Select):
        return []
    return [e.alias_or_name.lower() for e in inner.expressions]


def _row_derived(node: exp.Expression, join: exp.Join | None,
                 catalog: Catalog) -> _RowDerived | None:
    """The derived table ``node`` prepared for inlining, or None if it is not row-level.

    In order: its shape (:func:`_row_level`), its sources (:func:`_inner_sources`), the
    names inside bound to them (:func:`_bind_inner`), its select list
    (:func:`_projected`), and its sources renamed (:func:`_renamed_sources`).
    """
    shape = _row_level(node, join)
    if shape is None:
        return None
    inner, alias, left = shape
    inner_joins = list(inner.args.get("joins") or [])
    sources = _inner_sources(inner, inner_joins, alias, catalog)
    if sources is None:
        return None
    if inner_joins and join is not None:
        raise UnsupportedQueryError(
            f"derived table {alias!r} joins tables inside and is itself joined: write it "
            "first in FROM, or join its tables in the outer query")
    _bind_inner(inner, alias, sources)
    columns = _projected(node, inner, alias, sources)
    first, joins = _renamed_sources(inner, inner_joins, sources)
    where = inner.args.get("where")
    return _RowDerived(alias, node, join, first, joins, [x[2] for x in sources],
                       frozenset(n for x in sources for n in x[1]), columns,
                       where.this if where else None, left)


def _row_level(node: exp.Expression,
               join: exp.Join | None) -> tuple[exp.Select, str, bool] | None:
    """(the inner SELECT, its alias, whether LEFT-joined) when ``node`` only filters and
    projects rows (module docstring); None otherwise."""
    if not isinstance(node, exp.Subquery) or not isinstance(node.this, exp.Select):
        return None
    inner = node.this
    alias = (node.alias or "").lower()
    if not alias or alias.startswith("__"):
        return None  # refused with its reason by derive()
    if any(v for k, v in inner.args.items() if k not in _ROW_LEVEL_ARGS):
        return None
    where = inner.args.get("where")
    parts = [*inner.expressions, *([where.this] if where else [])]
    for part in parts:
        if any(part.find_all(*AGGREGATES)):
            return None
        for sub in part.find_all(exp.Select):  # only IN (SELECT ...), checked later
            if sub.find_ancestor(exp.In) is None:
                return None
    left = False
    if join is not None:
        if not _plain_join(join):
            return None  # refused by the FROM analysis
        left = (join.args.get("side") or "").upper() == "LEFT"
        if left and join.args.get("on") is None:
            return None
    if not all(_plain_join(j) for j in inner.args.get("joins") or []):
        return None  # refused with its reason by derive()
    return inner, alias, left


#: One source of a row-level derived table: (inner alias, its columns in order, its new
#: alias, what it is, for messages).
_InnerSource = tuple[str, list[str], str, str]


def _inner_sources(inner: exp.Select, inner_joins: list[exp.Join], alias: str,
                   catalog: Catalog) -> list[_InnerSource] | None:
    """The derived table's sources, each with its new alias; None: not inlined (the FROM
    analysis of :func:`~dpsql.analyze.derived.derive` refuses it with its reason)."""
    sources: list[_InnerSource] = []
    for src in [inner.args["from_"].this, *(j.this for j in inner_joins)]:
        if isinstance(src, exp.Table):
            if not isinstance(src.this, exp.Identifier) or any(
                    v for k, v in src.args.items() if k not in ("this", "alias")):
                return None
            name = src.name.lower()
            if not catalog.has_table(name):
                return None  # UnknownTableError from the FROM analysis of derive()
            if src.args.get("alias") is not None and src.args["alias"].columns:
                return None
            order, inner_alias, what = list(catalog.table(name).columns), \
                (src.alias or name).lower(), f"table {name!r}"
        elif isinstance(src, exp.Subquery) and isinstance(src.this, exp.Select):
            order, inner_alias = _select_names(src), (src.alias or "").lower()
            what = f"derived table {inner_alias!r}"
        else:
            return None
        if any(inner_alias == x[0] for x in sources):
            return None  # the same alias twice: refused by the FROM analysis of derive()
        # one source takes the derived table's alias; several get "<alias>_<inner alias>"
        fresh = alias if not inner_joins else f"{alias}_{inner_alias}"
        if not SAFE_NAME.fullmatch(fresh):
            raise UnsupportedQueryError(
                f"derived table {alias[:40]!r} joins tables inside, which are written out as "
                "<alias>_<inner alias>; that name is over 128 characters: shorten them")
        sources.append((inner_alias, order, fresh, what))
    return sources


def _bind_inner(inner: exp.Select, alias: str, sources: list[_InnerSource]) -> None:
    """Qualifies every column inside with the new alias of the inner source it names.

    Names inside bind to the inner sources only: a reference to the outer query is
    refused (correlated derived tables are not supported).
    """
    by_alias = {x[0]: x for x in sources}
    for col in list(inner.find_all(exp.Column)):
        if col.find_ancestor(exp.Select) is not inner or isinstance(col.this, exp.Star):
            continue  # an IN subquery's own, or a star expanded below
        name = col.name.lower()
        if col.table:
            owner = by_alias.get(col.table.lower())
            if owner is None or col.args.get("db") or col.args.get("catalog"):
                raise UnsupportedQueryError(
                    f"derived table {alias!r} refers to {col.sql(dialect='duckdb')[:60]!r}, "
                    "which is not a column of its own FROM: a derived table may not read "
                    "the outer query")
            if name not in owner[1]:
                raise UnknownColumnError(
                    f"unknown column {col.name!r} in derived table {alias!r}; {owner[3]} "
                    "has: " + ", ".join(owner[1]))
        else:
            owners = [x for x in sources if name in x[1]]
            if len(owners) != 1:
                raise UnknownColumnError(
                    f"{'ambiguous' if owners else 'unknown'} column {col.name!r} in derived "
                    f"table {alias!r}" + (": qualify it" if owners else ""))
            owner = owners[0]
        col.replace(exp.column(name, table=owner[2]))


def _projected(node: exp.Subquery, inner: exp.Select, alias: str,
               sources: list[_InnerSource]) -> dict[str, exp.Expression | None]:
    """Select-list name -> the expression it projects (None for a name selected twice);
    stars expanded, the alias' column list applied."""
    projected: list[tuple[str | None, exp.Expression]] = []
    for item in inner.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                          and isinstance(item.this, exp.Star)):
            chosen = sources
            if isinstance(item, exp.Column):
                chosen = [x for x in sources if x[0] == item.table.lower()]
                if not chosen:
                    raise UnsupportedQueryError(
                        f"derived table {alias!r} selects {item.table}.*, which is not in "
                        "its own FROM")
            projected.extend((n, exp.column(n, table=x[2])) for x in chosen for n in x[1])
        elif isinstance(item, exp.Alias):
            projected.append((item.alias.lower(), item.this))
        elif isinstance(item, exp.Column):
            projected.append((item.name.lower(), item))
        else:
            projected.append((None, item))  # no name an outer query can write
    named = node.args["alias"].columns
    if named:
        if len(named) != len(projected):
            raise UnsupportedQueryError(
                f"derived table {alias!r} names {len(named)} columns but selects "
                f"{len(projected)}")
        projected = [(c.name.lower(), e) for c, (_, e) in zip(named, projected, strict=True)]
    columns: dict[str, exp.Expression | None] = {}
    for name, expression in projected:
        if name is not None:
            columns[name] = None if name in columns else expression
    return columns


def _renamed_sources(inner: exp.Select, inner_joins: list[exp.Join],
                     sources: list[_InnerSource]) -> tuple[exp.Expression, list[exp.Join]]:
    """The inner FROM table and joins, each source under its new alias."""

    def moved(src: exp.Expression, fresh: str) -> exp.Expression:
        out = src.copy()
        old = src.args.get("alias")
        out.set("alias", exp.TableAlias(
            this=exp.to_identifier(fresh),
            columns=[c.copy() for c in old.columns] if old is not None and old.columns
            else None))
        return out

    first = moved(inner.args["from_"].this, sources[0][2])
    joins = []
    for j, x in zip(inner_joins, sources[1:], strict=True):
        j = j.copy()  # its ON was requalified by _bind_inner
        j.set("this", moved(j.this, x[2]))
        joins.append(j)
    return first, joins


def _plain_join(join: exp.Join) -> bool:
    """An INNER, LEFT or comma join (the others are refused by the FROM analysis)."""
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    return side in ("", "LEFT") and kind in ("", "INNER", "OUTER") and not (
        join.args.get("using") or join.args.get("method"))


def _rebind(select: exp.Select, visible, found: dict[str, _RowDerived],
            room: int | None, max_nodes: int | None) -> None:
    """Binds the outer query's names as SQL does, before the derived tables vanish."""
    outputs: dict[str, exp.Expression] = {}
    # an output column without alias is named by its text, which must not change
    texts = [None if isinstance(e, exp.Alias | exp.Column) else e.sql(dialect="duckdb")
             for e in select.expressions]
    for item in select.expressions:
        if isinstance(item, exp.Alias):
            outputs[item.alias.lower()] = item.this
        elif isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
            outputs[item.name.lower()] = item
    for col in list(select.find_all(exp.Column)):
        if col.find_ancestor(exp.Select) is not select or isinstance(col.this, exp.Star):
            continue
        name = col.name.lower()
        if col.table:
            info = found.get(col.table.lower())
            if info is not None and not (col.args.get("db") or col.args.get("catalog")):
                room = _substitute(col, info, name, select, room, max_nodes)
            elif all(v[0] != col.table.lower() for v in visible):
                # e.g. a derived table's inner alias: not a name of this FROM
                raise UnknownTableError(f"table or alias {col.table!r} is not in FROM")
            continue
        owners = [v for v in visible if name in v[1]]
        # inner tables' columns the derived tables do not select: visible once written out
        shadowed = [i for i in found.values() if name in i.hidden]
        clause = col.find_ancestor(exp.Group, exp.Having, exp.Order, exp.Select)
        alias_ref = (isinstance(clause, exp.Having | exp.Order | exp.Group)
                     and col.find_ancestor(*AGGREGATES) is None and name in outputs)
        if not owners:
            if not shadowed:
                continue
            if alias_ref:
                raise UnsupportedQueryError(
                    f"{name!r} names an output column and also a column that derived "
                    f"table {shadowed[0].alias!r} reads but does not select; rename the "
                    "output column")
            raise UnknownColumnError(
                f"unknown column {col.name!r}: derived table {shadowed[0].alias!r} does not "
                "select it; its columns are: " + ", ".join(shadowed[0].columns))
        if len(owners) > 1:
            if any(o[2] is not None for o in owners) or shadowed:
                raise UnknownColumnError(
                    f"column {name!r} is ambiguous: qualify it ("
                    + " or ".join(f"{o[0]}.{name}" for o in owners) + ")")
            continue
        owner, _, info = owners[0]
        if info is None and not shadowed:
            continue  # binds as before
        if alias_ref and isinstance(clause, exp.Having | exp.Order):
            # SQL may read it as the output column: only when both readings agree
            target = outputs[name]
            if not (isinstance(target, exp.Column) and target.name.lower() == name
                    and (not target.table or target.table.lower() == owner)):
                raise UnsupportedQueryError(
                    f"{name!r} in {clause.key.upper()} names both an output column and a "
                    f"column of {owner!r}; qualify it ({owner}.{name}) or rename the "
                    "output column")
        if info is not None:
            room = _substitute(col, info, name, select, room, max_nodes)
        else:  # a column of a table left as it is, shadowed by a written-out one
            col.replace(exp.column(name, table=owner))
    for item, text in zip(list(select.expressions), texts, strict=True):
        if text is not None and item.sql(dialect="duckdb") != text:
            item.replace(exp.Alias(this=item.copy(), alias=exp.to_identifier(text)))


def _substitute(col: exp.Column, info: _RowDerived, name: str, select: exp.Select,
                room: int | None, max_nodes: int | None) -> int | None:
    """Replaces a reference to a derived column by the expression it projects."""
    if name not in info.columns:
        raise UnknownColumnError(
            f"unknown column {col.name!r} in derived table {info.alias!r}; its columns "
            "are: " + ", ".join(info.columns))
    expression = info.columns[name]
    if expression is None:
        raise UnknownColumnError(
            f"column {name!r} is ambiguous in derived table {info.alias!r}: it selects two "
            "columns of that name")
    if info.left and not isinstance(expression, exp.Column):
        raise UnsupportedQueryError(
            f"derived table {info.alias!r} is brought in by a LEFT JOIN, so its column "
            f"{name!r} is NULL where nothing matched, but its expression "
            f"{expression.sql(dialect='duckdb')[:60]!r} need not be: select plain columns "
            "in a LEFT-joined derived table, or compute the expression outside")
    if room is not None:
        if name not in info.sizes:
            info.sizes[name] = sum(1 for _ in expression.walk())
        room -= info.sizes[name]
        if room < 0:
            raise UnsupportedQueryError(
                f"with its derived tables written out, the query has more than {max_nodes} "
                "syntax nodes (max_nodes)")
    new = expression.copy()
    if not isinstance(new, exp.Column):
        new = exp.Paren(this=new)
    if col.parent is select and col.arg_key == "expressions":
        new = exp.Alias(this=new, alias=col.this.copy())  # keeps the output name
    col.replace(new)
    return room
