"""Statements run on the calling thread, watched (:mod:`dpsql.backends.watchdog`): the
owner's statement timeout and Ctrl-C stop them as they did on the query thread, the
application's signal set-up is left as it was, and a forked child watches its own."""

from __future__ import annotations

import _thread
import os
import signal
import socket
import threading
import time

import pytest

import dpsql
from dpsql.backends import watchdog
from dpsql.errors import QueryCancelled
from tests.support import backend_of, ledger_of
from tests.test_cancel import (  # noqa: F401 - the fixtures
    CATALOG,
    SLOW_SQL,
    _python_handles_ctrl_c,
    slow_file,
)


class _Owner:
    def __init__(self, interrupt):
        self.interrupt_statement = interrupt


def _wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


def _slow_in_a_thread(conn) -> tuple[threading.Thread, dict]:
    """The slow query asked on a thread of its own: its ident, the error it ended with
    and how many seconds it ran go into the dict."""
    out: dict = {}

    def ask():
        out["ident"] = threading.get_ident()
        start = time.monotonic()
        try:
            conn.execute(SLOW_SQL, epsilon=1.0)
        except dpsql.DpsqlError as exc:
            out["error"] = exc
        out["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, out


def _refuse_query_threads(monkeypatch) -> None:
    """From now on no query thread can start (a process out of threads)."""
    real = threading.Thread.start

    def refuse(self):
        if self.name == "dpsql-duckdb-query":
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)


def _stopper(backend, seconds=30.0) -> threading.Timer:
    """Ends the statement after ``seconds`` whatever happens: a broken watch fails the
    test instead of hanging it."""
    timer = threading.Timer(seconds, lambda: backend._con.interrupt())
    timer.daemon = True
    timer.start()
    return timer


def test_ctrl_c_stops_a_statement_on_the_main_thread_at_once(slow_file):  # noqa: F811
    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
    stopper = _stopper(backend_of(conn))
    ctrl_c = threading.Timer(0.5, _thread.interrupt_main)
    ctrl_c.start()
    start = time.monotonic()
    with pytest.raises(QueryCancelled) as info:
        conn.execute(SLOW_SQL, epsilon=1.0)
    elapsed = time.monotonic() - start
    stopper.cancel()
    assert elapsed < 5, f"the statement ran {elapsed:.1f} s, long after Ctrl-C at 0.5 s"
    assert info.value.charged
    assert backend_of(conn)._on_thread is False  # it ran here, watched
    assert _wakeup_fd() == watchdog._WATCHDOG.signal_fd()  # left in place
    assert ledger_of(conn).log()[0]["outcome"] == "cancelled"
    assert conn.execute("SELECT COUNT(*) FROM t", epsilon=1.0).rows
    conn.close()


def test_an_applications_wakeup_fd_is_left_to_it(slow_file):  # noqa: F811
    # asyncio reads its signals from a wakeup fd of its own: a statement of the main
    # thread then runs on the query thread, and the fd is the application's throughout
    read, write = socket.socketpair()
    write.setblocking(False)
    previous = signal.set_wakeup_fd(write.fileno())
    try:
        conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
        assert conn.execute("SELECT COUNT(*) FROM t", epsilon=1.0).rows
        assert backend_of(conn)._on_thread is True
        assert _wakeup_fd() == write.fileno()
        stopper = _stopper(backend_of(conn))
        threading.Timer(0.5, _thread.interrupt_main).start()
        with pytest.raises(QueryCancelled):  # Ctrl-C still stops it, on that thread
            conn.execute(SLOW_SQL, epsilon=1.0)
        stopper.cancel()
        assert _wakeup_fd() == write.fileno()
        conn.close()
    finally:
        signal.set_wakeup_fd(previous)
        read.close()
        write.close()
        watchdog._WATCHDOG.applications_fd = False  # this test's application is gone


