"""A query's transactions in the ledger: one durable charge under the lock, its outcome
carried by the next write or settled without the lock (:mod:`dpsql.ledger.charging`,
:mod:`dpsql.ledger.outcomes`), and the early refusal by the charge's rule."""

from __future__ import annotations

import logging
import shutil
import time
import uuid

import pytest

import dpsql
from dpsql.accounting import Cost
from dpsql.datasets import load_pums
from dpsql.errors import BudgetExhaustedError
from dpsql.ledger import Ledger, Running, outcomes
from tests.support import NO_POSTGRES, PG_ADMIN_URL, ledger_of

COUNT = "SELECT COUNT(*) FROM pums"
CATALOG = {"dataset": "pums", "budget": {"epsilon": 10.0, "delta": 1e-5},
           "tables": {"pums": {"user_key": "pid", "columns": {
               "pid": "int", "age": {"type": "int", "lower": 0, "upper": 100}}}}}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("db") / "pums.duckdb"
    load_pums(path)
    return path


def _record_writes(led: Ledger) -> list[bool]:
    """The ``lock`` argument of every write transaction ``led`` begins, in order."""
    calls: list[bool] = []
    begin = led._s.begin_write

    def recording(lock: bool = True, wait: bool = True) -> None:
        calls.append(lock)
        begin(lock, wait)

    led._s.begin_write = recording
    return calls


def _outcomes(path) -> dict[int, str]:
    """Each entry's outcome as another connection reads the file."""
    other = Ledger(path, readonly=True)
    try:
        return {e["id"]: e["outcome"] for e in other.log()}
    finally:
        other.close()


