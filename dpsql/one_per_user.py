"""Group keys the owner says are one per user, checked on the data: the L0 window is
left out where it would keep every row.

The L0 step (:mod:`dpsql.rewrite.bound_groups`) keeps at most ``max_groups`` groups of
each user. Where every user of the data has at most that many groups it keeps every
row: it is the identity, and on resampled PUMS (1M people) it is the whole of the
query's cost over the floor, 1.4-1.6x. Person-level attributes (sex, race, year of
birth) have one value on all rows of a user, so a query grouped by them gives each
user one group. The owner says so in the catalog (``one_per_user: true`` on a column of
a table with its own ``user_key``); dpsql does not take the owner's word for it:

* **The check.** Before the charge, one query over the table counts, per declared
  column the query groups by, the users (non-NULL user key, as the per-user pass
  keeps them) whose rows do not all hold one value: ``MIN(c) < MAX(c)``, or some rows
  NULL and some not. The column is *proven* when the count is 0. ``<`` on an int,
  bool or date column (the only types the catalog admits for ``one_per_user``, and the
  only database types it accepts for them) is false only between identical values, so
  a proven column holds one identical value (or NULL) on all of a user's rows, and
  every deterministic function of it (the validator admits no volatile one) does too.
* **Where it holds.** The count is exact only while the table cannot change: a DuckDB
  file dpsql opened read-only or its own ``:memory:``, and a base table, not a view
  (:meth:`~dpsql.backends.base.Backend.frozen_row`). The result is remembered per
  backend for that reason. Anything that fails, on any backend, leaves the window in.
* **Which queries.** Every group key is a function of proven columns of the one source
  whose user key is the query's user id (``plan.uid``), a catalog table read as the
  FROM table or an INNER join. Each row of ``__per_user`` then holds that row's
  user and a key computed from values that user's rows all share, so a user has at
  most one row there, within any ``max_groups`` (at least 1). WHERE and joins only
  drop or repeat rows; they cannot give a row another value of the column.

**Nothing the analyst sees depends on the check.** The plan keeps ``bound_groups``:
the noise (``max_groups`` as the catalog says, never one because of the check), the
notes and the answer cache's comparisons read the plan as it was. ``Result.sql`` and
``explain()`` show the SQL with the window, the SQL the check would have run had it
failed (the engine keeps it as ``Prepared.sql``); the backend runs the same SQL
without it, which returns the same rows. A check that fails (a false declaration)
is the owner's to find, in the owner's log (``dpsql.owner``). What is left is time:
a query with the window is slower, and the check itself reads the table once per
backend. dpsql's model does not cover time (a backend's time depends on the data
everywhere); with the declaration, the columns whose check could show in it are the
ones the owner named.
"""

from __future__ import annotations

import logging
import weakref

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.errors import QueryCancelled

log = logging.getLogger("dpsql.owner")

#: Per backend, (table, user key, column) -> proven; the data behind a frozen backend never
#: changes, and a check that failed or could not run is not run again. Each backend
#: (each connection, each ``dpsql serve`` session) checks once: a table read per table
#: and set of columns, before its first such query's charge. The user key is part of the
#: fact: one backend may serve catalogs that name different users of one table (attack
#: review: a column one per person is not one per household).
_proven: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def window_needless(plan: Plan, backend) -> bool:
    """Whether the plan's L0 window would keep every row: every key reads only
    ``one_per_user`` columns the data proves (module docstring); checks what the backend
    has not checked yet. The SQL that runs without it is :mod:`dpsql.proven_run`'s."""
    columns = _needed(plan)
    if not columns:
        return False
    table, user_key = columns[0][0], columns[0][1]
    return all(_prove(backend, table, user_key, [c for _, _, c in columns]))


def check_declared(backend, table) -> dict[str, bool] | None:
    """Each ``one_per_user`` column of a catalog ``table`` and whether the data proves
    it (the owner's view: ``dpsql catalog validate -d``); None when the backend's data
    can change, so nothing is checked and every query keeps the window.

    >>> import tempfile, pathlib
    >>> from dpsql.backends.duckdb import DuckDBBackend
    >>> from dpsql.datasets import catalog_path, load_catalog, load_pums
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pums.duckdb"
    >>> load_pums(path)
    >>> backend = DuckDBBackend(path)
    >>> table = load_catalog(catalog_path("pums_dup")).table("pums_dup")
    >>> check_declared(backend, table)
    {'age': True, 'sex': True, 'educ': True, 'race': True, 'married': True}
    >>> backend.close()
    """
    columns = [c.name for c in table.columns.values() if c.one_per_user]
    # one row whatever the table holds: whether it is frozen, and a base table
    probe = exp.select(exp.Count(this=exp.Star())).from_(exp.to_table(table.name))
    if not columns or backend.frozen_row(probe) is None:
        return None
    return dict(zip(columns, _prove(backend, table.name, table.user_key, columns),
                    strict=True))