def test_the_statement_timeout_on_another_thread(slow_file):  # noqa: F811
    # dpsql serve answers on threads of its own: no signal there, the timeout still holds
    catalog = {**CATALOG, "limits": {"statement_timeout_seconds": 0.5}}
    conn = dpsql.connect(slow_file, catalog=catalog, budget=(10, 1e-5), ledger=":memory:")
    stopper = _stopper(backend_of(conn))
    thread, out = _slow_in_a_thread(conn)
    thread.join(40)
    stopper.cancel()
    assert out["seconds"] < 10
    assert not isinstance(out["error"], QueryCancelled) and out["error"].charged
    assert ledger_of(conn).log()[0]["outcome"] == "failed"
    conn.close()


def test_a_ctrl_c_as_the_watch_begins_leaves_nothing_that_harms_the_next_query(
        slow_file, monkeypatch):  # noqa: F811
    # the Ctrl-C lands once the statement is registered, before it starts: nothing stays
    # registered to interrupt the connection's next planning or statement (a registration
    # left behind, cancelled, was interrupted every 50 ms, and the next query's plan
    # check failed)
    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
    backend = backend_of(conn)
    real = watchdog._Watchdog.begin

    def interrupted(self, owner, timeout, main):
        real(self, owner, timeout, main).cancelled = True
        raise KeyboardInterrupt

    monkeypatch.setattr(watchdog._Watchdog, "begin", interrupted)
    with pytest.raises(QueryCancelled) as info:
        conn.execute(SLOW_SQL, epsilon=1.0)
    assert info.value.charged
    monkeypatch.undo()
    assert id(backend) not in watchdog._WATCHDOG.watches
    time.sleep(0.2)
    for i in range(3):
        assert conn.execute(f"SELECT COUNT(*) FROM t WHERE x > {i}", epsilon=0.5).rows
        time.sleep(0.06)
    assert [e["outcome"] for e in ledger_of(conn).log() if e["sql"] == SLOW_SQL] == \
        ["cancelled"]
    conn.close()


def test_a_statement_past_its_deadline_is_interrupted_every_50_ms_until_it_ends():
    # an interrupt that lands before the statement begins is not kept for it, so the
    # watchdog interrupts again until the statement is gone; neither spinning (fails
    # when a past deadline is taken for the next wake) nor giving up
    calls = []
    owner = _Owner(lambda: calls.append(time.monotonic()))
    watchdog.ready()
    watch = watchdog.begin(owner, 0.05, main=False)
    time.sleep(0.6)
    assert watch.timed_out and not watch.cancelled
    watchdog.end(owner, watch)
    n = len(calls)
    assert 5 <= n <= 20, f"{n} interrupts in 0.55 s"
    time.sleep(0.2)
    assert len(calls) == n  # none once the statement is gone
    assert watchdog._WATCHDOG.wakes_at - time.monotonic() > 1.0


def test_a_sigint_does_not_cancel_a_statement_of_another_thread():
    stopped = []
    owner = _Owner(lambda: stopped.append(1))
    watchdog.ready()
    watch = watchdog.begin(owner, 0, main=False)
    os.write(watchdog._WATCHDOG.signal_fd(), bytes([signal.SIGINT]))
    time.sleep(0.3)
    watchdog.end(owner, watch)
    assert not watch.cancelled and stopped == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_watches_its_own_statements(slow_file):  # noqa: F811
    catalog = {**CATALOG, "limits": {"statement_timeout_seconds": 0.5}}
    watchdog.ready()  # the parent's runs
    pid = os.fork()
    if pid == 0:  # the child: its statement times out, watched by a watchdog of its own
        code = 1
        try:
            conn = dpsql.connect(slow_file, catalog=catalog, budget=(10, 1e-5),
                                 ledger=":memory:")
            start = time.monotonic()
            try:
                conn.execute(SLOW_SQL, epsilon=1.0)
            except dpsql.DpsqlError as exc:
                code = 0 if exc.charged and time.monotonic() - start < 10 else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the child's statement was never stopped")
    assert os.waitstatus_to_exitcode(status) == 0


