"""Cancelling a running query: a DpsqlError, the charge kept, the ledger says so.

The slow query is a self-join on the user key of a table with two users of 200,000 rows
each: 8·10¹⁰ joined rows, far more than any test waits for, so only a cancel ends it.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time

import duckdb
import pytest

import dpsql
import dpsql.dbapi
from dpsql.errors import QueryCancelled
from tests.support import backend_of, ledger_of

SLOW_SQL = "SELECT COUNT(*) FROM t a JOIN t b ON a.uid = b.uid AND a.x <> b.x"
CATALOG = {"dataset": "slow", "tables": {"t": {"user_key": "uid", "columns": {
    "uid": {"type": "int"}, "x": {"type": "int", "lower": 0, "upper": 99}}}}}


@pytest.fixture(autouse=True)
def _python_handles_ctrl_c():
    """Python's own SIGINT handler, as an interactive Python has: a job a shell starts in
    the background inherits SIGINT ignored, and then ``_thread.interrupt_main`` (like a
    real Ctrl-C) does nothing, so these tests failed under ``cmd &`` (60 s watchdog) and
    hung on SQLite."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def slow_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("slow") / "slow.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT i % 2 AS uid, i % 100 AS x FROM range(400000) r(i)")
    con.close()
    return path


def _interrupt_when_charged(ledger, backend) -> list[threading.Timer]:
    """Ctrl-C (as the main thread sees it) once the query is charged and running; a
    watchdog stops the query directly after 60 s, so a broken cancel fails the test
    instead of hanging it."""
    def interrupt() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(e["outcome"] == "charged" for e in ledger.log()):
                time.sleep(0.3)  # the database is reading
                break
            time.sleep(0.05)
        _thread.interrupt_main()

    timers = [threading.Timer(0.0, interrupt),
              threading.Timer(60, lambda: backend._con.interrupt())]
    for t in timers:
        t.daemon = True
        t.start()
    return timers


def test_ctrl_c_during_a_query_raises_query_cancelled_and_keeps_the_charge(slow_file):
    conn = dpsql.connect(slow_file, catalog=CATALOG, budget=(10, 1e-5), ledger=":memory:")
    timers = _interrupt_when_charged(ledger_of(conn), backend_of(conn))
    start = time.monotonic()
    with pytest.raises(QueryCancelled) as info:
        conn.execute(SLOW_SQL, epsilon=1.0)
    elapsed = time.monotonic() - start
    for t in timers:
        t.cancel()
    assert elapsed < 20, f"the query ran {elapsed:.1f} s, long after Ctrl-C"
    err = info.value
    assert isinstance(err, dpsql.DpsqlError) and err.charged
    assert "charge is kept" in str(err)
    assert conn.budget.spent == (1.0, 0.0)
    entry = ledger_of(conn).log()[0]
    assert (entry["outcome"], entry["epsilon"], entry["sql"]) == ("cancelled", 1.0, SLOW_SQL)
    # the connection is usable afterwards
    assert len(conn.execute("SELECT COUNT(*) FROM t", epsilon=0.5).rows) == 1
    conn.close()


def test_dbapi_maps_a_cancel_to_operational_error(slow_file):
    con = dpsql.dbapi.connect(slow_file, CATALOG, budget=(10, 1e-5), ledger=":memory:",
                              epsilon=0.5)
    cur = con.cursor()
    timers = _interrupt_when_charged(ledger_of(con), backend_of(con))
    with pytest.raises(dpsql.dbapi.OperationalError) as info:
        cur.execute(SLOW_SQL)
    for t in timers:
        t.cancel()
    assert isinstance(info.value, QueryCancelled)
    assert con.budget.spent == (0.5, 0.0)
    con.close()


def test_keyboard_interrupt_after_the_charge_is_a_cancel(connect, monkeypatch):
    conn = connect()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("dpsql.answer_flow.add_noise", interrupted)
    with pytest.raises(QueryCancelled) as info:
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.25)
    assert info.value.charged
    assert conn.budget.spent == (0.25, 0.0)
    assert ledger_of(conn).log()[0]["outcome"] == "cancelled"


