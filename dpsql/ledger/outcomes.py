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
  outcome when no charge came first, a read that looks at outcomes or answers runs
  first (the log, verification, the answer cache finding this very answer), and
  :meth:`~dpsql.ledger.Ledger.close` and the interpreter's exit run last.

**Why this is sound.** Privacy rests on the charge alone: it is durable before the
backend reads anything, and nothing here can undo it (an outcome changes no budget,
running total, binding or head record, and names its entry by id and by the hash this
connection committed, see :mod:`dpsql.ledger.charging`). What a crash (a killed
process, a lost machine) can lose in the short window is an outcome and a cached
answer: the entry then stays ``charged`` ("charged, outcome unknown", which is also what
a query killed while running leaves), and the same query asked again is answered afresh
and charged again, which composition covers like any other charge. The answer cache
saves budget; it is not what bounds the privacy loss.

**Why not for every read.** The early admission check and the budget's numbers read
only budgets and running totals, which the charge wrote: they do not wait for outcomes
(``settle=False`` in :meth:`dpsql.ledger.core.LedgerBase._tx`).

>>> p = Pending()
>>> p.remember(7, "h7")
>>> p.add(7, "answered", None, None)
>>> [(i.charge_id, i.entry_hash) for i in p.take()]
[(7, 'h7')]
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

    def remember(self, charge_id: int, entry_hash: str) -> None:
        """A charge this connection committed: its outcome may name it by its hash."""
        with self._lock:
            self._hashes[charge_id] = entry_hash
            while len(self._hashes) > OPEN_CHARGES:
                del self._hashes[next(iter(self._hashes))]

    def add(self, charge_id: int, outcome: str, detail: str | None,
            also: Callable | None) -> None:
        """Queues the outcome of ``charge_id`` (and wakes the flusher)."""
        with self._lock:
            known = self._hashes.pop(charge_id, None)
            keys = tuple(getattr(also, "keys", ()))
            self._items.append(Outcome(charge_id, outcome, detail, also, known, keys))
            self._wake.notify()

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

    def start(self, settle: Callable[[], None]) -> None:
        """Starts the flusher (once): ``settle`` (a bound method, held weakly: an
        abandoned ledger is not kept alive by it) runs :data:`SETTLE_AFTER` seconds
        after an outcome is queued, unless a transaction carried it first."""
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run,
                                            args=(weakref.WeakMethod(settle),),
                                            name="dpsql-ledger-outcomes", daemon=True)
            self._thread.start()

    def _run(self, settle: weakref.WeakMethod) -> None:
        while True:
            with self._lock:
                while not self._items and not self._closed:
                    if settle() is None:  # the ledger was dropped unclosed
                        return
                    self._wake.wait(_IDLE_CHECK)
                if self._closed:
                    return
                # a charge arriving in the meantime carries them instead (later
                # outcomes' notifications do not cut the wait short)
                deadline = time.monotonic() + SETTLE_AFTER
                while not self._closed and (left := deadline - time.monotonic()) > 0:
                    self._wake.wait(left)
                if self._closed:
                    return
            method = settle()
            if method is None:
                return
            method()
            del method

    def stop(self) -> None:
        """Stops the flusher (the caller settles what is left)."""
        with self._lock:
            self._closed = True
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
