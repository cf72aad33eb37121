"""The FROM clause: which tables a query reads, how they join, and whose rows they are.

Every row of the joined relation must belong to exactly one user (or, with
``row_privacy``, be its own user), so that bounding each user's contribution *after*
the analyst's joins and filters bounds the sensitivity. The rules, each refused with
its reason when broken:

* **private ⋈ public** on any equality condition (INNER, or LEFT with the private
  side on the left). A public table carries no user: duplicating a private row through
  a non-unique public key only repeats that user's rows, which the per-user bounding
  absorbs. With ``row_privacy`` there is no per-user bounding to absorb it (each row is
  a user), so each public table must be joined after the private one on a key the
  database keeps unique and NOT NULL (:func:`_one_to_one_public_joins`).
* **private ⋈ private** only where both sides carry the *same* user: the ON condition
  equates their user keys, or follows the catalog's foreign-key path from one table to
  the other (``lineitem.l_orderkey = orders.o_orderkey``). Anything else (a self-join
  on another column, say) could pair rows of two users into one row. Such an equality
  counts only between columns of one catalog type (``'01' = 1`` would match several
  keys to one) and, in a LEFT JOIN's ON, only to link the table that join brings in
  (:func:`_same_user_equalities`).
* **Names by identity**: a derived table or CTE is a :class:`~dpsql.catalog.Table` with
  a fresh internal name (``__derived_<alias>``) and ``derived=True``: whatever its
  alias, it never stands for a catalog table in a foreign-key step and never inherits
  a database constraint.
* **Foreign-key paths**: a table whose user sits behind foreign keys gets its user id by
  joining along the catalog's path (hidden joins). Each referenced column must be
  unique *in the database* (a PRIMARY KEY or UNIQUE constraint, read from the backend,
  never trusted from the catalog): a duplicated key would attach one row to two users.
* No cross joins, no RIGHT/FULL joins (they would make rows without a user), no
  ``row_privacy`` table joined with another private table (its rows have no common
  user key), and a LEFT JOIN may bring in a private table only when its left side is
  private with the same user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.catalog import Catalog, Column, Table
from dpsql.errors import UnknownColumnError, UnknownTableError, UnsupportedQueryError


@dataclass
class Source:
    """One table of the FROM clause (or a hidden join along a foreign-key path)."""

    alias: str
    table: Table
    kind: str  # "from", "inner" or "left"
    on: exp.Expression | None = None
    hidden: bool = False
    uid: exp.Column | None = None
    #: A derived table's bounded SQL, and the catalog tables it reads.
    derived: exp.Subquery | None = None
    reads: list[Table] = field(default_factory=list)
    inner: Scope | None = None
    #: A derived table grouped by the user key alone: one row per user.
    per_user: bool = False
    #: (table, column) pairs a derived table's own joins need unique in the database.
    unique: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Scope:
    """The resolved FROM clause of one query."""

    sources: list[Source]
    uid: exp.Column | None = None
    #: (table, column) pairs that must be unique in the database.
    unique: list[tuple[str, str]] = field(default_factory=list)
    #: (alias, column) pairs whose value is the user id.
    uid_columns: set[tuple[str, str]] = field(default_factory=set)

    @property
    def single(self) -> bool:
        """One table and no joins: columns stay unqualified (the common case)."""
        return len(self.sources) == 1

    @property
    def private(self) -> list[Source]:
        return [s for s in self.sources if not s.table.public]

    @property
    def primary(self) -> Table:
        """The table whose contribution bounds (max_groups, max_rows) apply."""
        return self.private[0].table

    def source(self, alias: str) -> Source:
        for s in self.sources:
            if s.alias == alias:
                return s
        raise UnknownTableError(f"table or alias {alias!r} is not in FROM")

    def column(self, col: exp.Column) -> Column:
        """The catalog column a normalised column reference names.

        Columns of a derived table's own FROM clause are found in its inner scope.
        """
        if col.table and all(s.alias != col.table for s in self.sources):
            for s in self.sources:
                if s.inner is not None:
                    try:
                        return s.inner.column(col)
                    except (UnknownTableError, KeyError):
                        continue
        src = self.source(col.table) if col.table else self.sources[0]
        return src.table.column(col.name)

    def column_type(self, col: exp.Column) -> str:
        return self.column(col).type

    def is_uid(self, col: exp.Expression) -> bool:
        return isinstance(col, exp.Column) and (
            (col.table or self.sources[0].alias), col.name) in self.uid_columns

    def resolve(self, col: exp.Column) -> exp.Column | None:
        """Normalises a column reference; None if no table has the column."""
        name = col.name.lower()
        if col.table:
            if col.table.startswith("__"):  # dpsql's own hidden joins are not the analyst's
                raise UnknownTableError(f"table or alias {col.table!r} is not in FROM")
            src = self.source(col.table.lower())
            if not src.table.has_column(name):
                raise UnknownColumnError(
                    f"unknown column {col.name!r} in table {src.table.name!r}; its columns "
                    f"are: {', '.join(src.table.columns)}")
            return exp.column(name) if self.single else exp.column(name, table=src.alias)
        owners = [s for s in self.sources if not s.hidden and s.table.has_column(name)]
        if not owners:
            return None
        if len(owners) > 1:
            raise UnknownColumnError(
                f"column {name!r} is ambiguous: qualify it ("
                + " or ".join(f"{s.alias}.{name}" for s in owners) + ")")
        return exp.column(name) if self.single else exp.column(name, table=owners[0].alias)

    def from_clause(self) -> tuple[exp.Table, list[exp.Join]]:
        """The FROM table and joins of the statistics query, hidden path joins included."""
        first = self.sources[0]
        joins = []
        for s in self.sources[1:]:
            join = exp.Join(this=_table(s), on=s.on.copy())
            if s.kind == "left":
                join.set("side", "LEFT")
            joins.append(join)
        return _table(first), joins


def _table(s: Source) -> exp.Expression:
    if s.derived is not None:
        return s.derived.copy()
    table = exp.to_table(s.table.name)
    if s.alias != s.table.name:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(s.alias)))
    return table


#: Analyses a derived table of FROM: (its catalog table, its bounded SQL, its inner
#: scope, whether it has one row per user); :func:`dpsql.analyze.derived.derive`.
Derive = Callable[[exp.Subquery], tuple[Table, exp.Subquery, "Scope", bool]]


def build_scope(select: exp.Select, catalog: Catalog,
                unique: Callable[[str, str], bool] | None = None,
                derive: Derive | None = None) -> tuple[Scope, exp.Select]:
    """Resolves FROM and JOINs against the catalog and attaches the user id to rows.

    Tables listed with commas (``FROM a, b WHERE a.k = b.k``) are joined on the WHERE
    clause's equalities between them, which move into the join condition.

    ``unique(table, column)`` tells whether the database keeps a column unique and NOT
    NULL; without it no join to a public table can be proven one-to-one.

    ``derive`` analyses each derived table (a subquery in FROM); without it one is
    refused. :func:`dpsql.analyze.derived.scope_of` passes its own, the one way the
    analysis reads a FROM clause.

    Returns:
        The scope, and the SELECT with those equalities taken out of WHERE.
    """
    sources = [_source(select.args["from_"].this, catalog, "from", None, derive)]
    for join in select.args.get("joins") or []:
        sources.append(_join(join, catalog, derive))
    seen = set()
    for s in sources:
        if s.alias in seen:
            raise UnsupportedQueryError(f"table alias {s.alias!r} is used twice; rename one")
        seen.add(s.alias)
    scope = Scope(sources)
    for s in sources:
        scope.unique.extend(s.unique)
    if len(sources) == 1 and not sources[0].table.user_path:
        _single(scope)
        return scope, select
    select = _comma_joins(select, scope)
    for s in sources[1:]:
        s.on = _qualify_on(s.on, scope)
    _attach_users(scope, catalog, unique)
    return scope, select


def _comma_joins(select: exp.Select, scope: Scope) -> exp.Select:
    pending = [s for s in scope.sources[1:] if s.on is None]
    if not pending:
        return select
    select = select.copy()
    where = select.args.get("where")
    conjuncts = list(where.this.flatten()) if where and isinstance(where.this, exp.And) \
        else ([where.this] if where else [])
    kept = list(conjuncts)
    for s in pending:
        index = scope.sources.index(s)
        earlier = {x.alias for x in scope.sources[:index]}
        moved = []
        for conj in kept:
            c = conj.unnest()
            if not (isinstance(c, exp.EQ) and isinstance(c.this, exp.Column)
                    and isinstance(c.expression, exp.Column)):
                continue
            a, b = scope.resolve(c.this), scope.resolve(c.expression)
            if a is None or b is None:
                continue
            if {a.table, b.table} & {s.alias} and ({a.table, b.table} - {s.alias}) <= earlier \
                    and a.table != b.table:
                moved.append(conj)
        if not moved:
            raise UnsupportedQueryError(
                f"cross joins are not allowed: nothing in WHERE joins {s.alias!r} to the "
                "tables before it (they would pair every row of one user with every row "
                "of another); join ON keys")
        kept = [c for c in kept if all(c is not m for m in moved)]
        s.on = exp.and_(*(m.copy() for m in moved))
    if kept:
        select.set("where", exp.Where(this=exp.and_(*(k.copy() for k in kept))))
    else:
        select.set("where", None)
    return select


def _source(node: exp.Expression, catalog: Catalog, kind: str, on,
            derive: Derive | None = None) -> Source:
    if isinstance(node, exp.Subquery):
        if derive is None:
            raise UnsupportedQueryError("a subquery in FROM is not supported here")
        table, sql, inner, per_user = derive(node)
        alias = sql.alias.lower()  # the SQL's alias; table.name is a fresh internal name
        return Source(alias, table, kind, on, derived=sql,
                      reads=[s.table for s in inner.sources if s.derived is None]
                      + [t for s in inner.sources for t in s.reads], inner=inner,
                      per_user=per_user, unique=inner.unique)
    if not isinstance(node, exp.Table):
        raise UnsupportedQueryError("only tables and subqueries can be read in FROM")
    name = node.name.lower()
    if not catalog.has_table(name):
        raise UnknownTableError(
            f"unknown table {name!r}; the catalog has: {', '.join(sorted(catalog.tables))}")
    alias = (node.alias or name).lower()
    if alias.startswith("__") or name.startswith("__"):
        raise UnsupportedQueryError(f"aliases starting with '__' are reserved: {alias!r}")
    return Source(alias, catalog.table(name), kind, on)


def _join(join: exp.Join, catalog: Catalog, derive: Derive | None = None) -> Source:
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if kind == "CROSS" or (side and not join.args.get("on") and not join.args.get("using")):
        raise UnsupportedQueryError(
            "cross joins (a JOIN without ON, or tables separated by commas) are not allowed: "
            "they pair every row of one user with every row of another; join ON keys")
    if kind in ("SEMI", "ANTI") or side in ("RIGHT", "FULL"):
        raise UnsupportedQueryError(
            f"{side or kind} JOIN is not supported: use INNER or LEFT JOIN with the private "
            "table on the left")
    if kind not in ("", "INNER", "OUTER") or join.args.get("method"):
        raise UnsupportedQueryError(f"{kind or join.args.get('method')} JOIN is not supported")
    if join.args.get("on") is None and kind == "INNER":
        raise UnsupportedQueryError(
            "INNER JOIN without ON is a cross join, which is not allowed; join ON keys")
    on = join.args.get("on")
    if join.args.get("using"):
        raise UnsupportedQueryError("JOIN ... USING is not supported yet: write JOIN ... ON")
    return _source(join.this, catalog, "left" if side == "LEFT" else "inner", on, derive)


def _qualify_on(on: exp.Expression, scope: Scope) -> exp.Expression:
    on = on.copy()
    for col in list(on.find_all(exp.Column)):
        resolved = scope.resolve(col)
        if resolved is None:
            raise UnknownColumnError(f"unknown column {col.name!r} in a JOIN condition")
        col.replace(resolved)
    return on


def _single(scope: Scope) -> None:
    s = scope.sources[0]
    if s.table.public:
        raise UnsupportedQueryError(
            f"table {s.table.name!r} is public; dpsql answers queries over private tables")
    if isinstance(s.table.user_key, str):
        scope.uid = exp.column(s.table.user_key)
        scope.uid_columns.add((s.alias, s.table.user_key))
    elif s.table.user_path:
        raise UnsupportedQueryError(
            f"table {s.table.name!r} reaches its user through foreign keys; "
            "queries over it alone are answered via the multi-table path")


def _attach_users(scope: Scope, catalog: Catalog, unique=None) -> None:
    """Checks that every joined row belongs to one user, and finds that user's id.

    The joins are checked (:func:`_check_private_joins`), the private tables linked to
    one user (:func:`_link_users`), and the user id of every row read through hidden
    joins where a foreign-key path leads to it (:func:`_attach_user_ids`).
    """
    _check_private_joins(scope)
    if any(s.table.row_privacy for s in scope.private):
        _one_to_one_public_joins(scope, unique)
    via_path = _link_users(scope)
    _attach_user_ids(scope, catalog, via_path)


def _check_private_joins(scope: Scope) -> None:
    """Refuses FROM clauses whose rows cannot all belong to a user (module docstring)."""
    private = scope.private
    if not private:
        raise UnsupportedQueryError(
            "the query reads only public tables; dpsql answers queries over private tables")
    if any(s.table.row_privacy for s in private) and len(private) > 1:
        raise UnsupportedQueryError(
            "a row_privacy table cannot be joined with another private table: their rows "
            "share no user key")
    for s in scope.sources:
        if s.kind == "left" and not s.table.public:
            left = scope.sources[:scope.sources.index(s)]
            if not any(not x.table.public for x in left):
                raise UnsupportedQueryError(
                    f"LEFT JOIN brings in private table {s.table.name!r} with no private "
                    "table on its left: rows without a match would belong to no user")


def _link_users(scope: Scope) -> dict[str, Source]:
    """Proves that the private tables carry one user; refused otherwise.

    A union-find over the private sources that provably carry the same user (see
    :func:`_same_user_equalities` for which conditions count). Returns, per alias, the
    source through which its user id is read when a foreign-key step leads there.
    """
    private = scope.private
    parent = {s.alias: s.alias for s in private}

    def find(a):
        while parent[a] != a:
            a = parent[a]
        return a

    via_path: dict[str, Source] = {}

    def same_user(x: Source, cx: exp.Column, y: Source, cy: exp.Column) -> bool:
        """Whether ``x.cx = y.cy`` puts x's row and y's row with one user."""
        if isinstance(x.table.user_key, str) and isinstance(y.table.user_key, str) \
                and cx.name == x.table.user_key and cy.name == y.table.user_key:
            return True
        path = x.table.user_path
        # a foreign-key step names a catalog table: a derived table, whatever its
        # alias, is not that table
        if path and not y.table.derived and path[0][0] == cx.name \
                and path[0][1] == y.table.name and path[0][2] == cy.name:
            # the user id is read through y only where y is on every row of x: not
            # when y is LEFT-joined after x (all NULL where it has no match)
            if not (y.kind == "left" and scope.sources.index(y) > scope.sources.index(x)):
                via_path[x.alias] = y
            scope.unique.append((y.table.name, cy.name))
            return True
        return False

    for s, (ca, cb) in _same_user_equalities(scope):
        a, b = scope.source(ca.table), scope.source(cb.table)
        if s.kind != "left":
            for x, cx, y, cy in ((a, ca, b, cb), (b, cb, a, ca)):
                if same_user(x, cx, y, cy):
                    parent[find(x.alias)] = find(y.alias)
        elif find(s.alias) == s.alias and all(find(p.alias) != s.alias
                                               for p in private if p is not s):
            # a LEFT JOIN's condition links the table it brings in to one other table
            # (the first that matches), never two others through it
            other, co, cs = (b, cb, ca) if a is s else (a, ca, cb)
            if same_user(s, cs, other, co) or same_user(other, co, s, cs):
                parent[s.alias] = find(other.alias)
    roots = {find(s.alias) for s in private}
    if len(roots) > 1:
        names = ", ".join(s.alias for s in private)
        raise UnsupportedQueryError(
            f"the private tables {names} are joined without matching their users: join on "
            "the user key (e.g. a.pid = b.pid) or along the catalog's foreign-key path, so "
            "that no joined row mixes two users (a condition in a LEFT JOIN's ON links "
            "only the table that LEFT JOIN brings in)")
    return via_path


def _attach_user_ids(scope: Scope, catalog: Catalog, via_path: dict[str, Source]) -> None:
    """Sets the scope's user id, adding hidden joins along foreign-key paths.

    Each hidden step joins columns of one exact type, and its referenced column must be
    unique in the database (recorded in ``scope.unique``, checked by the engine).
    """
    hidden: list[Source] = []
    resolved: dict[str, exp.Column | None] = {}

    def uid_of(s: Source, depth: int = 0) -> exp.Column | None:
        if s.alias in resolved:
            return resolved[s.alias]
        if depth > len(scope.sources):
            raise UnsupportedQueryError("foreign-key paths form a cycle")
        if s.table.row_privacy:
            uid = None
        elif isinstance(s.table.user_key, str):
            uid = exp.column(s.table.user_key, table=s.alias)
        elif s.alias in via_path:
            uid = uid_of(via_path[s.alias], depth + 1)
        else:
            uid = _hidden_path(scope, catalog, s, hidden)
        resolved[s.alias] = uid
        return uid

    private = scope.private
    for s in private:
        uid_of(s)
        if isinstance(s.table.user_key, str):
            scope.uid_columns.add((s.alias, s.table.user_key))
    first = private[0]
    scope.uid = resolved[first.alias]
    if scope.uid is not None:
        scope.uid_columns.add((scope.uid.table, scope.uid.name))
    # hidden joins go right after the sources that need them
    ordered: list[Source] = []
    for s in scope.sources:
        ordered.append(s)
        ordered.extend(h for h in hidden if _needs(h, s, hidden))
    scope.sources = ordered


def _hidden_path(scope: Scope, catalog: Catalog, s: Source,
                 hidden: list[Source]) -> exp.Column:
    """The user id of ``s``'s rows, read through hidden joins along its foreign-key path
    (appended to ``hidden``)."""
    prev = s
    steps = s.table.user_path
    for col, ref_table, ref_col in steps[:-1]:
        alias = f"__u{len(hidden)}"
        target = catalog.table(ref_table)
        types = {prev.table.column(col).type, target.column(ref_col).type}
        if len(types) != 1 or not types <= set(EXACT_TYPES):
            raise UnsupportedQueryError(
                f"the foreign-key step {prev.table.name}.{col} -> {ref_table}."
                f"{ref_col} joins columns of types {' and '.join(sorted(types))}: "
                "a user is attached only through equal values of one exact type")
        on = exp.EQ(this=exp.column(col, table=prev.alias),
                    expression=exp.column(ref_col, table=alias))
        h = Source(alias, target, "left" if s.kind == "left" else "inner", on, hidden=True)
        hidden.append(h)
        scope.unique.append((target.name, ref_col))
        prev = h
    return exp.column(steps[-1][0], table=prev.alias)


def _same_user_equalities(scope: Scope):
    """(source, (a, b)): column equalities of ON conditions that may link two users' rows.

    * A conjunct of an INNER join's ON holds on every joined row.
    * A conjunct of a LEFT JOIN's ON holds only where that join found a match; where it
      did not, the table it brings in is all NULL and the other tables' rows stand
      alone. So such a conjunct may link *the table that LEFT JOIN brings in* to one
      table already linked, never two other tables to each other
      (``a JOIN b ON a.x = b.x LEFT JOIN p ON ... AND a.pid = b.pid`` proves nothing
      about a and b). LEFT joins come last, in order, after every INNER condition.
    * Only between columns of one catalog type: across types (``'01' = 1``) several
      values of one column would match one value of the other.
    """
    def typed(eq):
        return _same_exact_type(scope, *eq)

    for s in scope.sources[1:]:
        if s.kind != "left" and s.on is not None:
            for eq in column_equalities(s.on):
                a, b = (scope.source(c.table) for c in eq)
                if not (a.table.public or b.table.public or a is b) and typed(eq):
                    yield s, eq
    for s in scope.sources[1:]:
        if s.kind == "left" and s.on is not None and not s.table.public:
            for eq in column_equalities(s.on):
                a, b = (scope.source(c.table) for c in eq)
                if a.table.public or b.table.public or a is b or s not in (a, b) \
                        or not typed(eq):
                    continue
                yield s, eq


#: Catalog types whose equal values are one value: ``=`` between two columns of one of
#: these types matches exactly the identical values (no float rounding: 2^53 and
#: 2^53 + 1 are one DOUBLE; strings compare bytes, collated columns being refused).
EXACT_TYPES = ("int", "string", "date", "bool", "timestamp")


def _same_exact_type(scope: Scope, a: exp.Column, b: exp.Column) -> bool:
    try:
        ta, tb = scope.column_type(a), scope.column_type(b)
    except (KeyError, UnknownTableError):
        return False
    return ta == tb and ta in EXACT_TYPES


def _one_to_one_public_joins(scope: Scope, unique) -> None:
    """With ``row_privacy`` each row is a user: no join may repeat a row.

    A user-keyed row repeated by a public join stays that user's, and the per-user
    bounding absorbs it; a row_privacy row repeated is a user counted twice. So every
    public table must come after the private one, joined on ``p.c = x`` (a top-level
    conjunct of its ON) where ``p.c`` is unique and NOT NULL in the database: each row
    then meets at most one row of ``p``, by induction over the joins.
    """
    for s in scope.sources:
        if not s.table.public:
            continue
        if s.kind == "from":
            raise UnsupportedQueryError(
                "with a row_privacy table, name it first in FROM and join public tables "
                "to it: a public table first could repeat one person's row")
        proven = unique is not None and s.on is not None and any(
            mine.table == s.alias and other.table != s.alias and not s.table.derived
            and _same_exact_type(scope, mine, other) and unique(s.table.name, mine.name)
            for a, b in column_equalities(s.on) for mine, other in ((a, b), (b, a)))
        if not proven:
            raise UnsupportedQueryError(
                f"public table {s.table.name!r} is joined to a row_privacy table without a "
                "key that the database keeps unique (PRIMARY KEY or UNIQUE NOT NULL) in "
                "`ON <public>.<key> = ...`: one person's row could match several of its "
                "rows and be counted more than once")


def _needs(h: Source, s: Source, hidden: list[Source]) -> bool:
    """Whether hidden join ``h`` hangs (directly or through other hidden joins) off ``s``."""
    left = h.on.this.table
    if left == s.alias:
        return True
    parent = next((x for x in hidden if x.alias == left), None)
    return parent is not None and _needs(parent, s, hidden)


def column_equalities(on: exp.Expression) -> list[tuple[exp.Column, exp.Column]]:
    """Column = column equalities among the top-level conjuncts of a join condition."""
    out = []
    for conj in on.flatten() if isinstance(on, exp.And) else [on]:
        conj = conj.unnest()
        if isinstance(conj, exp.EQ) and isinstance(conj.this, exp.Column) \
                and isinstance(conj.expression, exp.Column):
            out.append((conj.this, conj.expression))
    return out