def test_keyboard_interrupt_before_the_charge_spends_nothing(connect, monkeypatch):
    conn = connect()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("dpsql.engine.validate", interrupted)
    with pytest.raises(QueryCancelled) as info:
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.25)
    assert not info.value.charged
    assert "before anything was charged" in str(info.value)
    assert conn.budget.spent == (0.0, 0.0)


@pytest.mark.parametrize("error", [duckdb.InterruptException("INTERRUPT Error: Interrupted!"),
                                   RuntimeError("Query interrupted")])
def test_duckdb_interrupt_errors_are_a_cancel(connect, monkeypatch, error):
    """DuckDB's own interrupt (another thread's ``interrupt()``, or its check for Ctrl-C)
    is a cancel too, never a bare RuntimeError or a 'failed' query."""
    conn = connect()
    monkeypatch.setattr(type(backend_of(conn)), "_run", lambda self, statement: error)
    with pytest.raises(QueryCancelled):
        conn.execute("SELECT COUNT(*) FROM pums_dup", epsilon=0.25)
    assert conn.budget.spent == (0.25, 0.0)
    assert ledger_of(conn).log()[0]["outcome"] == "cancelled"


def _sqlite_table(path, users: int, rows: int):
    """An SQLite file with table ``t(uid, x)`` of ``rows`` rows over ``users`` users."""
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (uid INTEGER NOT NULL, x INTEGER NOT NULL)")
    con.executemany("INSERT INTO t VALUES (?, ?)", ((i % users, i % 100) for i in range(rows)))
    con.commit()
    con.close()
    return path


def test_ctrl_c_during_an_sqlite_query_is_a_cancel(tmp_path):
    """SQLite's progress handler swallows the KeyboardInterrupt and stops the statement
    ("interrupted"); not the owner's timeout, so it is a cancel."""
    path = _sqlite_table(tmp_path / "slow.db", users=2, rows=100000)
    conn = dpsql.connect(f"sqlite:///{path}", catalog=CATALOG, budget=(10, 1e-5),
                         ledger=":memory:")
    timers = _interrupt_when_charged(ledger_of(conn), None)
    timers[1].cancel()  # no DuckDB here: the timeout of the test run is the watchdog
    start = time.monotonic()
    with pytest.raises(QueryCancelled):
        conn.execute(SLOW_SQL, epsilon=1.0)
    timers[0].cancel()
    assert time.monotonic() - start < 20
    assert conn.budget.spent == (1.0, 0.0)
    assert ledger_of(conn).log()[0]["outcome"] == "cancelled"
    conn.close()


def test_the_owners_statement_timeout_ends_a_duckdb_query(slow_file):
    # the slow query runs far longer than the timeout: it is interrupted, the failure
    # keeps the charge (how long a query runs depends on the data), and the connection
    # answers the next query
    catalog = {**CATALOG, "limits": {"statement_timeout_seconds": 0.5}}
    conn = dpsql.connect(slow_file, catalog=catalog, budget=(10, 1e-5), ledger=":memory:")
    try:
        start = time.monotonic()
        with pytest.raises(dpsql.DpsqlError) as info:
            conn.execute(SLOW_SQL, epsilon=1.0)
        assert time.monotonic() - start < 30
        assert not isinstance(info.value, QueryCancelled)
        assert info.value.charged
        assert conn.budget.spent == (1.0, 0.0)
        assert conn.execute("SELECT COUNT(*) FROM t", epsilon=1.0).rows
    finally:
        conn.close()


