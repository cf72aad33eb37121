"""The ledger connection: opening a ledger (format, id, key) and its transactions.

:class:`LedgerBase` owns the store (:mod:`dpsql.ledger.stores`), the connection's lock
and what it has seen of the head record; every read and write of the other parts goes
through :meth:`LedgerBase._tx`, which checks (before anything is read or written) that
the ledger is still the one opened and that its head record is intact and not rewound.
The parts that give it meaning are mixins put together in :class:`dpsql.ledger.Ledger`:
the chain and its verification (:mod:`~dpsql.ledger.chain`), budgets and bindings
(:mod:`~dpsql.ledger.budgets`), charging (:mod:`~dpsql.ledger.charging`) and reports
(:mod:`~dpsql.ledger.reports`).
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from dpsql.errors import LedgerError
from dpsql.ledger.outcomes import Pending, register, unregister
from dpsql.ledger.records import _Mac, _storable
from dpsql.ledger.schema import _init_meta, _Schema
from dpsql.ledger.settings import (
    FORMAT,
    KEY_ENV,
    REFUSAL_CAP,
    VERSION,
    _log,
    _owner_key,
    _timeout,
)
from dpsql.ledger.stores import _ledger_error, _Postgres, _SQLite
from dpsql.text import escape

#: :meth:`LedgerBase._tx`'s mode for the write of one charge's outcome.
OUTCOME = "outcome"


class LedgerBase:
    """A ledger's connection and transactions (see :class:`dpsql.ledger.Ledger`)."""

    def __init__(self, path: str | Path, *, create: bool = True, readonly: bool = False,
                 expect_id: str | None = None, timeout: float | None = None,
                 refusal_cap: int = REFUSAL_CAP):
        self._lock = threading.Lock()
        # a forked child must not use its parent's connection, locks or queue (SQLite:
        # never carry a connection across fork); _tx refuses there
        self._pid = os.getpid()
        self._seen = -1  # the newest head (its seq) this connection has seen committed
        self._head: dict = {}
        self._head_dirty = False
        # the last head record read or written, as text and parsed: the same text is the
        # same record, checked once (chain.Chain._load_head)
        self._head_memo: tuple | None = None
        # rows of budgets and running totals (their text, with their data set and
        # analyst) whose MAC this connection computed or checked: the same text passes
        # the same check (chain.Chain._checked_once)
        self._verified: set[str] = set()
        # outcomes waiting for a transaction, and the hashes of this connection's recent
        # charges, which their outcomes name their entries by (dpsql.ledger.outcomes)
        self._pending = Pending()
        # per (data set, analyst): the limits and the spend after this connection's last
        # charge there, for skipping the early refusal's read (charging.Charging.fits)
        self._admitted: dict[tuple[str, str], tuple] = {}
        self.refusal_cap = refusal_cap
        timeout = _timeout() if timeout is None else timeout
        self._timeout = timeout
        text = str(path)
        if text.startswith(("postgresql://", "postgresql+", "postgres://")):
            self._s: Any = _Postgres(text, timeout, create, readonly)
        else:
            self._s = _SQLite(text, timeout, create, readonly)
        self.path = self._s.path
        self._p = self._s.prefix
        try:
            self._open(expect_id)
        except BaseException:
            self._s.close()
            raise
        if not readonly:
            register(self)

    # -- opening ------------------------------------------------------------------------

    @property
    def _db(self):
        """The SQLite connection (tests and tools); None for PostgreSQL."""
        return getattr(self._s, "db", None) if self._s.kind == "sqlite" else None

    def _open(self, expect_id: str | None) -> None:
        errors = self._s.errors()
        try:
            if self._s.kind == "sqlite":
                check = self._s.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise LedgerError(f"ledger {self.path!r} is corrupted ({check})")
                if self._s.memory:
                    _Schema(self._s).create(self._s.db)
                    _init_meta(self._s.db, "?", "", secrets.token_hex(16), _owner_key())
                else:
                    tables = {r[0] for r in self._s.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table'")}
                    if "meta" not in tables:
                        raise LedgerError(f"{self.path!r} is an SQLite file but not a dpsql "
                                          "ledger; refusing to start a fresh budget over it")
            meta = dict(self._s.execute(f"SELECT key, value FROM {self._p}meta").fetchall())
            if meta.get("format") != FORMAT:
                raise LedgerError(f"{self.path!r} is not a dpsql ledger")
            if meta.get("version") != VERSION:
                raise LedgerError(
                    f"ledger {self.path!r} has format version {meta.get('version')}; this "
                    f"dpsql reads version {VERSION} (dpsql budget migrate converts a "
                    "version-1 ledger into a new file; a version-2 ledger has no head "
                    "record and is read by the dpsql that wrote it)")
            self.id = meta["id"]
            if expect_id is not None and expect_id != self.id:
                raise LedgerError(
                    f"ledger {self.path!r} has id {self.id}, not the pinned {expect_id}: the "
                    "file was replaced; refusing to charge a ledger that is not the owner's")
            key = _owner_key()
            self.keyed = meta.get("keyed") == "1"
            if self.keyed and key is None:
                raise LedgerError(f"ledger {self.path!r} is keyed: set {KEY_ENV} to the "
                                  "owner's key")
            if not self.keyed and key is not None:
                raise LedgerError(f"ledger {self.path!r} was made without a key, but "
                                  f"{KEY_ENV} is set: refusing an unkeyed ledger where a "
                                  "keyed one is expected (was it replaced?)")
            self._mac = _Mac(self.id, key)
            if not hmac.compare_digest(meta.get("key_check", ""), self._mac("key-check")):
                raise LedgerError(f"ledger {self.path!r} was made with another key than "
                                  f"{KEY_ENV}, or its id was changed")
            self._verify_since_checkpoint()
        except errors as exc:
            raise _ledger_error(exc, self.path, "open", self._timeout) from None

    # -- transactions -------------------------------------------------------------------

    def _inherited(self) -> bool:
        """Whether this process is a fork of the one that opened the ledger."""
        return os.getpid() != self._pid

    @contextlib.contextmanager
    def _tx(self, write: bool | str = True, settle: bool = True, wait: bool = True):
        """One transaction under the connection's lock; database errors as LedgerError.

        Args:
            write: True, a write under the ledger's lock (on PostgreSQL the row lock that
                serialises chargers), after checking that the file is still the one
                opened and carries the ledger's id; False, a read; :data:`OUTCOME`, the
                write of queued outcomes only: no charge lock and no head record (see
                :mod:`dpsql.ledger.charging` for why they need neither).
                Every transaction but an outcome's checks the head record first.
            settle: for a read, whether this connection's queued outcomes are written
                first (:mod:`dpsql.ledger.outcomes`; without waiting for another
                process's lock); False for reads that never show outcomes.
            wait: for a write, whether a lock another process holds is waited for (up
                to the ledger's timeout); False: :class:`LedgerError` at once.

        Every write carries the queued outcomes (each under a savepoint of its own:
        one that cannot be written is logged and dropped, never the transaction's
        failure); when the transaction does not commit, they stay queued.

        A KeyboardInterrupt can land between any two steps here (the analyst's Ctrl-C in
        the shell). A transaction left open would keep the ledger locked for every
        process: each exit path rolls back what is still open, and a transaction an
        interrupt left open anyway is rolled back before the next one begins. An
        uncommitted charge is lost only when no data was read for it.
        """
        s = self._s
        outcome = write == OUTCOME
        if self._inherited():
            raise LedgerError(f"ledger {self.path!r} was opened by the parent of this forked "
                              "process; open a new connection here")
        if not write and settle and self._pending:
            self.settle(wait=False)
        with self._lock:
            taken: list = []
            try:
                try:
                    if write:
                        self._begin_write(lock=not outcome, wait=wait)
                    else:
                        s.begin_read()
                    if not outcome:
                        self._load_head()
                    later: list = []
                    if write:
                        taken = self._pending.take()
                        later = self._write_outcomes(s, taken, not outcome,
                                                     lambda: self._begin_again(outcome))
                    yield s
                    if self._head_dirty and not outcome:
                        self._write_head(s)
                    s.execute("COMMIT")
                    taken = []
                    self._pending.give_back(later)
                    if not outcome:
                        self._seen = self._head["seq"]
                except s.errors() as exc:
                    raise _ledger_error(exc, self.path, "record", self._timeout) from None
            except BaseException:
                try:
                    if s.in_transaction():
                        s.execute("ROLLBACK")
                except s.errors():
                    pass
                self._pending.give_back(taken)
                raise

    def _write_outcomes(self, s, items: list, full: bool, restart) -> list:
        """Writes queued outcomes in the current transaction, each under a savepoint;
        returns those left for a transaction under the full checks.

        An outcome names its entry by id *and* by the hash this connection committed,
        so on a ledger replaced or rewound under the connection it matches no row and
        is not written (keyed, the hash cannot be forged); one whose hash this
        connection no longer remembers is looked up, and only under the full checks
        (``full``). An outcome that cannot be written is logged and dropped from
        ``items`` (the caller's list: it is not queued again), never the transaction's
        failure: where its error ended the whole transaction (SQLite rolls it back on a
        full disk or an I/O error), ``restart()`` begins it again and the outcomes
        before it are written again.
        """
        later: list = []
        i = 0
        while i < len(items):
            item = items[i]
            if item.entry_hash is None and not full:
                later.append(item)
                i += 1
                continue
            s.execute("SAVEPOINT dpsql_outcome")
            try:
                self._write_outcome(s, item)
                s.execute("RELEASE SAVEPOINT dpsql_outcome")
                i += 1
                continue
            except Exception as exc:  # noqa: BLE001 - one outcome never blocks a charge
                self._lost_outcome(s, item, exc)
            del items[i]
            if not self._undo_savepoint(s):
                restart()
                later, i = [], 0
        return later

    def _write_outcome(self, s, item) -> None:
        if item.also is not None:
            item.also(s, self._p, self._mac)
        entry_hash = item.entry_hash or self._charge_hash(s, item.charge_id)
        detail = None if item.detail is None else _storable(item.detail[:1000])
        written = s.execute(
            f"UPDATE {self._p}entries SET outcome = ?, detail = ?, omac = ? "
            "WHERE id = ? AND hash = ? AND kind = 'charge'",
            (item.outcome, detail, self._mac("outcome", item.charge_id, entry_hash,
                                             item.outcome, detail),
             item.charge_id, entry_hash)).rowcount
        if written != 1:
            raise LedgerError(f"ledger {self.path!r}: charge {item.charge_id} is missing")

    def _lost_outcome(self, s, item, exc: Exception) -> None:
        if isinstance(exc, LedgerError):
            text = str(exc)
        elif isinstance(exc, s.errors()):
            text = str(_ledger_error(exc, self.path, "record", self._timeout))
        else:
            text = type(exc).__name__
        _log.error("ledger %s: charge %d is kept, but its outcome %r could not be "
                   "recorded: %s", escape(self.path), item.charge_id, item.outcome,
                   escape(text))

    @staticmethod
    def _undo_savepoint(s) -> bool:
        """Rolls back to the outcome's savepoint; False: the engine had already ended the
        whole transaction."""
        if not s.in_transaction():
            return False
        try:
            s.execute("ROLLBACK TO SAVEPOINT dpsql_outcome")
            s.execute("RELEASE SAVEPOINT dpsql_outcome")
        except s.errors():
            if s.in_transaction():
                raise
            return False
        return True

    def _charge_hash(self, db, charge_id: int) -> str:
        row = db.execute(f"SELECT hash, kind FROM {self._p}entries WHERE id = ?",
                         (charge_id,)).fetchone()
        if row is None or row[1] != "charge":
            raise LedgerError(f"ledger {self.path!r}: charge {charge_id} is missing")
        return row[0]

    def settle(self, wait: bool = True) -> bool:
        """Writes this connection's queued outcomes now, in one short transaction
        (without the charge lock when every one names its entry by a remembered hash);
        True when none is left queued.

        Args:
            wait: wait for a write lock another process holds (up to the ledger's
                timeout); False (the flusher, a read): try once, and leave them queued.

        Never raises for the ledger's own trouble: the charges are kept either way, and
        what could not be written goes to the owner's log (and stays queued).
        """
        if self._inherited() or self._s.readonly:
            return False
        if not self._pending:
            return True
        try:
            with self._tx(OUTCOME if self._pending.all_remembered() else True, wait=wait):
                pass
        except LedgerError as exc:
            if wait:
                _log.error("ledger %s: outcomes could not be recorded now (they stay "
                           "queued): %s", escape(self.path), escape(str(exc)))
            return False
        return not self._pending

    def _begin_again(self, outcome: bool) -> None:
        """Begins the current write again after the engine rolled it back."""
        self._begin_write(lock=not outcome, wait=True)
        if not outcome:
            self._load_head()

    def _begin_write(self, lock: bool, wait: bool = True) -> None:
        """Begins a write; with ``lock``, takes the charge lock and checks, inside the
        transaction, that the ledger is still the file and the id this connection opened."""
        s = self._s
        if s.readonly:
            raise LedgerError(f"ledger {self.path!r} was opened read-only")
        s.begin_write(lock, wait)
        if not lock:
            return
        s.same_file()
        row = s.execute(f"SELECT value FROM {self._p}meta WHERE key = 'id'").fetchone()
        if row is None or row[0] != self.id:
            raise LedgerError(f"ledger {self.path!r} is no longer the ledger this connection "
                              "opened; refusing to charge")

    @contextlib.contextmanager
    def side_table(self, write: bool = False, settle: bool = True):
        """One transaction, under this ledger's checks and locks, for a module that keeps
        its own table in the ledger (:mod:`dpsql.answer_cache`); yields ``(db, prefix,
        mac)``. Its database errors are :class:`~dpsql.errors.LedgerError`.

        Args:
            settle: for a read, whether the queued outcomes (and the answers they store)
                are written first; False only when none of them can be what it reads
                (:meth:`queued_answer`).
        """
        with self._tx(write, settle=settle) as db:
            yield db, self._p, self._mac

    def queued_answer(self, wanted) -> bool:
        """Whether a queued outcome stores an answer under a key ``wanted(key)`` accepts."""
        return self._pending.stores(wanted)

    @property
    def kind(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._s.kind

    @property
    def readonly(self) -> bool:
        return self._s.readonly

    def close(self) -> None:
        if self._inherited():  # the parent's connection: the parent closes it
            return
        self._pending.stop()
        self.settle()
        unregister(self)
        with self._lock:
            self._s.close()