def _needed(plan: Plan) -> list[tuple[str, str, str]] | None:
    """(table, user key, column) for each column of the keys, all declared
    ``one_per_user`` in the user's own source; None where a key reads anything else."""
    if not plan.bound_groups or plan.uid is None or not plan.keys:
        return None
    scope = plan.scope
    source = scope.source(plan.uid.table) if plan.uid.table else scope.sources[0]
    table = source.table
    if source.derived is not None or table.derived or source.hidden \
            or source.kind not in ("from", "inner") or table.public \
            or not isinstance(table.user_key, str) or plan.uid.name != table.user_key:
        return None
    out = []
    for key in plan.keys:
        cols = list(key.expr.find_all(exp.Column))
        if not cols:
            return None
        for col in cols:
            if (col.table or scope.sources[0].alias) != source.alias \
                    or not table.has_column(col.name) \
                    or not table.column(col.name).one_per_user:
                return None
            out.append((table.name, table.user_key, table.column(col.name).name))
    return sorted(set(out))


def _prove(backend, table: str, user_key: str, columns: list[str]) -> list[bool]:
    """Whether each column has one value on all rows of each user, from the backend's
    memory or one query now (module docstring)."""
    known = _proven.setdefault(backend, {})
    missing = [c for c in columns if (table, user_key, c) not in known]
    if missing:
        try:
            row = backend.frozen_row(_check_query(table, user_key, missing))
        except QueryCancelled:  # Ctrl-C or a cancel before the charge: the query stops
            raise
        except Exception:  # noqa: BLE001 - a choice of speed: the window is always sound
            # remembered: a check that failed (the statement timeout) would cost as much
            # again before every later query's charge (attack review)
            log.warning("one_per_user: the check of %s failed; the L0 window stays",
                        table, exc_info=True)
            row = None
        if row is None:  # failed, or data that can change: so for this backend's life
            known.update(((table, user_key, c), False) for c in missing)
            row = ()
        for column, split in zip(missing, row, strict=False):
            fact = known[(table, user_key, column)] = split is None or int(split) == 0
            if not fact:
                log.warning("one_per_user: %s.%s holds more than one value for %s user(s)"
                            "; queries grouped by it keep the L0 window",
                            table, column, split)
    return [known[(table, user_key, c)] for c in columns]


def _check_query(table: str, user_key: str, columns: list[str]) -> exp.Select:
    """Per column, the number of users whose rows hold more than one value of it.

    >>> print(_check_query("pums", "pid", ["sex"]).sql())
    SELECT SUM(__v0) FROM (SELECT CASE WHEN MIN("sex") < MAX("sex") OR (COUNT("sex") > 0 AND \
COUNT("sex") < COUNT(*)) THEN 1 ELSE 0 END AS __v0 FROM pums WHERE NOT "pid" IS NULL GROUP BY \
"pid") AS __users
    """
    flags = []
    for i, name in enumerate(columns):
        col = exp.column(name, quoted=True)  # never a function: current_date, user
        split = exp.or_(
            exp.LT(this=exp.Min(this=col.copy()), expression=exp.Max(this=col.copy())),
            exp.paren(exp.and_(
                exp.GT(this=exp.Count(this=col.copy()), expression=exp.Literal.number(0)),
                exp.LT(this=exp.Count(this=col.copy()),
                       expression=exp.Count(this=exp.Star())))))
        flags.append(exp.alias_(exp.Case(ifs=[exp.If(this=split, true=exp.Literal.number(1))],
                                         default=exp.Literal.number(0)), f"__v{i}"))
    uid = exp.column(user_key, quoted=True)
    users = (exp.select(*flags).from_(exp.to_table(table))
             .where(exp.Not(this=exp.Is(this=uid, expression=exp.Null())))
             .group_by(uid.copy()))
    return exp.select(*(exp.Sum(this=exp.column(f"__v{i}")) for i in range(len(columns)))
                      ).from_(users.subquery("__users"))