def test_another_threads_cancel_stops_its_statement_at_once(slow_file):  # noqa: F811
    # dpsql serve's CancelRequest: the statement runs in a worker thread's call into
    # DuckDB, where a KeyboardInterrupt raised in that thread would wait for its end
    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
    stopper = _stopper(backend_of(conn))
    thread, out = _slow_in_a_thread(conn)
    time.sleep(0.5)
    watchdog.cancel_thread(out["ident"])
    thread.join(40)
    stopper.cancel()
    assert isinstance(out["error"], QueryCancelled) and out["error"].charged
    assert out["seconds"] < 5, f"the statement ran {out['seconds']:.1f} s after the cancel"
    conn.close()


def test_each_ctrl_c_cancels_one_query_only(slow_file):  # noqa: F811
    # DuckDB's own check may answer a Ctrl-C first; its byte, still in the watchdog's
    # socket, must not cancel the next statement too (attack review: 300 Ctrl-Cs gave
    # up to 306 cancels; without the drains this fails about one run in three)
    import random

    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(1e9, 1e-5), ledger=":memory:")
    sent, stop = [], threading.Event()

    def sender():
        time.sleep(0.1)
        rng = random.Random(7)
        for _ in range(250):
            time.sleep(rng.uniform(0.005, 0.03))
            _thread.interrupt_main()
            sent.append(1)
        time.sleep(0.3)
        stop.set()

    threading.Thread(target=sender, daemon=True).start()
    stopped = 0
    while not stop.is_set():
        try:
            try:
                conn.execute("SELECT COUNT(*) FROM t", epsilon=1e-3)
            except QueryCancelled:
                stopped += 1
        except KeyboardInterrupt:  # landed between two queries
            stopped += 1
    # two Ctrl-Cs before the main thread looks are one (Python's flag): fewer, never more
    assert len(sent) == 250 and 150 <= stopped <= 250
    conn.close()


def test_many_open_files_do_not_stop_the_watchdog(slow_file, monkeypatch):  # noqa: F811
    # select() refuses fds past 1024: the watchdog ended, and no timeout ever fired again
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} files, fewer than the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = []
    try:
        while not held or held[-1].fileno() < 1030:
            held.append(socket.socket())
        monkeypatch.setattr(watchdog, "_WATCHDOG", watchdog._Watchdog())  # fds past 1024
        catalog = {**CATALOG, "limits": {"statement_timeout_seconds": 0.5}}
        conn = dpsql.connect(slow_file, catalog=catalog, budget=(10, 1e-5), ledger=":memory:")
        stopper = _stopper(backend_of(conn), 20)
        start = time.monotonic()
        with pytest.raises(dpsql.DpsqlError) as info:
            conn.execute(SLOW_SQL, epsilon=1.0)
        stopper.cancel()
        assert time.monotonic() - start < 10 and not isinstance(info.value, QueryCancelled)
        assert watchdog._WATCHDOG.thread.is_alive()
        conn.close()
    finally:
        for s in held:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_applications_wakeup_fd_means_the_thread_starts_before_the_charge(
        slow_file, monkeypatch):  # noqa: F811
    # the statement then runs on the query thread: ready() must start it, or a process
    # out of threads fails the query after charging it
    monkeypatch.setattr(watchdog, "_WATCHDOG", watchdog._Watchdog())
    watchdog.ready()
    read, write = socket.socketpair()
    write.setblocking(False)
    previous = signal.set_wakeup_fd(write.fileno())
    try:
        conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
        _refuse_query_threads(monkeypatch)
        with pytest.raises(dpsql.DpsqlError) as info:
            conn.execute("SELECT COUNT(*) FROM t", epsilon=1.0)
        assert not info.value.charged
        assert [e["outcome"] for e in ledger_of(conn).log()] == ["refused"]
        conn.close()
    finally:
        signal.set_wakeup_fd(previous)
        read.close()
        write.close()


