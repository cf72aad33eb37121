"""The owner's records: budgets (set, seeded, granted) and the data sets' bindings to
their databases (a mixin of :class:`dpsql.ledger.Ledger`).

A budget row and a binding row each carry a MAC and are named, by their MAC's first
128 bits, in the head record: a row removed, added or put back from an older copy does
not match it (:mod:`dpsql.ledger.chain`).
"""

from __future__ import annotations

import json

from dpsql.errors import LedgerError
from dpsql.ledger.identity import _same_database, _shown_identity
from dpsql.ledger.records import _hk, _tag
from dpsql.ledger.settings import ALL, _log
from dpsql.ledger.values import (
    _check_accountant,
    _check_extra,
    check_analyst,
    check_budget,
    check_dataset,
)
from dpsql.text import escape


class Budgets:
    """Budgets and bindings (a mixin of :class:`dpsql.ledger.Ledger`)."""

    def _budget_row(self, db, dataset: str, analyst: str):
        row = db.execute(
            "SELECT dataset, analyst, epsilon, delta, accountant, source, mac FROM "
            f"{self._p}budgets WHERE dataset = ? AND analyst = ?", (dataset, analyst)
        ).fetchone()
        if row is None:
            self._match_head(_hk("b", dataset, analyst), None,
                             f"the budget of {dataset!r}/{analyst!r}")
            return None
        self._checked_once(repr(tuple(row)), lambda: self._check_budget_row(row, head=False))
        self._match_head(_hk("b", dataset, analyst), _tag(row[-1]),
                         f"the budget of {dataset!r}/{analyst!r}")
        return (row[2], row[3]), row[4]

    def _write_budget(self, db, dataset, analyst, total, accountant, source,
                      replace: bool) -> None:
        mac = self._mac("budget", dataset, analyst, total[0], total[1], accountant, source)
        if replace:
            db.execute(f"DELETE FROM {self._p}budgets WHERE dataset = ? AND analyst = ?",
                       (dataset, analyst))
        db.execute(f"INSERT INTO {self._p}budgets VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (dataset, analyst, total[0], total[1], accountant, source, self._stamp(), mac))
        self._head_set(_hk("b", dataset, analyst), _tag(mac))

    def _charged(self, db, dataset: str) -> bool:
        return db.execute(f"SELECT 1 FROM {self._p}totals WHERE dataset = ? AND analyst = ?",
                          (dataset, ALL)).fetchone() is not None

    def ensure_budget(self, dataset: str, total: tuple[float, float],
                      analyst: str = ALL, source: str = "catalog",
                      accountant: str = "basic") -> None:
        """Records a budget unless one is already set (the owner's, or an earlier seed)."""
        total = check_budget(total)
        _check_accountant(accountant, total)
        if analyst != ALL:
            check_analyst(analyst)
        with self._tx() as db:
            if self._budget_row(db, dataset, analyst) is None:
                self._write_budget(db, dataset, analyst, total, accountant, source, False)

    def set_budget(self, dataset: str, total: tuple[float, float], analyst: str = ALL,
                   accountant: str | None = None) -> None:
        """Owner command: sets a total (data set when analyst is ``*``) outright.

        Args:
            accountant: ``"basic"`` or ``"zcdp"`` (data-set totals only); None keeps the
                data set's (``"basic"`` for a new one). It cannot change once the data
                set has a charge (the admission rule would change mid-sequence).
        """
        total = check_budget(total)
        check_dataset(dataset)
        if analyst != ALL:
            check_analyst(analyst, "--analyst")
        with self._tx() as db:
            old = self._budget_row(db, dataset, ALL)
            current = old[1] if old else "basic"
            if analyst != ALL:
                accountant = "basic"
            elif accountant is None:
                accountant = current
            elif accountant != current and self._charged(db, dataset):
                raise LedgerError(
                    f"data set {dataset!r} already has charges admitted by the {current!r} "
                    "accountant; its accountant cannot change (see dpsql.accounting)")
            _check_accountant(accountant, total if analyst == ALL else (1.0, 0.5))
            self._write_budget(db, dataset, analyst, total, accountant, "owner", True)

    def grant(self, dataset: str, extra: tuple[float, float], analyst: str = ALL) -> None:
        """Owner command: raises a total by ``extra``."""
        extra = _check_extra(extra)
        if analyst != ALL:
            check_analyst(analyst, "--analyst")
        with self._tx() as db:
            row = self._budget_row(db, dataset, analyst)
            if row is None:
                raise LedgerError(f"no budget set for data set {dataset!r}, analyst "
                                  f"{analyst!r}; use set first")
            total = check_budget((row[0][0] + extra[0], row[0][1] + extra[1]))
            self._write_budget(db, dataset, analyst, total, row[1], "owner", True)

    def budgets(self, dataset: str | None = None) -> list[tuple]:
        """(dataset, analyst, epsilon, delta, source) rows, sorted."""
        query = f"SELECT dataset, analyst, epsilon, delta, source FROM {self._p}budgets"
        args: tuple = ()
        if dataset is not None:
            query += " WHERE dataset = ?"
            args = (dataset,)
        with self._tx(write=False, settle=False) as db:
            self._check_small_tables()
            return [tuple(r) for r in db.execute(query + " ORDER BY dataset, analyst", args)]

    def accountant(self, dataset: str) -> str:
        """The data set's accountant (``"basic"`` when it has no total yet)."""
        with self._tx(write=False, settle=False) as db:
            row = self._budget_row(db, dataset, ALL)
        return row[1] if row else "basic"

    # -- data sets and databases --------------------------------------------------------

    def bind(self, dataset: str, identity: dict | None, rebind: bool = False) -> None:
        """Binds ``dataset`` to its database, or checks the binding (see the module doc).

        Args:
            identity: from :func:`database_identity`; None (an in-memory database) binds
                nothing.
            rebind: the owner's say-so that the data set now lives in this database.

        Raises:
            LedgerError: the data set belongs to another database.
        """
        if identity is None:
            return
        with self._tx() as db:
            row = db.execute(f"SELECT db, mac FROM {self._p}bindings WHERE dataset = ?",
                             (dataset,)).fetchone()
            if row is None:
                self._match_head(_hk("g", dataset), None, f"the binding of {dataset!r}")
            else:
                self._check_binding_row(dataset, row[0], row[1])
            if row is not None and not rebind:
                old = json.loads(row[0])
                if _same_database(old, identity):
                    if old == identity:
                        return
                    _log.warning("ledger %s: data set %s: database %s is now %s (same %s)",
                                 escape(self.path), escape(dataset),
                                 escape(json.dumps(old)), escape(json.dumps(identity)),
                                 "path" if old.get("path") == identity.get("path") else "file")
                else:
                    raise LedgerError(
                        f"data set {dataset!r} in ledger {self.path!r} belongs to database "
                        f"{_shown_identity(old)!r}, not {_shown_identity(identity)!r}: two "
                        "databases never share a budget by accident; give this database its "
                        "own data set ('dataset:' in its catalog) or its own ledger, or, if "
                        "the database moved, the owner runs dpsql budget rebind")
            text = json.dumps(identity, sort_keys=True)
            db.execute(f"DELETE FROM {self._p}bindings WHERE dataset = ?", (dataset,))
            mac = self._mac("binding", dataset, text)
            db.execute(f"INSERT INTO {self._p}bindings VALUES (?, ?, ?, ?)",
                       (dataset, text, self._stamp(), mac))
            self._head_set(_hk("g", dataset), _tag(mac))

    def bindings(self) -> dict[str, dict]:
        with self._tx(write=False, settle=False) as db:
            self._check_small_tables()
            return {ds: json.loads(text) for ds, text in
                    db.execute(f"SELECT dataset, db FROM {self._p}bindings").fetchall()}

