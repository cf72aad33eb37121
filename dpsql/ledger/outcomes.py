"""Outcomes waiting for a transaction: one durable commit per query.

A charged query's ledger work is its charge, committed durably (``synchronous=FULL``)
before any data is read, and, after execution, its outcome (``answered``, ``failed``,
``cancelled``, with the answer cache's entry). The outcome is not written by the
query's own call: :meth:`Pending.add` queues it, and the next transaction this
connection writes carries it, under a savepoint of its own:

* the next charge (or refusal, or budget change): back-to-back queries pay one durable
  commit each, the charge's;
* :meth:`dpsql.ledger.Ledger.settle` (one short transaction without the charge lock),
  which the flusher thread runs :data:`SETTLE_AFTER` seconds after the first queued
  outcome when no charge came first (never waiting for another process's lock: it tries
  again later, backing off), a read that shows outcomes runs first (the log,
  verification), and :meth:`~dpsql.ledger.Ledger.close` and the interpreter's exit run
  last.

**Not queued: an answer for the answer cache.** An outcome that stores a released
answer (``finish(..., also=...)``) is written before the call returns, as before: two
connections asking the same query see one cached answer, and the owner's ``dpsql cache
clear`` cannot be undone by an answer written after it (attack review). Only queries
without the answer cache (the default) make one durable commit.

**A forked child** may not use its parent's ledger connection (SQLite: never carry a
connection across ``fork``): every transaction refuses there, and the child neither
settles nor closes the parent's queue (:meth:`~dpsql.ledger.core.LedgerBase._tx`).

**Why this is sound.** Privacy rests on the charge alone: it is durable before the
backend reads anything, and nothing here can undo it (an outcome changes no budget,
running total, binding or head record, and names its entry by id and by the hash this
connection committed, see :mod:`dpsql.ledger.charging`). What a crash (a killed
process, a lost machine) can lose in the short window is an outcome and a cached
answer: the entry then stays ``charged`` ("charged, outcome unknown", which is also what
a query killed while running leaves), and an answer cache's entry is not
queued at all (below). The answer cache saves budget; it is not what bounds the
privacy loss.

**Why not for every read.** The early admission check and the budget's numbers read
only budgets and running totals, which the charge wrote: they do not wait for outcomes
(``settle=False`` in :meth:`dpsql.ledger.core.LedgerBase._tx`).

>>> class Led:  # a ledger's settle (dpsql.ledger.core.LedgerBase.settle)
...     def settle(self): pass
>>> p, led = Pending(), Led()
>>> p.remember(7, "h7")
>>> p.add(7, "answered", None, None, led.settle)
>>> [(i.charge_id, i.entry_hash) for i in p.take()]
[(7, 'h7')]
>>> p.stop()
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable

#: Seconds an outcome waits for a charge to carry it before the flusher writes it.
SETTLE_AFTER = 0.2

#: The longest wait between settles that leave outcomes queued (each failure doubles it).
_BACKOFF = 60.0

#: Seconds between the idle flusher's checks that its ledger is still in use.
_IDLE_CHECK = 5.0

#: Charges whose outcome this connection remembers by hash (one per query in flight on
#: it; older ones are finished under the full checks).
OPEN_CHARGES = 64


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One queued outcome: its charge, the hash this connection committed it under
    (None: not remembered, written under the full checks), and the answer cache's write
    (``also(db, prefix, mac)``) with the keys it stores."""

    charge_id: int
    outcome: str
    detail: str | None
    also: Callable | None
    entry_hash: str | None
    keys: tuple[str, ...] = ()