def test_a_query_is_one_durable_commit_its_outcome_rides_the_next(db, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(outcomes, "SETTLE_AFTER", 60.0)  # no flusher in this test
    path = tmp_path / "l.sqlite"
    with dpsql.connect(db, catalog=CATALOG, ledger=path, analyst="a") as conn:
        led = ledger_of(conn)
        writes = _record_writes(led)
        first = conn.execute(COUNT, epsilon=0.5)
        assert writes == [True], writes  # the charge only
        assert _outcomes(path) == {1: "charged"}
        for _ in range(3):  # the later askings come from the plan cache
            conn.execute(COUNT, epsilon=0.5)
        assert writes == [True] * 4, writes  # each charge carried the outcome before it
        assert _outcomes(path) == {1: "answered", 2: "answered", 3: "answered",
                                   4: "charged"}
        # a read of outcomes on this connection sees its own first
        assert [e["outcome"] for e in led.log()] == ["answered"] * 4
        assert writes == [True] * 4 + [False], writes  # written without the lock
        assert first.cost != (0.0, 0.0)
        conn.execute(COUNT, epsilon=0.5)
    assert _outcomes(path)[5] == "answered"  # close settles
    assert Ledger(path).verify()["charges"] == 5


def test_an_outcome_is_settled_soon_without_a_next_charge(db, tmp_path, monkeypatch):
    monkeypatch.setattr(outcomes, "SETTLE_AFTER", 0.05)
    path = tmp_path / "l.sqlite"
    with dpsql.connect(db, catalog=CATALOG, ledger=path, analyst="a") as conn:
        writes = _record_writes(ledger_of(conn))
        conn.execute(COUNT, epsilon=0.5)
        deadline = time.monotonic() + 10
        while _outcomes(path)[1] != "answered" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _outcomes(path) == {1: "answered"}
        assert writes == [True, False], writes  # the flusher's, without the charge lock


def test_an_outcome_lands_only_on_the_entry_its_connection_committed(tmp_path, caplog):
    path = tmp_path / "l.sqlite"
    a = Ledger(path)
    a.set_budget("d", (10.0, 0.0))
    shutil.copyfile(path, tmp_path / "before.sqlite")
    eid = a.charge("d", "alice", Cost(1.0), "SELECT 1")
    # the file is rolled back under the open connection (same inode), and another
    # connection charges the same entry id with another query
    shutil.copyfile(tmp_path / "before.sqlite", path)
    b = Ledger(path)
    b.grant("d", (1.0, 0.0))  # (SQLite keeps a cache while the file's counter stays)
    assert b.charge("d", "bob", Cost(2.0), "SELECT 2") == eid
    with caplog.at_level(logging.ERROR, logger="dpsql.owner"):
        a.finish(eid, "answered")
        a.settle()
    assert "could not be recorded" in caplog.text
    assert [(e["id"], e["analyst"], e["outcome"]) for e in b.log()] == \
        [(eid, "bob", "charged")]
    b.verify()
    b.finish(eid, "answered")
    assert b.log()[0]["outcome"] == "answered"  # a read of the log settles first
    a.close()
    b.close()


def test_the_early_refusal_says_what_the_charge_says(db, tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("d", (1.0, 0.0))
    led.set_budget("d", (0.5, 0.0), analyst="alice")
    cases = [("alice", None, Cost(0.75)),        # the analyst's own total
             ("bob", None, Cost(1.5)),           # the data set's total
             ("bob", ((0.25, 0.0), Running()), Cost(0.5))]  # the connection's cap
    for analyst, cap, cost in cases:
        early = led.view("d", analyst, cap).refusal(cost)
        with pytest.raises(BudgetExhaustedError) as info:
            led.charge("d", analyst, cost, "q", cap)
        assert early is not None and str(info.value) == early
    assert led.view("d", "bob").refusal(Cost(0.5)) is None
    assert led.spent("d").basic == (0.0, 0.0)
    led.close()


@pytest.fixture
def pg_ledger():
    if not PG_ADMIN_URL:
        pytest.skip(NO_POSTGRES)
    schema = f"ledger_{uuid.uuid4().hex[:12]}"
    yield f"{PG_ADMIN_URL}?schema={schema}"
    import psycopg
    import sqlalchemy as sa

    u = sa.make_url(PG_ADMIN_URL).set(drivername="postgresql")
    with psycopg.connect(u.render_as_string(hide_password=False), autocommit=True) as con:
        con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_postgresql_outcome_does_not_wait_for_a_charger(pg_ledger, caplog):
    import psycopg
    import sqlalchemy as sa

    led = Ledger(pg_ledger, timeout=1)
    led.set_budget("d", (10.0, 0.0))
    eid = led.charge("d", "alice", Cost(1.0), "SELECT 1")
    u = sa.make_url(pg_ledger)
    schema = u.query["schema"]
    conninfo = u.set(drivername="postgresql", query={}).render_as_string(hide_password=False)
    with psycopg.connect(conninfo) as charger:  # a charger in the middle of its transaction
        charger.execute(f'SELECT value FROM "{schema}".meta WHERE key = \'id\' FOR UPDATE')
        with caplog.at_level(logging.ERROR, logger="dpsql.owner"):
            led.finish(eid, "answered")
            led.settle()
        assert "could not be recorded" not in caplog.text
        charger.rollback()
    assert led.log()[0]["outcome"] == "answered"
    assert led.verify()["charges"] == 1
    led.close()


def test_a_connections_cap_is_a_running_total(tmp_path):
    """The cap's spend is added up as charges come (ledger.values.Running), not summed
    over the connection's history at every charge: the same total, bit for bit."""
    from dpsql.accounting import NOTHING

    led = Ledger(str(tmp_path / "l.sqlite"))
    led.set_budget("d", (1000.0, 1e-3))
    cap = ((500.0, 1e-3), Running())
    costs = [Cost(0.1 * (i % 7) + 0.01, 1e-9 * (i % 3)) for i in range(300)]
    for cost in costs:
        led.charge("d", "a", cost, "q", cap)
    summed = NOTHING
    for cost in costs:  # the history added up again, as every charge used to
        summed = summed.plus(cost)
    assert cap[1].spent == summed
    assert led.view("d", "a", cap).refusal(Cost(500.0)) is not None


def test_a_process_that_exits_without_closing_settles_its_outcomes(db, tmp_path):
    """The interpreter's exit writes the queued outcome (dpsql.ledger.outcomes)."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "l.sqlite"
    script = textwrap.dedent(f"""
        import dpsql
        from dpsql.ledger import outcomes
        outcomes.SETTLE_AFTER = 600.0  # only the exit can write it
        conn = dpsql.connect({str(db)!r}, catalog={CATALOG!r}, ledger={str(path)!r},
                             analyst="a")
        print(conn.execute({COUNT!r}, epsilon=0.5).rows[0][0] is not None)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
    assert _outcomes(path) == {1: "answered"}


def test_a_connection_dropped_unclosed_still_writes_its_outcome(db, tmp_path):
    """The flusher holds the ledger while outcomes are queued (dpsql.ledger.outcomes)."""
    import gc

    path = tmp_path / "l.sqlite"

    def ask(answer_cache):  # a helper that opens, asks and returns, never closing
        conn = dpsql.connect(db, catalog=CATALOG, ledger=path, analyst="a",
                             answer_cache=answer_cache)
        return conn.execute(COUNT, epsilon=0.5)

    ask(False)
    gc.collect()
    deadline = time.monotonic() + 10
    while _outcomes(path) != {1: "answered"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _outcomes(path) == {1: "answered"}
    # an answer for the cache is written before the call returns: another connection
    # asking the same query at once gets it, free (attack review)
    first = ask(True)
    again = ask(True)
    assert again.cost == (0.0, 0.0) and again.rows == first.rows
    assert _outcomes(path) == {1: "answered", 2: "answered"}


def test_a_forked_child_leaves_the_parents_outcomes_to_the_parent(db, tmp_path):
    """A child of os.fork() exits at once: it neither waits on the parent's locks nor
    writes the parent's queued outcomes through the connection it inherited."""
    import sqlite3
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "l.sqlite"
    data = tmp_path / "pums.sqlite"  # DuckDB itself does not survive a fork
    with sqlite3.connect(data) as con:
        con.execute("CREATE TABLE pums (pid INTEGER PRIMARY KEY, age INTEGER)")
        con.executemany("INSERT INTO pums VALUES (?, ?)", [(i, i % 90) for i in range(50)])
    con.close()
    script = textwrap.dedent(f"""
        import os, sys, faulthandler
        import dpsql, dpsql.ledger
        from dpsql.ledger import outcomes
        outcomes.SETTLE_AFTER = 600.0
        conn = dpsql.connect("sqlite:///{data}", catalog={CATALOG!r},
                             ledger={str(path)!r}, analyst="a")
        conn.execute({COUNT!r}, epsilon=0.5)
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(20, exit=True)  # a hang: exit code 1
            try:  # the parent's ledger connection is refused here, at once
                conn.execute({COUNT!r}, epsilon=0.5)
            except dpsql.LedgerError as exc:
                sys.exit(0 if "forked" in str(exc) else 4)
            sys.exit(5)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        other = dpsql.ledger.Ledger({str(path)!r}, readonly=True)
        print(code, len(conn._ledger._pending._items), other.log()[0]["outcome"])
        other.close()
        conn.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    # the child exited at once, and left the outcome to the parent, which wrote it at close
    assert out.stdout.split() == ["0", "1", "charged"]
    assert _outcomes(path) == {1: "answered"}


def test_a_lock_held_by_another_process_stalls_no_read(db, tmp_path, monkeypatch):
    """The flusher never waits for another process's write lock while it holds the
    connection: reads go on, and the outcome is written once the lock is free."""
    import sqlite3

    monkeypatch.setattr(outcomes, "SETTLE_AFTER", 0.05)
    monkeypatch.setenv("DPSQL_LEDGER_TIMEOUT", "3")
    path = tmp_path / "l.sqlite"
    conn = dpsql.connect(db, catalog=CATALOG, ledger=path, analyst="a")
    conn.execute(COUNT, epsilon=0.5)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's charge, in the middle
    try:
        time.sleep(0.3)  # the flusher tries meanwhile, and backs off
        started = time.monotonic()
        assert conn.budget.spent == (0.5, 0.0)
        assert [e["outcome"] for e in ledger_of(conn).log()] == ["charged"]
        assert time.monotonic() - started < 1.0  # not the ledger's 3 s timeout
    finally:
        other.execute("ROLLBACK")
        other.close()
    conn.close()
    assert _outcomes(path) == {1: "answered"}


def test_a_close_from_another_thread_waits_for_the_running_querys_outcome(tmp_path,
                                                                          monkeypatch):
    """``close()`` while another thread's charged query still runs: the outcome that
    query records after the close went to a stopped queue and was never written (attack
    review); the close now waits for it (at most ``outcomes.CLOSE_WAIT``). A close
    from the query's own thread, or of a ledger used directly, does not wait."""
    import sqlite3
    import threading

    from dpsql.backends.sqlite import SQLiteBackend

    data = tmp_path / "t.db"
    con = sqlite3.connect(data)
    con.execute("CREATE TABLE t (pid INTEGER, x REAL)")
    con.execute("INSERT INTO t VALUES (1, 1.0)")
    con.commit()
    con.close()
    run = SQLiteBackend.execute

    def slow(self, expression):
        time.sleep(0.6)
        return run(self, expression)

    monkeypatch.setattr(SQLiteBackend, "execute", slow)
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": 0, "upper": 2}}}}}
    ledger = tmp_path / "ledger.sqlite"
    conn = dpsql.connect(f"sqlite:///{data}", catalog=catalog, budget=(10, 0.5),
                         ledger=str(ledger))
    out = {}
    asking = threading.Thread(target=lambda: out.setdefault(
        "rows", conn.execute("SELECT SUM(x) FROM t", epsilon=0.1).rows))
    asking.start()
    time.sleep(0.2)
    conn.close()
    asking.join(10)
    assert len(out["rows"]) == 1
    assert list(_outcomes(ledger).values()) == ["answered"]

    direct = Ledger(str(tmp_path / "direct.sqlite"))
    direct.ensure_budget("d", (10.0, 0.5), "*", "test")
    direct.charge("d", "a", Cost(0.1, 0.0), "SELECT 1")  # never finished
    began = time.monotonic()
    direct.close()
    assert time.monotonic() - began < outcomes.CLOSE_WAIT