def test_a_closed_applications_wakeup_fd_fails_no_query(slow_file, monkeypatch):  # noqa: F811
    monkeypatch.setattr(watchdog, "_WATCHDOG", watchdog._Watchdog())
    read, write = socket.socketpair()
    stale = os.dup2(write.fileno(), 900)  # a number nothing opened here will reuse
    os.set_blocking(stale, False)
    previous = signal.set_wakeup_fd(stale)
    os.close(stale)  # closed without setting -1
    read.close()
    write.close()
    try:
        conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
        # the dead fd is no application's: the statements run here, no thread is needed
        # (attack review: it was taken for one after the charge, and a thread started)
        _refuse_query_threads(monkeypatch)
        for i in range(2):
            assert conn.execute(f"SELECT COUNT(*) FROM t WHERE x > {i}", epsilon=1.0).rows
        assert backend_of(conn)._on_thread is False
        conn.close()
    finally:
        signal.set_wakeup_fd(previous)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_fork_while_another_thread_holds_the_lock_does_not_hang_the_child():
    watchdog.ready()
    held, release = threading.Event(), threading.Event()

    def hold():
        with watchdog._WATCHDOG.lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:
        try:
            watchdog.ready()
            watchdog.end(object())
        finally:
            os._exit(0)
    release.set()
    holder.join()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the child hung on the lock it inherited held")


def test_a_left_registration_does_not_keep_its_connection(slow_file):  # noqa: F811
    # a registration a second Ctrl-C left behind holds its connection weakly: a connection
    # nobody holds is freed (its file unlocked) and the registration dropped
    import gc
    import weakref

    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
    assert conn.execute("SELECT COUNT(*) FROM t", epsilon=1.0).rows
    watchdog.begin(backend_of(conn), 0, main=False)  # never ended
    watchdog.cancel_thread(threading.get_ident())  # interrupted every 50 ms from now on
    backend = weakref.ref(backend_of(conn))
    del conn
    gc.collect()
    assert backend() is None
    time.sleep(0.2)
    assert not any(w.owner() is None for w in watchdog._WATCHDOG.watches.values())


def test_a_ctrl_c_on_entry_to_end_leaves_nothing_that_interrupts_later_work(
        slow_file):  # noqa: F811
    # attack review: the pending KeyboardInterrupt of a cancelled statement often lands on
    # entry to watchdog.end; the registration it left, cancelled, was interrupted every
    # 50 ms and later plan checks of the connection were refused. The statement marks it
    # done as it returns, and a done registration is never interrupted
    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(100, 1e-5), ledger=":memory:")
    backend = backend_of(conn)
    stopper = _stopper(backend)

    def ctrl_c_once_running():
        deadline = time.monotonic() + 20
        while id(backend) not in watchdog._WATCHDOG.watches and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        _thread.interrupt_main()

    threading.Thread(target=ctrl_c_once_running, daemon=True).start()
    with pytest.raises(QueryCancelled):
        conn.execute(SLOW_SQL, epsilon=1.0)
    stopper.cancel()
    left = watchdog._WATCHDOG.watches.get(id(backend))
    assert left is None or left.done  # left behind (often) or ended; never running
    # and the same, made sure of: a cancelled registration left behind by its statement
    watch = watchdog.begin(backend, 0, main=True)
    watch.done = watch.cancelled = True
    watchdog.cancel_thread(threading.get_ident())  # wakes the watchdog now
    for i in range(60):  # each a new text, planned and checked; no statement runs
        assert conn.explain(f"SELECT COUNT(*) FROM t WHERE x > {i}", epsilon=1.0).sql
        time.sleep(0.01)
    assert conn.execute("SELECT COUNT(*) FROM t", epsilon=1.0).rows
    assert id(backend) not in watchdog._WATCHDOG.watches
    conn.close()