class Pending:
    """A connection's queued outcomes and the hashes of its recent charges (thread-safe;
    its lock is never held across a database call)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Outcome] = []
        self._hashes: dict[int, str] = {}
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False
        # the flusher waits for a first outcome (only then does add wake it: woken in
        # its wait before a settle, it would only wait again, and each wake-up cost the
        # asking thread a switch of the GIL, about 0.3 ms a query)
        self._idle = False
        # the ledger's settle, held while outcomes are queued (see add)
        self._held: Callable[..., bool] | None = None

    def remember(self, charge_id: int, entry_hash: str) -> None:
        """A charge this connection committed: its outcome may name it by its hash."""
        with self._lock:
            self._hashes[charge_id] = entry_hash
            while len(self._hashes) > OPEN_CHARGES:
                del self._hashes[next(iter(self._hashes))]

    def add(self, charge_id: int, outcome: str, detail: str | None,
            also: Callable | None, settle: Callable[..., bool]) -> None:
        """Queues the outcome of ``charge_id`` and starts or wakes the flusher, which
        holds the ledger (its ``settle``) until the queue is empty: a connection dropped
        unclosed still has its outcomes written, by the flusher or at exit."""
        with self._lock:
            known = self._hashes.pop(charge_id, None)
            keys = tuple(getattr(also, "keys", ()))
            self._items.append(Outcome(charge_id, outcome, detail, also, known, keys))
            self._held = settle
            if self._idle:
                self._wake.notify()
        self._start(settle)

    def take(self) -> list[Outcome]:
        """Every queued outcome, oldest first; the caller writes them or gives them
        back (:meth:`give_back`)."""
        with self._lock:
            items, self._items = self._items, []
        return items

    def give_back(self, items: list[Outcome]) -> None:
        """Outcomes a transaction took but did not commit: first in line again."""
        if items:
            with self._lock:
                self._items[:0] = items
                if self._idle:
                    self._wake.notify()

    def __bool__(self) -> bool:
        return bool(self._items)

    def all_remembered(self) -> bool:
        """Whether every queued outcome names its entry by a remembered hash."""
        with self._lock:
            return all(item.entry_hash is not None for item in self._items)

    def stores(self, wanted: Callable[[str], bool]) -> bool:
        """Whether a queued outcome stores an answer under a key ``wanted`` accepts."""
        with self._lock:
            return any(wanted(k) for item in self._items for k in item.keys)

    def _start(self, settle: Callable[..., bool]) -> None:
        """Starts the flusher (once); between queued outcomes it holds the ledger only
        weakly, so an abandoned, settled ledger is not kept alive by it."""
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run,
                                            args=(weakref.WeakMethod(settle),),
                                            name="dpsql-ledger-outcomes", daemon=True)
            self._thread.start()

    def _run(self, weak: weakref.WeakMethod) -> None:
        failures = 0
        while True:
            with self._lock:
                while not self._items and not self._closed:
                    self._held = None  # nothing queued: the ledger may go
                    failures = 0
                    if weak() is None:
                        return
                    self._idle = True
                    self._wake.wait(_IDLE_CHECK)
                    self._idle = False
                if self._closed:
                    return
                # a charge arriving in the meantime carries them instead (later
                # outcomes' notifications do not cut the wait short); after a settle
                # that left them queued, longer
                wait = min(SETTLE_AFTER * 2 ** failures, _BACKOFF)
                deadline = time.monotonic() + wait
                while not self._closed and (left := deadline - time.monotonic()) > 0:
                    self._wake.wait(left)
                if self._closed:
                    return
                settle = self._held or weak()
            if settle is None:
                return
            # never waits for another process's lock: the connection stays free for
            # its reads and close() meanwhile
            settled = settle(wait=False)
            del settle
            failures = 0 if settled else min(failures + 1, 10)

    def stop(self) -> None:
        """Stops the flusher (the caller settles what is left)."""
        with self._lock:
            self._closed = True
            self._held = None
            self._wake.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


#: Open ledgers with outcomes that may still be queued, settled at the interpreter's exit.
_OPEN: weakref.WeakSet = weakref.WeakSet()


def register(ledger) -> None:
    """Settles ``ledger``'s queued outcomes at the interpreter's exit, if still open."""
    _OPEN.add(ledger)


def unregister(ledger) -> None:
    """``ledger`` is closed: nothing of it is left to settle."""
    _OPEN.discard(ledger)


@atexit.register
def _settle_all() -> None:
    for ledger in list(_OPEN):
        ledger.settle()




#: Seconds a connection's ``close()`` waits for the queries other threads have charged
#: and not yet settled (:class:`InFlight`).
CLOSE_WAIT = 2.0


class InFlight:
    """The threads between a query's charge and its outcome, on one connection.

    ``Connection.close()`` from another thread while a charged query ran closed the
    ledger first, and the outcome that query recorded after it was never written
    (attack review). So a query holds this from before its charge until its outcome is
    queued, and ``close()`` waits up to :data:`CLOSE_WAIT` for the *other* threads'
    (never its own: a close from a signal handler inside the query would only wait).

    >>> flight = InFlight()
    >>> with flight:
    ...     flight.wait_others(0.01)  # the caller's own query is not waited for
    True
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._threads: dict[int, int] = {}

    def __enter__(self) -> InFlight:
        me = threading.get_ident()
        with self._cond:
            self._threads[me] = self._threads.get(me, 0) + 1
        return self

    def __exit__(self, *exc) -> None:
        me = threading.get_ident()
        with self._cond:
            left = self._threads.pop(me, 1) - 1
            if left:
                self._threads[me] = left
            self._cond.notify_all()

    def wait_others(self, timeout: float = CLOSE_WAIT) -> bool:
        """Waits until no other thread is between a charge and its outcome (at most
        ``timeout`` seconds); True when none is."""
        me = threading.get_ident()
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(t != me for t in self._threads):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True
