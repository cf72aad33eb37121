"""Charging: admission, the charge record, the running totals, refusals and outcomes
(a mixin of :class:`dpsql.ledger.Ledger`).

**Charge before release.** :meth:`Charging.charge` checks that the query fits and
records it in one write transaction, before the backend reads any data: the admission
check (every limit against the running totals, :meth:`Charging._admission`), the entry
(linked into the chain), the two running totals and the head record are written under
one lock and committed together, so two queries can never both spend the last of a
budget, and a refused query charges nothing (its refusal is logged at cost 0).

**One durable commit per query.** A query's path through the ledger is that one
transaction holding the charge lock, committed durably before any data is read; after
execution its outcome (:meth:`Charging.finish`) is queued and written by the next
transaction this connection writes, normally the next query's charge, or within
:data:`~dpsql.ledger.outcomes.SETTLE_AFTER` seconds by a short transaction of its own
(:mod:`dpsql.ledger.outcomes` says when, and why a lost outcome costs no privacy). An
outcome that stores an answer for the answer cache is written before the call returns.
The outcome needs none of the charge's checks: it changes no budget, running total or
binding, nor the head record (which does not cover outcomes: each outcome's MAC binds
it to its entry's hash), and it names its entry by id *and* by the hash this
connection committed, so on a ledger replaced or rewound under the connection it
matches no row and is not written (keyed, the hash cannot be forged); the next charge's
checks refuse such a ledger. On PostgreSQL its own
transaction takes no charge lock at all (it updates one ``entries`` row; chargers wait
only for the id row); on SQLite it holds the file's write lock for its UPDATEs and
commit; neither holds anything across execution.

*Why the outcome is no longer committed on its own before the answer is returned*
(until this version it was: two durable commits a query): the privacy guarantee rests
on the charge alone, and the second commit doubled the ledger's share of a small
query's time (about 0.8 ms of fsyncs on this project's machines). What it bought, an
``answered`` outcome that survives a crash in the instant after the answer, costs no
privacy when lost: the entry stays ``charged`` (outcome unknown). A cached answer keeps
its own commit before the call returns: what the cache promises (the same answer to
any connection, free; the owner's clear) depends on it.
"""

from __future__ import annotations

from typing import Any

from dpsql.accounting import NOTHING, Accounting, Cost, Spent
from dpsql.errors import BudgetExhaustedError, LedgerError
from dpsql.ledger.records import _hk, _sha, _storable, _tag
from dpsql.ledger.schema import _ENTRY_COLUMNS
from dpsql.ledger.settings import ALL, CHARGED_SQL_KEPT, SQL_KEPT, _log
from dpsql.ledger.values import Running, _check_cost
from dpsql.text import escape


