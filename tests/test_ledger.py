"""The persistent ledger: races, kills, refusals, failures, restarts, bad files."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

import dpsql
from dpsql.accounting import Accounting, Cost, spent, zcdp_to_dp
from dpsql.datasets import catalog_path, load_pums
from dpsql.ledger import Ledger
from tests.support import backend_of

COUNT = "SELECT COUNT(*) FROM pums"


def catalog(epsilon=10.0, delta=1e-5, analysts=None):
    doc = {"dataset": "pums", "budget": {"epsilon": epsilon, "delta": delta},
           "tables": {"pums": {"user_key": "pid", "columns": {
               "pid": "int", "age": {"type": "int", "lower": 0, "upper": 100},
               "sex": {"type": "int", "values": [0, 1]}}}}}
    if analysts:
        doc["budget"]["analysts"] = analysts
    return doc


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "pums.duckdb"
    load_pums(path)
    return path


def test_default_ledger_survives_restart(db):
    with dpsql.connect(db, catalog=catalog_path("pums")) as conn:
        conn.execute(COUNT, epsilon=1.5)
        conn.execute("SELECT income // 1000, COUNT(*) FROM pums GROUP BY 1", epsilon=1.0,
                     delta=1e-6)
    assert (db.parent / "pums.duckdb.ledger.sqlite").exists()
    with dpsql.connect(db, catalog=catalog_path("pums")) as conn:
        assert conn.budget.spent == pytest.approx((2.5, 1e-6))
        assert conn.budget.remaining == pytest.approx((7.5, 9e-6))


def test_refusals_charge_nothing_and_are_logged(db):
    with dpsql.connect(db, catalog=catalog(), analyst="alice") as conn:
        for sql in ("SELECT * FROM pums", "SELEC 1", "SELECT COUNT(*) FROM nope"):
            with pytest.raises(dpsql.DpsqlError):
                conn.execute(sql, epsilon=1.0)
        with pytest.raises(dpsql.BudgetExhaustedError):
            conn.execute(COUNT, epsilon=11.0)
        assert conn.budget.spent == (0.0, 0.0)
    log = Ledger(db.parent / "pums.duckdb.ledger.sqlite").log()
    assert [e["outcome"] for e in log] == ["refused"] * 4
    assert all(e["analyst"] == "alice" and e["epsilon"] == 0 for e in log)
    assert "BudgetExhaustedError" in log[0]["detail"]


def test_failure_after_charge_keeps_it(db, monkeypatch):
    with dpsql.connect(db, catalog=catalog(), ledger=db.parent / "l.sqlite") as conn:
        # failure injection: the backend dies while running the (already charged) query
        def fail(expression):
            raise dpsql.BackendError("the backend failed while running the query")

        monkeypatch.setattr(backend_of(conn), "execute", fail)
        with pytest.raises(dpsql.BackendError) as info:
            conn.execute("SELECT SUM(age) FROM pums", epsilon=1.0)
        assert info.value.charged
        assert conn.budget.spent == (1.0, 0.0)
    (entry,) = Ledger(db.parent / "l.sqlite").log()
    assert entry["outcome"] == "failed" and entry["epsilon"] == 1.0


def test_per_analyst_budgets_and_caps(db):
    cat = catalog(epsilon=3.0, analysts={"alice": {"epsilon": 1.0, "delta": 0}})
    ledger = db.parent / "l.sqlite"
    alice = dpsql.connect(db, catalog=cat, ledger=ledger, analyst="alice")
    alice.execute(COUNT, epsilon=1.0)
    with pytest.raises(dpsql.BudgetExhaustedError, match="analyst 'alice'"):
        alice.execute(COUNT, epsilon=0.1)
    bob = dpsql.connect(db, catalog=cat, ledger=ledger, analyst="bob", budget=(1.5, 0))
    bob.execute(COUNT, epsilon=1.0)
    with pytest.raises(dpsql.BudgetExhaustedError, match="connection"):
        bob.execute(COUNT, epsilon=1.0)  # over bob's own cap of 1.5
    carol = dpsql.connect(db, catalog=cat, ledger=ledger, analyst="carol", budget=(100, 0))
    with pytest.raises(dpsql.BudgetExhaustedError, match="data set"):
        carol.execute(COUNT, epsilon=1.5)  # 2 of the data set's 3 are spent
    carol.execute(COUNT, epsilon=1.0)
    assert carol.budget.remaining == (0.0, 0.0)
    # a bigger catalog budget or connection budget does not raise the recorded total
    dave = dpsql.connect(db, catalog=catalog(epsilon=50.0), ledger=ledger, analyst="dave",
                         budget=(50, 0))
    with pytest.raises(dpsql.BudgetExhaustedError):
        dave.execute(COUNT, epsilon=0.5)


def test_owner_commands(db):
    ledger = Ledger(db.parent / "l.sqlite")
    ledger.set_budget("pums", (1.0, 0.0))
    conn = dpsql.connect(db, catalog=catalog(), ledger=ledger, analyst="a")
    conn.execute(COUNT, epsilon=1.0)
    with pytest.raises(dpsql.BudgetExhaustedError):
        conn.execute(COUNT, epsilon=1.0)
    ledger.grant("pums", (1.0, 0.0))
    conn.execute(COUNT, epsilon=1.0)
    with pytest.raises(dpsql.LedgerError, match="no budget set"):
        ledger.grant("other", (1.0, 0.0))


def test_corrupted_or_foreign_ledger_is_refused(db, tmp_path):
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database at all" * 100)
    foreign = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    for path in (garbage, foreign):
        with pytest.raises(dpsql.LedgerError):
            dpsql.connect(db, catalog=catalog(), ledger=path)
    with pytest.raises(dpsql.LedgerError, match="is a directory"):
        Ledger(tmp_path)
    # a truncated real ledger is refused too, never silently restarted
    real = tmp_path / "real.sqlite"
    with dpsql.connect(db, catalog=catalog(), ledger=real) as conn:
        conn.execute(COUNT, epsilon=1.0)
    data = real.read_bytes()
    real.write_bytes(data[:100] + b"\0" * 50 + data[150:])
    with pytest.raises(dpsql.LedgerError):
        dpsql.connect(db, catalog=catalog(), ledger=real)


def test_zcdp_bound_admits_more_small_queries_than_basic_composition():
    led = Ledger(":memory:")
    led.ensure_budget("d", (1.0, 1e-5), accountant="zcdp")
    for _ in range(400):  # basic composition would stop after 100
        led.charge("d", "a", Cost(0.01), "q")
    s = led.spent("d")
    assert s.basic[0] == pytest.approx(4.0)
    assert s.zcdp_epsilon(1e-5) <= 1.0
    assert zcdp_to_dp(s.rho, 1e-5) == pytest.approx(s.zcdp_epsilon(1e-5))
    # without delta to convert with, only basic composition applies
    strict = Accounting((1.0, 0.0))
    assert not strict.admits([Cost(0.01)] * 101)
    assert strict.admits([Cost(0.01)] * 100)
    # partition-selection delta counts against the conversion's delta
    assert not Accounting((1.0, 1e-5)).fits(spent([Cost(0.01, 1e-5)] * 150))


WORKER = textwrap.dedent("""
    import sys, dpsql
    db, ledger, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cat = {"dataset": "pums", "tables": {"pums": {"user_key": "pid",
           "columns": {"pid": "int"}}}}
    ok = refused = 0
    conn = dpsql.connect(db, catalog=cat, ledger=ledger, analyst="w")
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(n):
        try:
            conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.125)
            ok += 1
        except dpsql.BudgetExhaustedError:
            refused += 1
    print(ok, refused, flush=True)
