"""``dpsql shell`` and ``dpsql query`` in a real terminal (a pseudo-terminal, pexpect).

Ctrl-C during a long query leaves the shell at its prompt with the charge logged as
cancelled; ``dpsql query`` exits with one line and no traceback.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

import duckdb
import pytest

from dpsql.ledger import Ledger

pexpect = pytest.importorskip("pexpect")

ROOT = Path(__file__).resolve().parents[2]
SLOW_SQL = "SELECT COUNT(*) FROM t a JOIN t b ON a.uid = b.uid AND a.x <> b.x"
CATALOG = """\
dataset: slow
tables:
  t:
    user_key: uid
    columns:
      uid: {type: int}
      x: {type: int, lower: 0, upper: 99}
"""


@pytest.fixture
def slow(tmp_path):
    """A database whose self-join on the user key runs far longer than any test waits."""
    db = tmp_path / "slow.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT i % 2 AS uid, i % 100 AS x FROM range(400000) r(i)")
    con.close()
    catalog = tmp_path / "slow.yaml"
    catalog.write_text(CATALOG)
    return db, catalog, tmp_path / "ledger.sqlite"


def _wait_for_charge(ledger: Path, timeout: float = 60.0) -> None:
    """Waits until the ledger holds a charge still running (written before the data is
    read), then a little longer so the database is surely reading."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ledger.exists():
            con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
            try:
                if con.execute("SELECT count(*) FROM entries WHERE outcome = 'charged'"
                               ).fetchone()[0]:
                    time.sleep(0.5)
                    return
            except sqlite3.OperationalError:  # the schema is being created
                pass
            finally:
                con.close()
        time.sleep(0.1)
    raise AssertionError("the query was never charged")


def _spawn(args: list[str], tmp_path: Path):
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "TERM": "dumb",
           "NO_COLOR": "1"}
    for pin in ("DPSQL_LEDGER", "DPSQL_ANALYST", "DPSQL_CATALOG"):
        env.pop(pin, None)
    return pexpect.spawn(sys.executable, ["-m", "dpsql.cli", *args], cwd=str(ROOT), env=env,
                         encoding="utf-8", timeout=60, dimensions=(40, 200))


def test_ctrl_c_in_the_shell_cancels_the_query_and_returns_to_the_prompt(slow, tmp_path):
    db, catalog, ledger = slow
    child = _spawn(["shell", "-d", str(db), "-c", str(catalog), "--ledger", str(ledger),
                    "--budget", "10", "1e-5", "-e", "1", "--analyst", "ann"], tmp_path)
    try:
        child.expect_exact("dpsql> ")
        child.sendline(SLOW_SQL + ";")
        _wait_for_charge(ledger)  # the query is running (it would run for minutes)
        child.sendintr()
        child.expect("cancelled: query cancelled; its charge is kept", timeout=15)
        child.expect(r"remaining budget: epsilon=9, delta=1e-05")
        child.expect_exact("dpsql> ")
        before = child.before
        assert "Traceback" not in before
        child.sendline(".budget")
        child.expect(r"analyst ann: spent epsilon=1, delta=0; remaining epsilon=9")
        child.expect_exact("dpsql> ")
        child.sendline(".quit")
        child.expect(pexpect.EOF, timeout=15)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    entries = Ledger(ledger).log()
    assert [(e["outcome"], e["epsilon"], e["analyst"]) for e in entries] == [
        ("cancelled", 1.0, "ann")]


def test_the_shell_spells_hints_as_shell_commands(slow, tmp_path):
    db, catalog, ledger = slow
    child = _spawn(["shell", "-d", str(db), "-c", str(catalog), "--ledger", str(ledger),
                    "--budget", "10", "1e-5", "-e", "1"], tmp_path)
    try:
        child.expect_exact("dpsql> ")
        child.sendline("SELECT uid % 2 AS k, COUNT(*) FROM t GROUP BY k;")
        child.expect(r"error: .*delta > 0 \(e\.g\. \.delta 1e-6\)")
        child.expect_exact("dpsql> ")
        assert "delta=1e-6" not in child.before
        child.sendline(".quit")
        child.expect(pexpect.EOF, timeout=15)
    finally:
        child.close(force=True)


def test_ctrl_c_in_dpsql_query_exits_with_one_line(slow, tmp_path):
    db, catalog, ledger = slow
    child = _spawn(["query", SLOW_SQL, "-d", str(db), "-c", str(catalog), "--ledger",
                    str(ledger), "--budget", "10", "1e-5", "-e", "0.5"], tmp_path)
    try:
        _wait_for_charge(ledger)  # started, charged and running
        child.sendintr()
        child.expect(pexpect.EOF, timeout=15)
        output = child.before
    finally:
        child.close(force=True)
    assert child.exitstatus == 130, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert "Traceback" not in output
    assert len(lines) == 1, output  # the terminal's "^C" echo, then the one line
    assert "cancelled: query cancelled; its charge is kept" in lines[0], output
    assert [(e["outcome"], e["epsilon"]) for e in Ledger(ledger).log()] == [
        ("cancelled", 0.5)]
