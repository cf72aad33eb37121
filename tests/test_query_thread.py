"""The DuckDB backend's long-lived query thread (:mod:`dpsql.backends.query_thread`).

Its statements used to run on a thread started per query, after the charge: a process
out of threads then failed the query after charging it. The thread is now started before
the charge (``Backend.ready``), so that failure refuses the query for free.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

import dpsql
from dpsql.backends import query_thread, watchdog
from dpsql.backends.query_thread import QueryThread
from dpsql.errors import DpsqlError, QueryCancelled
from tests.support import backend_of, ledger_of
from tests.test_cancel import CATALOG, SLOW_SQL, slow_file  # noqa: F401, F811 - the fixture

SQL = "SELECT COUNT(*) FROM pums"


THREADS = ("dpsql-duckdb-query", "dpsql-watchdog")


def _refusing(monkeypatch):
    real = threading.Thread.start

    def refuse(self):
        if self.name in THREADS:
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    return real


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt  # Python's own handler's effect, from a handler of the app's


@pytest.mark.parametrize("thread", THREADS)
def test_a_thread_that_cannot_start_refuses_the_query_for_free(connect, monkeypatch, thread):
    conn = connect()
    if thread == "dpsql-watchdog":  # a process whose watchdog has not started yet
        monkeypatch.setattr(watchdog, "_WATCHDOG", watchdog._Watchdog())
    else:  # the application's SIGINT handler: the statement runs on the query thread
        monkeypatch.setattr(signal, "getsignal", lambda signum: _raise_keyboard_interrupt)
    _refusing(monkeypatch)
    with pytest.raises(DpsqlError, match="nothing was charged") as caught:
        conn.execute(SQL, epsilon=1.0)
    assert not caught.value.charged
    assert conn.budget.spent[0] == 0.0
    assert [e["outcome"] for e in ledger_of(conn).log()] == ["refused"]


def test_after_the_charge_nothing_starts_a_thread(connect, monkeypatch):
    conn = connect()
    conn.execute(SQL, epsilon=1.0)  # the thread runs now
    _refusing(monkeypatch)
    for _ in range(3):
        assert conn.execute(SQL, epsilon=1.0).rows
    assert conn.budget.spent[0] == pytest.approx(4.0)


def test_a_job_cancelled_before_it_began_never_runs():
    worker = QueryThread("test")
    gate, ran = threading.Event(), []
    first = worker.submit(gate.wait)
    second = worker.submit(lambda: ran.append(1))
    assert second.cancel() and second.done.is_set()
    gate.set()
    assert first.done.wait(5)
    third = worker.submit(lambda: 3)
    assert third.done.wait(5) and third.result == 3
    assert ran == []
    worker.close()


def test_a_job_returns_what_it_raised():
    worker = QueryThread("test")
    job = worker.submit(lambda: 1 / 0)
    assert job.done.wait(5) and isinstance(job.result, ZeroDivisionError)
    worker.close()


def test_an_idle_thread_ends_and_the_next_job_starts_another(monkeypatch):
    monkeypatch.setattr(query_thread, "IDLE_SECONDS", 0.01)
    worker = QueryThread("test-idle")
    for i in range(50):  # jobs queued around the idle end are never lost
        job = worker.submit(lambda i=i: i)
        assert job.done.wait(5) and job.result == i
        time.sleep(0.002 * (i % 10))
    time.sleep(0.2)
    assert not any(t.name == "test-idle" for t in threading.enumerate())
    worker.close()


def test_close_ends_the_thread():
    worker = QueryThread("test-close")
    worker.ready()
    worker.close()
    deadline = time.monotonic() + 5
    while any(t.name == "test-close" for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_job_queued_as_the_idle_wait_ends_is_run(monkeypatch):
    """The thread's idle wait can time out just as a job is queued: it must look at the
    queue again (under the owner's lock) before it ends, or the job is never run."""
    import queue
    import types

    class Racy:
        """A queue whose first job arrives as its wait times out."""

        def __init__(self):
            self.jobs, self.first = queue.SimpleQueue(), True

        def put(self, item):
            self.jobs.put(item)

        def empty(self):
            return self.jobs.empty()

        def get(self, timeout=None):
            item = self.jobs.get(timeout=timeout)
            if self.first:
                self.first = False
                self.jobs.put(item)
                raise queue.Empty
            return item

    monkeypatch.setattr(query_thread, "queue",
                        types.SimpleNamespace(SimpleQueue=Racy, Empty=queue.Empty))
    worker = QueryThread("test-racy")
    job = worker.submit(lambda: 7)
    assert job.done.wait(5) and job.result == 7
    worker.close()


def test_a_thread_idle_during_a_slow_charge_is_kept_for_its_job(connect, monkeypatch):
    """Attack review: the thread idled out between ready() and the job (a slow charge
    between them) and was started again after the charge."""
    monkeypatch.setattr(query_thread, "IDLE_SECONDS", 0.2)
    conn = connect()
    conn.execute(SQL, epsilon=1.0)  # thread runs
    ledger = ledger_of(conn)
    real_charge = ledger.charge
    started_after_charge = []

    def slow_charge(*args, **kwargs):
        out = real_charge(*args, **kwargs)
        time.sleep(0.5)  # a busy ledger (SQLite lock wait), or just bad luck at 60 s
        return out

    monkeypatch.setattr(ledger, "charge", slow_charge)
    real_start = threading.Thread.start
    charged = threading.Event()

    def start(self):
        if self.name == "dpsql-duckdb-query" and charged.is_set():
            started_after_charge.append(self.name)
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)

    def marking_charge(*args, **kwargs):
        out = slow_charge(*args, **kwargs)
        charged.set()
        return out

    monkeypatch.setattr(ledger, "charge", marking_charge)
    time.sleep(0.1)  # thread idle for 0.1 s of its 0.2 s: ready() sees it running
    try:
        conn.execute(SQL + " WHERE age > 1", epsilon=1.0)
        failure = None
    except DpsqlError as exc:
        failure = exc
    # the claim: nothing after the charge starts a thread
    assert started_after_charge == [], (
        f"a thread was started after the charge; query outcome: {failure!r}, "
        f"charged={getattr(failure, 'charged', None)}, "
        f"log={[e['outcome'] for e in ledger.log()]}")