class Charging:
    """Charges, refusals and outcomes (a mixin of :class:`dpsql.ledger.Ledger`)."""

    def _totals_row(self, db, dataset: str, analyst: str, seen: dict | None = None
                    ) -> tuple | None:
        """The running total of (dataset, analyst), its MAC and its place in the head
        checked; ``seen`` keeps what this transaction already read and checked (the
        charge holds the write lock throughout, so it is still the row)."""
        if seen is not None and (dataset, analyst) in seen:
            return seen[(dataset, analyst)]
        out = self._read_totals_row(db, dataset, analyst)
        if seen is not None:
            seen[(dataset, analyst)] = out
        return out

    def _read_totals_row(self, db, dataset: str, analyst: str) -> tuple | None:
        row = db.execute(
            "SELECT epsilon, delta, rho, rho_delta, n, mac FROM "
            f"{self._p}totals WHERE dataset = ? AND analyst = ?", (dataset, analyst)
        ).fetchone()
        key = _hk("t", dataset, analyst)
        if row is None:
            self._match_head(key, None, f"the running total of {dataset!r}/{analyst!r}")
            return None
        self._checked_once(repr((dataset, analyst, *row)), lambda: self._check_totals_row(
            dataset, analyst, tuple(row[:5]), row[5]))
        self._match_head(key, _tag(row[5]), f"the running total of {dataset!r}/{analyst!r}")
        return tuple(row[:5])

    def _spent(self, db, dataset: str, analyst: str, seen: dict | None = None) -> Spent:
        row = self._totals_row(db, dataset, analyst, seen)
        return NOTHING if row is None else Spent((row[0], row[1]), row[2], row[3])

    def _add(self, db, dataset: str, analyst: str, parts: tuple,
             seen: dict | None = None) -> None:
        old = self._totals_row(db, dataset, analyst, seen)
        if seen is not None:
            seen.pop((dataset, analyst), None)  # written below: read it again if asked
        if old is None:
            new = (*(0.0 + x for x in parts), 1)
            mac = self._mac("totals", dataset, analyst, *new)
            db.execute(f"INSERT INTO {self._p}totals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (dataset, analyst, *new, mac))
        else:
            new = (old[0] + parts[0], old[1] + parts[1], old[2] + parts[2],
                   old[3] + parts[3], old[4] + 1)
            mac = self._mac("totals", dataset, analyst, *new)
            db.execute(f"UPDATE {self._p}totals SET epsilon = ?, delta = ?, rho = ?, "
                       "rho_delta = ?, n = ?, mac = ? WHERE dataset = ? AND analyst = ?",
                       (*new, mac, dataset, analyst))
        self._remember_checked(repr((dataset, analyst, *new, mac)))
        self._head_set(_hk("t", dataset, analyst), _tag(mac))

    def _append(self, db, dataset: str, analyst: str, kind: str, parts: tuple, sql: str,
                keep: int, outcome: str, detail: str | None) -> int:
        # the newest entry was checked against the head when the transaction began
        last_id, prev = self._head["id"], self._head["hash"]
        eid, t = last_id + 1, self._stamp()
        sql = sql if isinstance(sql, str) else repr(sql)
        sql_hash = _sha(sql)
        stored = _storable(sql[:keep])
        detail = None if detail is None else _storable(detail[:1000])
        h = self._mac("entry", eid, t, dataset, analyst, kind, *parts, sql_hash, len(sql),
                      _sha(stored), prev)
        db.execute(f"INSERT INTO {self._p}entries ({_ENTRY_COLUMNS}) VALUES "
                   "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (eid, t, dataset, analyst, kind, *parts, stored, sql_hash, len(sql),
                    outcome, detail, self._mac("outcome", eid, h, outcome, detail), prev, h))
        self._head["id"], self._head["hash"] = eid, h
        self._head_dirty = True
        return eid

    def _admission(self, db, dataset: str, analyst: str, cost: Cost,
                   cap: tuple[tuple[float, float], Running] | None,
                   seen: dict | None = None) -> str | None:
        """Why ``cost`` does not fit now (None: it fits), read in the caller's transaction.

        The one admission rule (its limits read by :meth:`_limits`, judged by
        :func:`_verdict`), for the charge (inside its write transaction, under the
        lock: there it decides) and for the early refusal (a read,
        :meth:`dpsql.ledger.reports.BudgetView.refusal`): every limit in force (the data
        set's total, the analyst's own total when the owner set one, the connection's
        cap) must still fit what was spent plus ``cost``, under the data set's
        accountant. It reads a few rows whatever the ledger's age.
        """
        limits = self._limits(db, dataset, analyst, seen)
        if limits is None:
            return f"no budget is set for data set {dataset!r}"
        return _verdict(*limits, cost, cap)

    def _limits(self, db, dataset: str, analyst: str, seen: dict | None
                ) -> tuple[str, list[tuple[str, tuple, Spent]]] | None:
        """The data set's accountant and its limits in force, each (name, total, spent
        so far), read in the caller's transaction; None: the data set has no total."""
        base = self._budget_row(db, dataset, ALL)
        if base is None:
            return None
        dataset_total, accountant = base
        checks = [("data set", dataset_total, self._spent(db, dataset, ALL, seen))]
        own = self._budget_row(db, dataset, analyst) if analyst != ALL else None
        if own is not None:
            checks.append((f"analyst {analyst!r}", own[0],
                           self._spent(db, dataset, analyst, seen)))
        return accountant, checks

    def fits(self, dataset: str, analyst: str, cost: Cost,
             cap: tuple[tuple[float, float], Running] | None = None) -> bool:
        """Whether ``cost`` fits the limits as this connection's last charge on
        (``dataset``, ``analyst``) left them, the cap as it is now; no I/O.

        Only a hint, for skipping the early refusal's read: what another connection
        spent since, or a total the owner lowered, is not seen, so True may be wrong;
        the charge reads and decides, atomically, and refuses what does not fit then.
        False also where nothing is remembered. Each charge's hint serves one query:
        one that stops before its charge (refused for another reason) leaves the next
        to read (attack review: a hint kept past such queries let every later query
        of an analyst whose budget ran out elsewhere be bound before its refusal).
        """
        known = self._admitted.pop((dataset, analyst), None)
        return known is not None and _verdict(*known, cost, cap) is None

    def charge(self, dataset: str, analyst: str, cost: Cost, sql: str,
               cap: tuple[tuple[float, float], Running] | None = None) -> int:
        """Checks and records ``cost`` atomically; returns the charge's id.

        One write transaction under the ledger's lock: the admission check
        (:meth:`_admission`), the entry linked into the chain, the two running totals
        and the head record, committed (durably) together before any data is read. Its
        time does not depend on how many charges came before.

        Args:
            cap: an extra (total, charges so far) limit, e.g. a connection's own budget.

        Raises:
            BudgetExhaustedError: the cost does not fit (nothing charged; the refusal
                is logged).
            LedgerError: the ledger cannot record it (nothing charged, no data read).
        """
        parts = _check_cost(cost)
        with self._tx() as db:
            seen: dict = {}  # running totals read (and checked) in this transaction
            limits = self._limits(db, dataset, analyst, seen)
            reason = f"no budget is set for data set {dataset!r}" if limits is None \
                else _verdict(*limits, cost, cap)
            if reason is not None:
                self._store_refusal(db, dataset, analyst, sql,
                                    "BudgetExhaustedError: " + reason)
            else:
                eid = self._append(db, dataset, analyst, "charge", parts, sql,
                                   CHARGED_SQL_KEPT, "charged", None)
                entry_hash = self._head["hash"]
                self._add(db, dataset, analyst, parts, seen)
                self._add(db, dataset, ALL, parts, seen)
                if self._checkpoint_due(eid):
                    self._advance_checkpoint(db)
        if reason is not None:
            self._admitted.pop((dataset, analyst), None)
            raise BudgetExhaustedError(reason)
        accountant, checks = limits
        self._admitted[dataset, analyst] = (
            accountant, [(name, total, spent.plus(cost)) for name, total, spent in checks])
        self._pending.remember(eid, entry_hash)  # committed: its outcome may name it
        if cap is not None:
            cap[1].add(cost)
        return eid

    def _store_refusal(self, db, dataset: str, analyst: str, sql: Any, detail: str) -> None:
        row = db.execute(f"SELECT stored, dropped FROM {self._p}refusal_counts WHERE "
                         "dataset = ? AND analyst = ?", (dataset, analyst)).fetchone()
        key = _hk("r", dataset, analyst)
        self._match_head(key, None if row is None else list(row),
                         f"the refusal count of {dataset!r}/{analyst!r}")
        stored, dropped = row if row else (0, 0)
        if stored < self.refusal_cap:
            self._append(db, dataset, analyst, "refusal", (0.0, 0.0, 0.0, 0.0),
                         sql if isinstance(sql, str) else repr(sql), SQL_KEPT, "refused",
                         detail)
            stored += 1
        else:
            dropped += 1
        db.execute(f"DELETE FROM {self._p}refusal_counts WHERE dataset = ? AND analyst = ?",
                   (dataset, analyst))
        db.execute(f"INSERT INTO {self._p}refusal_counts VALUES (?, ?, ?, ?)",
                   (dataset, analyst, stored, dropped))
        self._head_set(key, [stored, dropped])

    def finish(self, charge_id: int, outcome: str, detail: str | None = None,
               also=None) -> None:
        """Marks a charged query ``answered``, ``failed`` or ``cancelled`` (Ctrl-C).

        The outcome is queued and written with this connection's next write (see the
        module docstring and :mod:`dpsql.ledger.outcomes`); this call does no I/O,
        unless it stores an answer for the answer cache (``also``), which is written
        before it returns. The charge itself stays whatever happens: an outcome that
        cannot be written (a full disk, a lock held too long, a charge missing from a
        replaced ledger) goes to the owner's log. A charge this connection did not make
        (or made too long ago to remember its hash) is finished under the full checks.

        Args:
            also: ``also(db, prefix, mac)`` writes in the outcome's transaction (the
                answer cache stores the released answer with its outcome; its ``keys``
                attribute names the keys it stores); its database errors are the
                outcome's, and it is undone when the outcome is not written.
        """
        assert outcome in ("answered", "failed", "cancelled")
        self._pending.add(charge_id, outcome, detail, also, self.settle)
        if also is not None:
            # a released answer for the cache is durable before the call returns, as
            # the outcome was before (dpsql.ledger.outcomes: why it is not queued)
            self.settle()

    def refuse(self, dataset: str, analyst: str, sql: str, detail: str) -> None:
        """Logs a query refused before any data was read (it costs nothing).

        Never raises for the ledger's own trouble: the query is refused either way, and
        a failure to log it goes to the owner's log.
        """
        try:
            with self._tx() as db:
                self._store_refusal(db, dataset, analyst, sql, detail)
        except LedgerError as exc:
            _log.error("ledger %s: a refusal could not be logged: %s", escape(self.path),
                       escape(str(exc)))


def _verdict(accountant: str, checks: list[tuple[str, tuple, Spent]], cost: Cost,
             cap: tuple[tuple[float, float], Running] | None) -> str | None:
    """Why ``cost`` does not fit the limits ``checks`` (each (name, total, spent so
    far)) and the connection's ``cap`` under ``accountant``; None: it fits."""
    if cap is not None:
        checks = [*checks, ("connection", cap[0], cap[1].spent)]
    for name, total, so_far in checks:
        acc = Accounting(total, accountant)
        if not acc.fits(so_far.plus(cost)):
            left = acc.remaining(so_far)
            return (f"query needs epsilon={cost.epsilon:g}, delta={cost.delta:g} "
                    f"but the {name} budget has only epsilon={left[0]:g}, "
                    f"delta={left[1]:g} left (total epsilon={total[0]:g}, "
                    f"delta={total[1]:g}, {accountant} composition)")
    return None
