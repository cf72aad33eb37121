"""Group keys: which public key combinations are released, and what is refused or noted
about them."""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.domains import Combinations, released_groups
from dpsql.analyze.plan import GroupKey
from dpsql.analyze.scope import Scope
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import Limits


def restrict_domains(keys: list[GroupKey], where: exp.Expression | None, scope: Scope,
                     limits: Limits, work: list[int]) -> Combinations | None:
    """The public key combinations rows passing WHERE and INNER JOIN ON can have.

    Evaluated on the keys' domains alone (:func:`dpsql.analyze.domains.released_groups`,
    which argues why that is sound); each key's domain shrinks to the values some
    released combination has. None: every combination of the domains is released.
    """
    conditions = _conjuncts(where)
    for s in scope.sources:
        if s.kind == "inner" and s.on is not None:  # a LEFT JOIN's ON filters nothing
            conditions += _conjuncts(s.on)
    left = {s.alias for s in scope.sources if s.kind == "left"}

    def outer(col: exp.Column) -> bool:
        # NULL-extended by a LEFT JOIN (or in a derived table's FROM, not traced here)
        return bool(left) and (col.table in left
                               or all(s.alias != col.table for s in scope.sources))

    groups = released_groups([(k.expr, k.domain) for k in keys], conditions,
                             scope.column, limits, work, outer)
    if groups is not None:
        for i, k in enumerate(keys):
            k.domain = groups.values(i)
    return groups


def check_user_keys(keys: list[GroupKey], scope: Scope) -> None:
    """Refuses GROUP BY the user key when the keys must pass partition selection.

    Every group of ``GROUP BY pid`` (or of ``pid`` with other keys) holds the rows of
    one user, and partition selection releases a key only when its noisy count of
    users clears a threshold above 1, so such a key appears with probability at most
    δ: the query would be charged and release nothing. Refused before the charge.

    **Privacy**: the decision reads the query (the key is a bare column) and the
    catalog (which column is a table's user key, and that the keys have no public
    domain), never the data. A user key with a public domain (an int column with
    bounds) is not refused: its keys are released from the domain, each with noise.
    """
    for k in keys:
        if not (isinstance(k.expr, exp.Column) and scope.is_uid(k.expr)):
            continue
        source = scope.source(k.expr.table) if k.expr.table else scope.sources[0]
        hint = "Group by a column many users share"
        if source.table.derived:
            where = f"derived table {source.alias!r}"
        else:
            where = f"table {source.table.name!r}"
            hint += (", or count per user in a derived table and group by the count, e.g. "
                     f"SELECT n, COUNT(*) AS users FROM (SELECT {k.expr.name}, COUNT(*) AS n "
                     f"FROM {source.table.name} GROUP BY {k.expr.name}) AS per_user "
                     "GROUP BY n")
        raise UnsupportedQueryError(
            f"GROUP BY {k.expr.sql(dialect='duckdb')} groups by the user key of {where}: "
            "every group holds one user's rows, and a group is released only when enough "
            "users share its key (partition selection), so no group could be released; "
            f"nothing was charged. {hint}")


def domain_notes(keys: list[GroupKey], scope: Scope,
                 groups: Combinations | None) -> list[str]:
    """Notes on keys released from an int or date column's bounds, and on WHERE narrowing
    them."""
    notes = []
    for k in keys:
        if k.domain is None or not isinstance(k.expr, exp.Column):
            continue
        col = scope.column(k.expr)
        if col.type == "int" and col.values is None and col.bounded:
            notes.append(
                f"the keys of {k.expr.sql(dialect='duckdb')} are the whole numbers of its "
                f"bounds [{col.lower}, {col.upper}] (a public domain, empty ones included); "
                "rows outside them are left out")
        if col.type == "date" and col.values is None and col.bounded:
            notes.append(
                f"the keys of {k.expr.sql(dialect='duckdb')} are the days of its bounds "
                f"[{col.lower}, {col.upper}] (a public domain, empty days included); rows "
                "outside them are left out")
    if groups is not None:
        notes.append(
            f"WHERE leaves {len(groups)} of the public key combinations, decided on the "
            "catalog's domains alone")
    return notes


def _conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND terms of a condition."""
    while isinstance(e, exp.Paren):
        e = e.this
    if e is None:
        return []
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]
