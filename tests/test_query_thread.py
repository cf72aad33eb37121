"""The DuckDB backend's long-lived query thread (:mod:`dpsql.backends.query_thread`).

Its statements used to run on a thread started per query, after the charge: a process
out of threads then failed the query after charging it. The thread is now started before
the charge (``Backend.ready``), so that failure refuses the query for free.
"""

from __future__ import annotations

import threading
import time

import pytest

from dpsql.backends import query_thread
from dpsql.backends.query_thread import QueryThread
from dpsql.errors import DpsqlError
from tests.support import ledger_of

SQL = "SELECT COUNT(*) FROM pums"


def _refusing(monkeypatch):
    real = threading.Thread.start

    def refuse(self):
        if self.name == "dpsql-duckdb-query":
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    return real


def test_a_thread_that_cannot_start_refuses_the_query_for_free(connect, monkeypatch):
    conn = connect()
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