""")


@pytest.mark.slow  # load: racing processes
def test_processes_racing_never_overspend(db, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ledger = tmp_path / "race.sqlite"
    Ledger(ledger).set_budget("pums", (12.5, 0.0))  # exactly 100 queries of 0.125
    procs = [subprocess.Popen([sys.executable, str(script), str(db), str(ledger), "50"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:  # start them together
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        results.append(tuple(map(int, out.split())))
    assert sum(r[0] for r in results) == 100
    assert sum(r[1] for r in results) == 300
    led = Ledger(ledger)
    assert led.spent("pums").basic == (12.5, 0.0)
    assert sum(1 for e in led.log(limit=1000) if e["outcome"] == "answered") == 100


KILLED = textwrap.dedent("""
    import sys, dpsql
    db, ledger = sys.argv[1], sys.argv[2]
    cat = {"dataset": "pums", "budget": {"epsilon": 1e9, "delta": 0.5},
           "tables": {"pums_dup": {"user_key": "pid", "max_groups": 5, "columns": {
               "pid": "int", "age": {"type": "int", "lower": 0, "upper": 100}}}}}
    conn = dpsql.connect(db, catalog=cat, ledger=ledger, analyst="k")
    while True:
        conn.execute("SELECT age, COUNT(*), SUM(age) FROM pums_dup GROUP BY age",
                     epsilon=0.5, delta=1e-9)
""")


def test_sigkill_mid_query_leaves_a_valid_ledger_with_the_charge(db, tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    ledger = tmp_path / "kill.sqlite"
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(ledger)])
    deadline = time.time() + 120
    charged = 0
    while time.time() < deadline and charged < 5:
        assert proc.poll() is None, "the worker died on its own"
        time.sleep(0.05)
        if ledger.exists():
            try:
                con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=5)
                charged = con.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
                con.close()
            except sqlite3.OperationalError:
                pass
    assert charged >= 5, "the worker never charged"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    con = sqlite3.connect(ledger)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    outcomes = [r[0] for r in con.execute("SELECT outcome FROM entries ORDER BY id")]
    con.close()
    # every charge survived; at most the last one was cut off mid-query
    assert set(outcomes[:-1]) == {"answered"}
    assert outcomes[-1] in ("answered", "charged")
    led = Ledger(ledger)
    assert led.spent("pums").basic[0] == pytest.approx(0.5 * len(outcomes))


def test_threads_racing_never_overspend(db, tmp_path):
    import threading

    ledger = tmp_path / "threads.sqlite"
    Ledger(ledger).set_budget("pums", (5.0, 0.0))  # exactly 40 queries of 0.125
    results = []

    def work():
        conn = dpsql.connect(db, catalog=catalog(), ledger=ledger, analyst="t")
        ok = 0
        for _ in range(10):
            try:
                conn.execute(COUNT, epsilon=0.125)
                ok += 1
            except dpsql.BudgetExhaustedError:
                pass
        results.append(ok)
        conn.close()

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 40
    assert Ledger(ledger).spent("pums").basic == (5.0, 0.0)