def test_a_worker_exception_of_any_kind_is_the_backend_error(connect, monkeypatch, capsys):
    # an exception DuckDB's fetch raises outside its own classes (OverflowError for a huge
    # INTERVAL) must come back as the stage's error, not end the worker thread through
    # threading.excepthook, which prints the backend's text on the analyst's terminal
    conn = connect()

    backend = backend_of(conn)
    def run(statement):
        raise OverflowError("secret backend text")

    hooked = []
    monkeypatch.setattr(backend, "_run", run)
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    with pytest.raises(dpsql.DpsqlError) as info:
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=1.0)
    assert info.value.charged
    assert "secret" not in str(info.value)
    assert "secret" not in capsys.readouterr().err
    assert hooked == []


def test_an_interrupt_that_left_a_ledger_transaction_open_does_not_wedge_the_ledger(connect):
    # Ctrl-C between BEGIN and the rest of a ledger transaction used to leave it open:
    # every later query failed ("cannot start a transaction within a transaction") and
    # the file stayed locked for every other process
    conn = connect()
    ledger_of(conn)._db.execute("BEGIN IMMEDIATE")  # what the interrupt left behind
    res = conn.execute("SELECT COUNT(*) FROM pums", epsilon=1.0)
    assert res.cost == (1.0, 0.0)
    assert conn.budget.spent == (1.0, 0.0)
    assert not ledger_of(conn)._db.in_transaction


def test_ctrl_c_in_sqlites_exact_sum_is_a_cancel(tmp_path, monkeypatch):
    """A Ctrl-C that lands on entry to ``dpsql_isum``'s Python code (before any handler
    in it can catch it) fails the statement as an error of the aggregate; that aggregate
    catches every Exception, so the error can only be the interrupt: a cancel, not a
    failure "that may depend on the data" (attack review). Simulated by a step that
    raises KeyboardInterrupt, as the interrupt does on entry."""
    from dpsql.backends.sqlite import ExactSum

    path = _sqlite_table(tmp_path / "sums.db", users=50, rows=1000)

    def interrupted(self, value):
        raise KeyboardInterrupt

    monkeypatch.setattr(ExactSum, "step", interrupted)
    with dpsql.connect(f"sqlite:///{path}", catalog=CATALOG, budget=(10, 1e-5),
                       ledger=":memory:") as conn:
        with pytest.raises(QueryCancelled):
            conn.execute("SELECT SUM(x) FROM t", epsilon=1.0)
        assert ledger_of(conn).log()[0]["outcome"] == "cancelled"


@pytest.mark.parametrize("where", ["hash", "sum"])
def test_ctrl_c_caught_in_sqlites_python_code_is_a_cancel(tmp_path, monkeypatch, where):
    """A Ctrl-C that dpsql's Python code on SQLite catches (the keyed hash of the L0
    step, the exact sum) gave a wrong value there and let the statement run on: the
    statement is cancelled, even when it ended before the progress handler looked
    again, and its rows are never released (attack review: the answer was released
    with a summand dropped, or the failure reported as one that depends on the data)."""
    from dpsql.backends import sqlite as sqlite_backend

    # few rows: the statement ends before the progress handler first looks
    path = _sqlite_table(tmp_path / "caught.db", users=5, rows=20)
    if where == "hash":
        def interrupted(*args):
            raise KeyboardInterrupt

        monkeypatch.setattr(sqlite_backend, "keyed_hash", interrupted)
        sql, kw = "SELECT x, COUNT(*) FROM t GROUP BY x", {"max_groups": 1, "delta": 1e-6}
    else:
        def caught(self, value):
            self._cancel()  # what ExactSum.step does with a KeyboardInterrupt in its body

        monkeypatch.setattr(sqlite_backend.ExactSum, "step", caught)
        sql, kw = "SELECT SUM(x) FROM t", {}
    with dpsql.connect(f"sqlite:///{path}", catalog=CATALOG, budget=(10, 1e-5),
                       ledger=":memory:") as conn:
        with pytest.raises(QueryCancelled):
            conn.execute(sql, epsilon=1.0, **kw)
        assert ledger_of(conn).log()[0]["outcome"] == "cancelled"