def test_ctrl_c_just_after_the_job_is_queued_stops_the_query(slow_file, monkeypatch):  # noqa: F811
    """Attack review: a Ctrl-C as the job was queued left the statement running on. (The
    query thread runs the statements of the main thread under an application's own
    SIGINT handler.)"""
    previous = signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    try:
        _ctrl_c_as_the_job_is_queued(slow_file, monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_as_the_job_is_queued(slow_file, monkeypatch):  # noqa: F811
    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
    backend = backend_of(conn)
    watchdog = threading.Timer(20, lambda: backend._con.interrupt())
    watchdog.daemon = True
    watchdog.start()
    real = QueryThread.put
    fired = []

    def put(self, job):
        real(self, job)
        if not fired:
            fired.append(job)
            raise KeyboardInterrupt  # the signal arrives as put returns

    monkeypatch.setattr(QueryThread, "put", put)
    with pytest.raises(QueryCancelled):
        conn.execute(SLOW_SQL, epsilon=1.0)
    orphan = fired[0]
    orphan.started.wait(2)
    time.sleep(0.5)
    # the cancelled query must not run on after QueryCancelled was raised
    running = orphan.started.is_set() and not orphan.done.is_set()
    try:
        conn.execute("SELECT COUNT(*) FROM t", epsilon=0.5)
        nxt = "answered"
    except dpsql.DpsqlError as exc:
        nxt = f"{type(exc).__name__}: {exc}"
    try:
        conn.close()
        closed = "closed"
    except Exception as exc:  # noqa: BLE001 - reported below
        closed = f"close() raised {type(exc).__name__}: {exc}"
    while not orphan.done.is_set():
        backend._con.interrupt()
        time.sleep(0.05)
    watchdog.cancel()
    assert not running, (f"the cancelled query still runs 0.5 s after QueryCancelled; "
                         f"next query: {nxt}; {closed}")
