"""Group keys that the user determines: each user then reaches one group at most.

If every group key takes a single value on all rows of a user, that user's rows fall
into one group, so ``max_groups`` (L0) is 1 whatever the catalog says: the noise is
scaled for one group instead of ``max_groups`` and the rewrite needs no window to keep
a user's groups (the ``bound_groups`` pass is skipped). TPC-H's revenue per customer
nation (Q5, Q10) and the distribution of per-customer order counts (Q13) are such
queries.

A column is *determined* when it has one value on all rows of any one user, which
follows from:

1. **One row per user.** A private catalog table joined INNER (or first in FROM) whose
   user key is a PRIMARY KEY, or UNIQUE and NOT NULL, in the database (read from the
   backend, never trusted from the catalog; a derived table never inherits it, whatever
   its alias), or a derived table grouped by the user key alone. Every
   row of a user carries that one row, so all its columns are determined. (On the left
   of a LEFT JOIN a source would also qualify; on its right a user's rows could carry
   the row on some rows and NULL on others, so it does not.) Every private source of
   a query carries the same user as the others on every joined row (see
   :mod:`dpsql.analyze.scope`), so that one row is the user's own.
2. **Equal to a determined column.** A top-level ``a = b`` conjunct of WHERE or of an
   INNER JOIN's ON holds on every row that is aggregated; if ``a`` is determined, so is
   ``b``. Only between columns of one exact type (int, date, bool), where equal values
   are the same value: across types, or for floats and strings (collations), two
   different values can compare equal.
3. **A public table joined on a unique key.** A public table joined INNER on
   ``p.c = x`` with ``x`` determined and ``p.c`` unique in the database contributes the
   same row to every row of the user, so all its columns are determined. Joined LEFT,
   the same holds only when every other column its ON reads is ``p``'s own or
   determined: otherwise a row condition could give the user's rows ``p``'s row on
   some and NULL on others.

A group key whose columns are all determined is determined (it is a deterministic
function of them: the validator admits no volatile function). When every key is, the
plan uses ``max_groups = 1``. Rules 1 and 3 read uniqueness from the database through
the ``unique`` callback; without it only derived per-user tables count.

>>> from sqlglot import parse_one
>>> from dpsql.analyze.scope import build_scope
>>> from dpsql.datasets import load_catalog, catalog_path
>>> cat = load_catalog(catalog_path("tpch"))
>>> sql = ("SELECT n_name, COUNT(*) FROM customer JOIN orders ON c_custkey = o_custkey "
...        "JOIN nation ON c_nationkey = n_nationkey GROUP BY n_name")
>>> scope, select = build_scope(parse_one(sql), cat)
>>> unique = lambda table, column: column in ("c_custkey", "n_nationkey")  # in the database
>>> sorted(c for a, c in determined_columns(scope, None, unique) if a == "nation")
['n_comment', 'n_name', 'n_nationkey', 'n_regionkey']
>>> ("orders", "o_orderpriority") in determined_columns(scope, None, unique)
False
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.analyze.scope import Scope, Source, column_equalities
from dpsql.errors import DpsqlError

#: Types whose equal values are identical, so equality passes determination on.
_EXACT_TYPES = ("int", "date", "bool")

Unique = Callable[[str, str], bool]


def determined_columns(scope: Scope, where: exp.Expression | None,
                       unique: Unique | None) -> set[tuple[str, str]]:
    """The (source alias, column) pairs that have one value on all rows of a user."""
    found: set[tuple[str, str]] = set()
    for s in scope.sources:
        if _one_row_per_user(s, unique):
            found |= _all_columns(s)
    if not found:
        return found
    equalities = [eq for s in scope.sources if s.kind in ("from", "inner") and s.on is not None
                  for eq in _equalities(s.on, scope)]
    if where is not None:
        equalities += _equalities(where, scope)
    public = [s for s in scope.sources if s.table.public and s.on is not None]
    changed = True
    while changed:
        changed = False
        for a, b in equalities:
            for x, y in ((a, b), (b, a)):
                if x in found and y not in found:
                    found.add(y)
                    changed = True
        for p in list(public):
            if unique is not None and not p.table.derived and _constant_on(p, scope, found) \
                    and any(mine[0] == p.alias and other in found
                            and unique(p.table.name, mine[1])
                            for a, b in _equalities(p.on, scope)
                            for mine, other in ((a, b), (b, a))):
                found |= _all_columns(p)
                public.remove(p)
                changed = True
    return found


def key_is_determined(expr: exp.Expression, scope: Scope,
                      found: set[tuple[str, str]]) -> bool:
    """Whether a group key is a function of determined columns only."""
    columns = list(expr.find_all(exp.Column))
    return bool(columns) and all(_ref(c, scope) in found for c in columns)


def _constant_on(p: Source, scope: Scope, found: set[tuple[str, str]]) -> bool:
    """Whether every column of ``p``'s ON is ``p``'s own or already determined.

    For a LEFT JOIN the match decides between ``p``'s row and NULL: a condition on any
    other column (``LEFT JOIN place l ON l.id = p.home AND p.x > 5``) could pick the row
    on some of a user's rows and NULL on others, two values for one user. An INNER
    join's condition only filters rows, so it may read anything.
    """
    if p.kind != "left":
        return True
    return all(c.table == p.alias or _ref(c, scope) in found for c in p.on.find_all(exp.Column))


def _one_row_per_user(s: Source, unique: Unique | None) -> bool:
    if s.table.public or s.hidden or s.kind not in ("from", "inner"):
        return False
    if s.derived is not None or s.table.derived:
        return s.per_user
    return (isinstance(s.table.user_key, str) and unique is not None
            and unique(s.table.name, s.table.user_key))


def _all_columns(s: Source) -> set[tuple[str, str]]:
    return {(s.alias, c) for c in s.table.columns}


def _ref(col: exp.Column, scope: Scope) -> tuple[str, str]:
    return (col.table or scope.sources[0].alias, col.name)


def _equalities(cond: exp.Expression, scope: Scope) -> list[tuple]:
    """``a = b`` conjuncts between two columns of one exact type."""
    out = []
    for a, b in column_equalities(cond):
        try:
            types = {scope.column_type(a), scope.column_type(b)}
        except (KeyError, DpsqlError):  # not a column of the query: no conclusion
            continue
        if len(types) == 1 and types <= set(_EXACT_TYPES):
            out.append((_ref(a, scope), _ref(b, scope)))
    return out
