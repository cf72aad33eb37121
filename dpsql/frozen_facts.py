"""Conditions every row of a table meets, counted on data that cannot change, and
remembered per backend.

The declarations the owner makes beside a column (``values_only``: :mod:`dpsql.values_only`;
``in_bounds``: :mod:`dpsql.in_bounds`) let the rewrite leave out a step that would keep
every row as it is. dpsql does not take the owner's word for it: each such fact is a
condition over one table's own columns, and it holds when no row of the table fails it.

* **One count.** The rows failing each condition are counted in one query over the
  table (``COUNT(CASE WHEN COALESCE(cond, FALSE) THEN NULL ELSE 1 END)`` per
  condition): the engine's own comparison decides, as the step would, and NULL counts
  as failing.
* **Only on frozen data** (:meth:`~dpsql.backends.base.Backend.frozen_row`): a DuckDB
  file dpsql opened read-only or its own ``:memory:``, and base tables only (a view, or
  a table with a generated column, is computed afresh by every statement). Elsewhere
  nothing is proven and every step stays.
* **Remembered per backend**, since the data behind it cannot change; a count that
  failed (an error, a cancel is not one) is remembered as "not proven", or it would cost
  as much again before every charge. A backend that cannot count (its data may change)
  says so without reading anything, and that is not remembered. The memory is bounded
  (:data:`KEPT` facts, :data:`KEPT_CHARS` characters of their text, the least recently
  used forgotten first): the analyst chooses the conditions of public keys
  (:mod:`dpsql.public_keys`), even through free ``explain()`` calls. A false
  declaration goes to the owner's log, once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict

from sqlglot import exp

from dpsql.errors import QueryCancelled

log = logging.getLogger("dpsql.owner")

#: Facts remembered per backend, and the characters of their keys' text.
KEPT = 1024
KEPT_CHARS = 2**20

#: Per backend: (table, condition's SQL) -> how many rows fail it (None: the count
#: failed), least recently used first.
_known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Per backend: the keys whose failing count the owner's log has (declarations only,
#: as many as the catalog has).
_logged: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class _Memo(OrderedDict):
    """One backend's facts, bounded (:data:`KEPT`, :data:`KEPT_CHARS`)."""

    chars = 0

    def recall(self, key: tuple[str, str]) -> tuple[bool, int | None]:
        if key not in self:
            return False, None
        self.move_to_end(key)
        return True, self[key]

    def keep(self, key: tuple[str, str], count: int | None) -> None:
        if key not in self:
            self.chars += len(key[0]) + len(key[1])
        self[key] = count
        while self and (len(self) > KEPT or self.chars > KEPT_CHARS):
            old, _ = self.popitem(last=False)
            self.chars -= len(old[0]) + len(old[1])


def every_row(backend, table: str, conditions: list[exp.Expression], labels: list[str],
              kept: str, report: bool = True) -> list[bool]:
    """Whether each condition holds on every row of ``table`` (module docstring): from
    the backend's memory, or counted now, in one query for those not known yet.

    Args:
        labels: what each condition says, for the owner's log (``"people.seg in its
            values"``).
        kept: what stays where a condition fails (``"the domain filter"``).
        report: whether a condition that fails, or a count that fails, goes to the
            owner's log: yes for what the owner declared; no for a condition the
            analyst's query chose (a public key's narrowed domain:
            :mod:`dpsql.public_keys`), whose failing is no news to the owner.
    """
    # keyed by the text the engine runs (its own dialect's)
    dialect = getattr(backend, "dialect", None)
    keys = [(table, c.sql(dialect=dialect)) for c in conditions]
    counts: dict[tuple[str, str], int | None] = {}
    missing = {}
    with _LOCK:
        memo = _known.setdefault(backend, _Memo())
        for key, condition in zip(keys, conditions, strict=True):
            found, count = memo.recall(key)
            if found:
                counts[key] = count
            else:
                missing.setdefault(key, condition)
    if missing:  # counted outside the lock: a count reads the table
        new = _count(backend, table, list(missing.values()), kept, report)
        if new is None:  # this backend cannot count: nothing to remember
            new = [None] * len(missing)
        else:
            with _LOCK:
                for key, count in zip(missing, new, strict=True):
                    _known[backend].keep(key, count)
        counts.update(zip(missing, new, strict=True))
    if report:  # once per fact, whoever counted it first
        with _LOCK:
            logged = _logged.setdefault(backend, set())
            due = [(key, label) for key, label in zip(keys, labels, strict=True)
                   if (counts[key] or 0) > 0 and key not in logged]
            logged.update(key for key, _ in due)
        for key, label in due:
            log.warning("%s: %s row(s) do not hold; queries keep %s", label, counts[key],
                        kept)
    return [counts[key] == 0 for key in keys]


