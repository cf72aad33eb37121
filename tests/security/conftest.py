"""Shared fixtures and helpers of the hostile-SQL suite (issue 6: the trust boundary).

Two kinds of connection over the bundled PUMS sample, each in its own temporary DuckDB
file:

* ``refusal_conn``: the data owner's catalog and budget (ε = 10), ledger in memory.
  Hostile queries must be refused on it *for free*: every test checks that
  ``conn.budget.spent == (0.0, 0.0)`` afterwards. The connection is shared by the tests
  of a module; if a test did charge it (a finding), it is replaced before the next test
  so that one finding does not cascade into others.
* ``rich_conn``: a generous budget, for queries that may legitimately be answered (and
  charged) and for the fuzzers.

:func:`outcome` runs one query and classifies what happened, so tests can state the
property "refused for free, or answered — never a raw exception, never a charged
failure" in one line.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import types
from pathlib import Path

import pytest

import dpsql
from dpsql.datasets import load_pums, pums_catalog

#: Budget of the rich connection: effectively unlimited for a test session.
RICH_BUDGET = (1e9, 0.9)
#: Seconds any single query may take before the suite calls it a hang.
HANG_SECONDS = 20.0


@pytest.fixture(scope="session")
def security_db(tmp_path_factory) -> Path:
    """A DuckDB file with the bundled ``pums`` and ``pums_dup`` tables."""
    path = tmp_path_factory.mktemp("security") / "pums.duckdb"
    load_pums(path)
    return path


def open_owner_conn(path: Path) -> dpsql.Connection:
    """The data owner's setup: bundled catalog, its budget, an in-memory ledger."""
    return dpsql.connect(path, catalog=pums_catalog(), ledger=":memory:")


def open_rich_conn(path: Path) -> dpsql.Connection:
    catalog = dataclasses.replace(pums_catalog(), budget=None)
    return dpsql.connect(path, catalog=catalog, budget=RICH_BUDGET, ledger=":memory:")


class _Holder:
    def __init__(self, factory):
        self._factory = factory
        self.conn = factory()

    def fresh_if_charged(self) -> dpsql.Connection:
        if self.conn.budget.spent != (0.0, 0.0):
            self.conn.close()
            self.conn = self._factory()
        return self.conn

    def close(self):
        self.conn.close()


@pytest.fixture(scope="module")
def _owner_holder(security_db):
    holder = _Holder(lambda: open_owner_conn(security_db))
    yield holder
    holder.close()


@pytest.fixture
def refusal_conn(_owner_holder) -> dpsql.Connection:
    """Module-shared owner connection, guaranteed uncharged at the start of each test."""
    conn = _owner_holder.fresh_if_charged()
    assert conn.budget.spent == (0.0, 0.0)
    return conn


@pytest.fixture(scope="module")
def rich_conn(security_db):
    conn = open_rich_conn(security_db)
    yield conn
    conn.close()


# -- outcomes -------------------------------------------------------------------------

RESULT = "result"          # answered with a dpsql.Result
REFUSED = "refused"        # a DpsqlError with charged == False
CHARGED = "charged-error"  # a DpsqlError with charged == True (BackendError after charge)
FOREIGN = "foreign-error"  # anything that is not a DpsqlError
HANG = "hang"


@dataclasses.dataclass
class Outcome:
    kind: str
    value: object            # the Result or the exception
    spent_before: tuple
    spent_after: tuple

    @property
    def charged_nothing(self) -> bool:
        return self.spent_after == self.spent_before

    def describe(self) -> str:
        if self.kind == RESULT:
            return f"answered: columns={self.value.columns} rows={self.value.rows[:5]!r}"
        if self.kind == HANG:
            return "no answer within the time limit (hang)"
        exc = self.value
        return f"{self.kind}: {type(exc).__module__}.{type(exc).__name__}: {str(exc)[:300]}"


class Hang(BaseException):
    """Raised into a call that ran past its time limit (see :func:`call_with_timeout`)."""


def call_with_timeout(fn, seconds: float = HANG_SECONDS):
    """Runs ``fn()`` with a time limit; returns (finished, value, exception).

    In the main thread a SIGALRM timer raises :class:`Hang` inside the call. That also
    interrupts C code that holds the GIL but checks for signals, such as a regular
    expression stuck in catastrophic backtracking, which a watchdog thread could not
    (it would never get the GIL back). Elsewhere, a daemon thread is the fallback.
    """
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum, frame):
            raise Hang(f"no answer after {seconds} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return True, fn(), None
        except Hang:
            return False, None, None
        except BaseException as exc:  # noqa: BLE001 - classified by the caller
            return True, None, exc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - classified by the caller
            box["exc"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return False, None, None
    return True, box.get("value"), box.get("exc")


def outcome(conn: dpsql.Connection, sql, epsilon=1.0, delta=0.0, *,
            timeout: float | None = HANG_SECONDS, **kwargs) -> Outcome:
    """Runs one query and classifies the result (never raises)."""
    before = conn.budget.spent

    def run():
        return conn.execute(sql, epsilon=epsilon, delta=delta, **kwargs)

    if timeout is None:
        try:
            value, exc, finished = run(), None, True
        except BaseException as err:  # noqa: BLE001
            value, exc, finished = None, err, True
    else:
        finished, value, exc = call_with_timeout(run, timeout)
    if not finished:
        return Outcome(HANG, None, before, conn.budget.spent)
    after = conn.budget.spent
    if exc is None:
        assert isinstance(value, dpsql.Result), f"execute returned {type(value)!r}"
        return Outcome(RESULT, value, before, after)
    if isinstance(exc, dpsql.DpsqlError):
        kind = CHARGED if exc.charged else REFUSED
        return Outcome(kind, exc, before, after)
    return Outcome(FOREIGN, exc, before, after)


def assert_safe(out: Outcome) -> None:
    """Refused for free, or answered; never a raw exception, a charged failure or a hang."""
    assert out.kind in (RESULT, REFUSED), out.describe()
    if out.kind == REFUSED:
        assert out.charged_nothing, (
            f"refused but charged: {out.spent_before} -> {out.spent_after}; {out.describe()}")


@pytest.fixture(scope="session")
def sec():
    """The helpers of this file, for test modules (conftest is not importable by name)."""
    return types.SimpleNamespace(
        outcome=outcome, assert_safe=assert_safe, call_with_timeout=call_with_timeout, Hang=Hang,
        open_owner_conn=open_owner_conn, open_rich_conn=open_rich_conn,
        RESULT=RESULT, REFUSED=REFUSED, CHARGED=CHARGED, FOREIGN=FOREIGN, HANG=HANG,
        HANG_SECONDS=HANG_SECONDS, RICH_BUDGET=RICH_BUDGET,
    )