def bare_column(plan, expr, first_source: bool):
    """(table, column) of the catalog that ``expr``, a bare column, reads through a FROM
    or INNER source that is a catalog table itself (not a derived table, a hidden path
    join or a null-supplied side); None otherwise. The declarations checked here hold
    for such a column's every row, whatever else the query joins.

    An unqualified name is the FROM table's where ``first_source`` (a name only another
    source has then fails ``has_column``, one two sources have is refused as ambiguous),
    else only where the query reads one source.
    """
    if not isinstance(expr, exp.Column) or expr.args.get("db") or expr.args.get("catalog"):
        return None
    sources = plan.scope.sources
    if expr.table:
        source = next((s for s in sources if s.alias == expr.table), None)
    else:
        source = sources[0] if first_source or plan.scope.single else None
    if source is None or source.derived is not None or source.hidden \
            or source.kind not in ("from", "inner") or source.table.derived \
            or not source.table.has_column(expr.name):
        return None
    return source.table, source.table.column(expr.name)


def frozen(backend, table: str) -> bool:
    """Whether ``table``'s data cannot change under ``backend`` (a count over it is read;
    :meth:`~dpsql.backends.base.Backend.frozen_row`), so that its facts can be checked."""
    return backend.frozen_row(exp.select(exp.Count(this=exp.Star())).from_(
        exp.Table(this=exp.to_identifier(table, quoted=True)))) is not None


def _count(backend, table: str, conditions: list[exp.Expression], kept: str,
           report: bool) -> list | None:
    """Per condition, the rows of ``table`` failing it ([None, ...]: the count failed);
    None: the backend cannot count here (its data may change), which it says without
    reading anything."""
    try:
        row = backend.frozen_row(failing(table, conditions))
    except QueryCancelled:  # Ctrl-C or a cancel before the charge: the query stops
        raise
    except Exception:  # noqa: BLE001 - a choice of speed: the step is always sound
        if report:
            log.warning("the check of %s failed; queries keep %s", table, kept,
                        exc_info=True)
        return [None] * len(conditions)
    if row is None:
        return None
    return [int(n) for n in row]


def failing(table: str, conditions: list[exp.Expression]) -> exp.Select:
    """One row: per condition, how many of ``table``'s rows fail it (NULL fails, as WHERE
    drops it); the table's name quoted, never read as a function.

    >>> print(failing("t", [exp.condition("k IN (1, 2)")]).sql())
    SELECT COUNT(CASE WHEN COALESCE(k IN (1, 2), FALSE) THEN NULL ELSE 1 END) AS n0 FROM "t"
    """
    counts = [exp.alias_(exp.Count(this=exp.Case(
        ifs=[exp.If(this=exp.func("COALESCE", c.copy(), exp.false()), true=exp.Null())],
        default=exp.Literal.number(1))), f"n{i}") for i, c in enumerate(conditions)]
    return exp.select(*counts).from_(exp.Table(this=exp.to_identifier(table, quoted=True)))
