"""Issue 24: the ledger never forgets, never silently resets, and fails cleanly.

File identity (deletion, truncation, replacement, hard links, symlinks of the ledger and
the database), tamper evidence (hash chain, keyed MACs, checkpoint, running totals),
budget numbers at every entry point, analyst names, bounded refusals, insertion order,
the one admission rule, read-only and full disks, locks, and Ctrl-C around the charge.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import shutil
import sqlite3
import tempfile
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import dpsql
from dpsql import ledger as ledger_mod
from dpsql.accounting import Accounting, Cost, spent
from dpsql.cli import main
from dpsql.datasets import load_pums
from dpsql.errors import LedgerError, PrivacyParameterError, QueryCancelled
from dpsql.ledger import (
    ANALYST_ENV,
    CATALOG_ENV,
    DATABASE_ENV,
    KEY_ENV,
    LEDGER_ENV,
    LEDGER_ID_ENV,
    TIMEOUT_ENV,
    Ledger,
)
from tests.support import ledger_of

COUNT = "SELECT COUNT(*) FROM pums"


@pytest.fixture(autouse=True)
def _no_pins_from_outside(monkeypatch):
    for name in (LEDGER_ENV, ANALYST_ENV, CATALOG_ENV, DATABASE_ENV, LEDGER_ID_ENV, KEY_ENV,
                 TIMEOUT_ENV):
        monkeypatch.delenv(name, raising=False)


def catalog(dataset="pums", **top):
    doc = {"budget": {"epsilon": 10.0, "delta": 1e-5},
           "tables": {"pums": {"user_key": "pid", "columns": {
               "pid": "int", "age": {"type": "int", "lower": 0, "upper": 100}}}}}
    if dataset is not None:
        doc["dataset"] = dataset
    doc.update(top)
    return doc


@pytest.fixture(scope="module")
def pums_template(tmp_path_factory):
    path = tmp_path_factory.mktemp("pums") / "pums.duckdb"
    load_pums(path)
    return path


@pytest.fixture
def db(tmp_path, pums_template):
    path = tmp_path / "pums.duckdb"
    shutil.copy(pums_template, path)
    return path


def charged_ledger(path, n=3, eps=0.5) -> Ledger:
    led = Ledger(path)
    led.set_budget("d", (10.0, 1e-5))
    for i in range(n):
        led.charge("d", "alice", Cost(eps), f"q{i}")
    return led


# -- never forget: deletion, truncation, replacement, links ------------------------------


def test_a_ledger_deleted_while_open_stops_the_next_charge(tmp_path, db):
    path = tmp_path / "l.sqlite"
    with dpsql.connect(db, catalog=catalog(), ledger=path) as conn:
        conn.execute(COUNT, epsilon=1.0)
        os.unlink(path)
        with pytest.raises(LedgerError, match="deleted while this connection"):
            conn.execute(COUNT, epsilon=1.0)


def test_a_ledger_replaced_while_open_stops_the_next_charge(tmp_path, db):
    path = tmp_path / "l.sqlite"
    other = tmp_path / "other.sqlite"
    Ledger(other).close()
    with dpsql.connect(db, catalog=catalog(), ledger=path) as conn:
        conn.execute(COUNT, epsilon=1.0)
        os.replace(other, path)
        with pytest.raises(LedgerError, match="replaced by another file"):
            conn.execute(COUNT, epsilon=1.0)


def test_a_copy_swapped_in_under_the_same_id_is_still_another_file(tmp_path):
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path)
    shutil.copy(path, tmp_path / "copy.sqlite")
    os.replace(tmp_path / "copy.sqlite", path)
    with pytest.raises(LedgerError, match="replaced"):
        led.charge("d", "alice", Cost(0.1), "q")


@pytest.mark.parametrize("content", [b"", b"not a ledger at all" * 100])
def test_an_existing_empty_or_foreign_file_is_never_taken_as_new(tmp_path, db, content):
    path = tmp_path / "l.sqlite"
    path.write_bytes(content)
    with pytest.raises(LedgerError, match="refusing to start a fresh budget"):
        dpsql.connect(db, catalog=catalog(), ledger=path)
    assert path.read_bytes() == content  # untouched


def test_a_truncated_ledger_is_refused(tmp_path, db):
    path = tmp_path / "l.sqlite"
    charged_ledger(path).close()
    with open(path, "r+b") as f:  # what `: > ledger.sqlite` leaves
        f.truncate(0)
    with pytest.raises(LedgerError, match="empty file"):
        dpsql.connect(db, catalog=catalog(), ledger=path)
    charged_ledger(tmp_path / "half.sqlite").close()
    with open(tmp_path / "half.sqlite", "r+b") as f:  # a copy cut short
        f.truncate(4096)
    with pytest.raises(LedgerError):
        Ledger(tmp_path / "half.sqlite")


def test_a_hard_link_to_the_ledger_is_refused_and_a_symlink_is_the_same_ledger(tmp_path):
    path = tmp_path / "l.sqlite"
    charged_ledger(path).close()
    os.symlink(path, tmp_path / "sym.sqlite")
    led = Ledger(tmp_path / "sym.sqlite")
    assert led.path == str(path) and led.spent("d").basic == (1.5, 0.0)
    led.close()
    os.link(path, tmp_path / "hard.sqlite")
    for name in ("hard.sqlite", "l.sqlite"):
        with pytest.raises(LedgerError, match="2 hard links"):
            Ledger(tmp_path / name)


def test_a_hard_link_made_while_open_stops_the_next_charge(tmp_path):
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path)
    os.link(path, tmp_path / "hard.sqlite")
    with pytest.raises(LedgerError, match="hard link"):
        led.charge("d", "alice", Cost(0.1), "q")


def test_a_symlink_to_the_database_reaches_the_same_ledger(tmp_path, db):
    with dpsql.connect(db, catalog=catalog()) as conn:
        conn.execute(COUNT, epsilon=4.0)
    os.symlink(db, tmp_path / "alias.duckdb")
    sub = tmp_path / "sub"
    sub.mkdir()
    os.symlink(db, sub / "elsewhere.duckdb")
    for alias in (tmp_path / "alias.duckdb", sub / "elsewhere.duckdb"):
        with dpsql.connect(alias, catalog=catalog()) as conn:
            assert conn.budget.spent == (4.0, 0.0)
    assert not (sub / "elsewhere.duckdb.ledger.sqlite").exists()


def test_a_hard_linked_database_has_no_default_ledger(tmp_path, db):
    with dpsql.connect(db, catalog=catalog()) as conn:
        conn.execute(COUNT, epsilon=4.0)
    os.link(db, tmp_path / "hard.duckdb")
    for name in (db, tmp_path / "hard.duckdb"):
        with pytest.raises(LedgerError, match="hard links"):
            dpsql.connect(name, catalog=catalog())
    # with the ledger named, the hard link is the same database and the same budget
    with dpsql.connect(tmp_path / "hard.duckdb", catalog=catalog(),
                       ledger=tmp_path / "pums.duckdb.ledger.sqlite") as conn:
        assert conn.budget.spent == (4.0, 0.0)


# -- one data set, one database ------------------------------------------------------------


def test_two_databases_never_share_the_default_data_set(tmp_path, db, pums_template):
    other = tmp_path / "other.duckdb"
    shutil.copy(pums_template, other)
    led = tmp_path / "shared.sqlite"
    with dpsql.connect(db, catalog=catalog(dataset=None), ledger=led) as conn:
        conn.execute(COUNT, epsilon=1.0)
    with pytest.raises(LedgerError, match="belongs to database"):
        dpsql.connect(other, catalog=catalog(dataset=None), ledger=led)
    # its own data set name in the same ledger is fine, with its own budget
    with dpsql.connect(other, catalog=catalog(dataset="other"), ledger=led) as conn:
        assert conn.budget.spent == (0.0, 0.0)
    # the owner says the data set moved
    runner = CliRunner()
    res = runner.invoke(main, ["budget", "rebind", "--ledger", str(led), "--dataset",
                               "default", "--to", str(other)])
    assert res.exit_code == 0, res.output
    with dpsql.connect(other, catalog=catalog(dataset=None), ledger=led) as conn:
        assert conn.budget.spent == (1.0, 0.0)


def test_a_database_rebuilt_at_its_path_keeps_its_budget(tmp_path, db, pums_template):
    with dpsql.connect(db, catalog=catalog()) as conn:
        conn.execute(COUNT, epsilon=1.0)
    os.unlink(db)
    shutil.copy(pums_template, db)  # a new inode at the owner's path
    with dpsql.connect(db, catalog=catalog()) as conn:
        assert conn.budget.spent == (1.0, 0.0)


# -- the database pin ----------------------------------------------------------------------


def write_catalog(folder: Path, **top) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog(**top)), encoding="utf-8")
    return path


def test_the_catalog_pins_the_database(tmp_path, db, pums_template):
    other = tmp_path / "other.duckdb"
    shutil.copy(pums_template, other)
    cat = write_catalog(tmp_path / "owner", database=str(db))
    with pytest.raises(LedgerError, match=r"database=.*other.duckdb.* is refused"):
        dpsql.connect(other, catalog=cat, ledger=tmp_path / "l.sqlite")
    assert not (tmp_path / "l.sqlite").exists()  # refused before anything was opened
    with pytest.raises(LedgerError, match="is refused"):
        dpsql.connect(f"duckdb:///{other}", catalog=cat, ledger=":memory:")
    with pytest.raises(LedgerError, match="is refused"):
        dpsql.connect(":memory:", catalog=cat, ledger=":memory:")
    import duckdb

    con = duckdb.connect(str(other), read_only=True)
    with pytest.raises(LedgerError, match="DuckDBPyConnection.* is refused"):
        dpsql.connect(con, catalog=cat, ledger=":memory:")
    con.close()
    # the same file, by any name, or no name at all
    os.symlink(db, tmp_path / "sym.duckdb")
    for name in (None, db, str(db), tmp_path / "sym.duckdb", f"duckdb:///{db}"):
        with dpsql.connect(name, catalog=cat, ledger=":memory:") as conn:
            assert conn.execute(COUNT, epsilon=0.5).rows


def test_a_relative_database_pin_resolves_against_the_catalog(tmp_path, db):
    cat = write_catalog(tmp_path, database="pums.duckdb")
    assert dpsql.load_catalog(cat).database == str(db.resolve())


def test_the_environment_pins_the_database(tmp_path, db, pums_template, monkeypatch):
    other = tmp_path / "other.duckdb"
    shutil.copy(pums_template, other)
    monkeypatch.setenv(DATABASE_ENV, str(db))
    with pytest.raises(LedgerError, match=DATABASE_ENV):
        dpsql.connect(other, catalog=catalog(), ledger=":memory:")
    with dpsql.connect(None, catalog=catalog(), ledger=":memory:") as conn:
        conn.execute(COUNT, epsilon=0.5)
    monkeypatch.setenv(DATABASE_ENV, "relative.duckdb")
    with pytest.raises(LedgerError, match="absolute"):
        dpsql.connect(db, catalog=catalog(), ledger=":memory:")


def test_server_urls_compare_by_host_port_and_database():
    from dpsql.ledger import Pins, apply_database_pin

    pin = Pins(database="postgresql+psycopg://reader@db.example:5432/sales",
               database_source="test")
    for same in ("postgresql://owner:pw@DB.example/sales",
                 "postgresql+psycopg2://x@db.example:5432/sales?sslmode=require"):
        assert apply_database_pin(pin, same) == same
    for other in ("postgresql://db.example:5433/sales", "postgresql://db.example/hr",
                  "postgresql://other.example/sales", "/tmp/sales.duckdb"):
        with pytest.raises(LedgerError, match="is refused"):
            apply_database_pin(pin, other)


# -- pinned ledgers: missing, replaced, foreign ---------------------------------------------


def test_a_pinned_ledger_must_exist_and_carry_the_pinned_id(tmp_path, db):
    led_path = tmp_path / "owner" / "l.sqlite"
    (tmp_path / "owner").mkdir()
    cat = write_catalog(tmp_path / "owner", ledger="l.sqlite")
    with pytest.raises(LedgerError, match="does not exist"):
        dpsql.connect(db, catalog=cat)
    assert not led_path.exists()
    res = CliRunner().invoke(main, ["budget", "init", "--ledger", str(led_path)])
    assert res.exit_code == 0, res.output
    ledger_id = res.output.split()[-1]
    cat = write_catalog(tmp_path / "owner", ledger="l.sqlite", ledger_id=ledger_id)
    with dpsql.connect(db, catalog=cat) as conn:
        conn.execute(COUNT, epsilon=1.0)
    # replaced by a fresh ledger while nothing had it open: the pinned id refuses it
    os.unlink(led_path)
    Ledger(led_path).close()
    with pytest.raises(LedgerError, match="not the pinned"):
        dpsql.connect(db, catalog=cat)
    res = CliRunner().invoke(main, ["budget", "init", "--ledger", str(led_path)])
    assert res.exit_code == 1 and "already exists" in res.output


# -- tamper evidence ---------------------------------------------------------------------------


def flip(path, sql, args=()):
    con = sqlite3.connect(path)
    con.execute(sql, args)
    con.commit()
    con.close()


def test_a_flipped_total_is_caught_at_the_next_charge(tmp_path):
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path)
    flip(path, "UPDATE totals SET epsilon = epsilon / 2")
    with pytest.raises(LedgerError, match="running total .* altered"):
        led.charge("d", "alice", Cost(0.1), "q")
    with pytest.raises(LedgerError, match="altered"):
        Ledger(path)


@pytest.mark.parametrize("bad", ["'nan'", "-1.0", "9e999", "'x'"])
def test_a_stored_cost_that_is_not_a_finite_non_negative_number_is_refused(tmp_path, bad):
    path = tmp_path / "l.sqlite"
    charged_ledger(path).close()
    Ledger(path).close()  # checkpoint now covers the entries
    flip(path, f"UPDATE totals SET rho = {bad}")
    with pytest.raises(LedgerError, match="not a finite non-negative|altered"):
        Ledger(path)


def test_a_flipped_budget_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path)
    flip(path, "UPDATE budgets SET epsilon = 1000")
    with pytest.raises(LedgerError, match="budget .* altered"):
        led.charge("d", "alice", Cost(0.1), "q")


def test_entries_after_the_checkpoint_are_verified_at_open(tmp_path):
    path = tmp_path / "l.sqlite"
    charged_ledger(path).close()  # entries 1-3, not yet checkpointed by an open
    flip(path, "UPDATE entries SET epsilon = 0.25 WHERE id = 2")
    with pytest.raises(LedgerError, match="entry 2 breaks the hash chain"):
        Ledger(path)


def test_open_is_incremental_and_verify_checks_everything(tmp_path):
    path = tmp_path / "l.sqlite"
    charged_ledger(path).close()
    Ledger(path).close()  # checkpointed
    flip(path, "UPDATE entries SET sql_hash = 'x' WHERE id = 1")
    Ledger(path).close()  # before the checkpoint: not read again at open
    res = CliRunner().invoke(main, ["budget", "verify", "--ledger", str(path)])
    assert res.exit_code == 1 and "entry 1 breaks the hash chain" in res.output


def test_removed_entries_are_caught(tmp_path):
    path = tmp_path / "l.sqlite"
    charged_ledger(path).close()
    flip(path, "DELETE FROM entries WHERE id = 3")
    with pytest.raises(LedgerError, match="removed"):
        Ledger(path)
    path2 = tmp_path / "l2.sqlite"
    charged_ledger(path2).close()
    Ledger(path2).close()
    flip(path2, "DELETE FROM entries")
    with pytest.raises(LedgerError, match="checkpointed entry|removed"):
        Ledger(path2)


def test_bit_flips_anywhere_never_pass_unnoticed(tmp_path):
    """Flip one bit in each byte position of the cost columns' pages: the ledger either
    refuses to open, or opens with every check passing and the same totals."""
    path = tmp_path / "l.sqlite"
    charged_ledger(path, n=20).close()
    Ledger(path).close()
    raw = path.read_bytes()
    want = Ledger(path, readonly=True).spent("d")
    rng = np.random.default_rng(24)
    for pos in rng.choice(len(raw), size=60, replace=False):
        bad = bytearray(raw)
        bad[pos] ^= 1 << int(rng.integers(8))
        copy = tmp_path / "flipped.sqlite"
        copy.write_bytes(bytes(bad))
        try:
            led = Ledger(copy)
            led.verify()
            assert led.spent("d") == want
            led.close()
        except LedgerError:
            pass
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{copy}{suffix}").unlink(missing_ok=True)


def test_a_keyed_ledger_needs_its_key_and_resists_rewriting(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    monkeypatch.setenv(KEY_ENV, "owner-secret")
    charged_ledger(path).close()
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(LedgerError, match=f"is keyed: set {KEY_ENV}"):
        Ledger(path)
    monkeypatch.setenv(KEY_ENV, "guess")
    with pytest.raises(LedgerError, match="another key"):
        Ledger(path)
    # someone without the key rewrites a total with an unkeyed hash: refused
    monkeypatch.setenv(KEY_ENV, "owner-secret")
    led = Ledger(path)
    mac = ledger_mod._Mac(led.id, None)
    led.close()
    vals = (0.5, 0.0, 0.125, 0.0, 1)
    flip(path, "UPDATE totals SET epsilon = ?, delta = ?, rho = ?, rho_delta = ?, n = ?, "
         "mac = ? WHERE analyst = 'alice'", (*vals, mac("totals", "d", "alice", *vals)))
    with pytest.raises(LedgerError, match="altered"):
        Ledger(path)
    # an unkeyed ledger where a keyed one is expected (swapped in) is refused
    monkeypatch.delenv(KEY_ENV)
    Ledger(tmp_path / "plain.sqlite").close()
    monkeypatch.setenv(KEY_ENV, "owner-secret")
    with pytest.raises(LedgerError, match="made without a key"):
        Ledger(tmp_path / "plain.sqlite")


# -- order and bounded audit ---------------------------------------------------------------


def test_the_log_is_ordered_by_insertion_when_the_clock_steps_back(tmp_path, monkeypatch):
    led = charged_ledger(tmp_path / "l.sqlite", n=2)
    monkeypatch.setattr(ledger_mod, "_now", lambda: "2001-01-01T00:00:00.000+00:00")
    led.charge("d", "alice", Cost(0.1), "after the step")
    led.refuse("d", "alice", "refused after the step", "X: no")
    log = led.log(limit=2)
    assert [e["sql"] for e in log] == ["refused after the step", "after the step"]
    led.verify()


def test_refusals_are_bounded_and_counted_past_the_cap(tmp_path, db):
    path = tmp_path / "l.sqlite"
    huge = "SELECT " + "1 + " * (5 * 2**20 // 4) + "1 FROM pums"
    led = Ledger(path, refusal_cap=3)
    led.set_budget("d", (1.0, 0.0))
    for _ in range(5):
        led.refuse("d", "eve", huge, "UnsupportedQueryError: " + "x" * 10**6)
    with pytest.raises(dpsql.BudgetExhaustedError):
        led.charge("d", "eve", Cost(2.0), huge)
    assert os.path.getsize(path) < 2 * 2**20
    entries = led.log()
    assert len(entries) == 3 and all(len(e["sql"]) <= ledger_mod.SQL_KEPT for e in entries)
    assert entries[0]["sql_length"] == len(huge)
    assert led.refusal_counts() == [("d", "eve", 3, 3)]
    # queries are never refused for the cap
    assert led.charge("d", "eve", Cost(0.5), "SELECT 1")
    show = CliRunner().invoke(main, ["budget", "show", "--ledger", str(path)])
    assert "refused 6 (3 counted only)" in show.output
    log = CliRunner().invoke(main, ["budget", "log", "--ledger", str(path)])
    assert f"({len(huge)} characters, sha256" in log.output


# -- one admission rule ---------------------------------------------------------------------


def test_one_accountant_per_data_set():
    """Basic by default: a mix of small queries stops at Σε, even where zCDP would fit.
    (The old rule admitted when either bound fitted; break Accounting.fits back to that
    and this test fails.)"""
    led = Ledger(":memory:")
    led.ensure_budget("d", (1.0, 1e-5))
    for _ in range(100):
        led.charge("d", "a", Cost(0.01), "q")
    with pytest.raises(dpsql.BudgetExhaustedError, match="basic composition"):
        led.charge("d", "a", Cost(0.01), "q")
    assert not Accounting((1.0, 1e-5)).admits([Cost(0.01)] * 101)
    assert Accounting((1.0, 1e-5), "zcdp").admits([Cost(0.01)] * 101)
    # zCDP alone refuses one large pure-DP query that basic would admit
    assert Accounting((1.0, 1e-5)).admits([Cost(1.0)])
    assert not Accounting((1.0, 1e-5), "zcdp").admits([Cost(1.0)])
    assert not Accounting((1.0, 1e-5), "zcdp").fits(spent([Cost(0.01, 1e-5)] * 150))


def test_the_accountant_cannot_change_once_charged(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    led.set_budget("d", (1.0, 1e-5), accountant="zcdp")
    led.set_budget("d", (1.0, 1e-5), accountant="basic")  # no charges yet: fine
    led.charge("d", "a", Cost(0.1), "q")
    with pytest.raises(LedgerError, match="cannot change"):
        led.set_budget("d", (2.0, 1e-5), accountant="zcdp")
    led.set_budget("d", (2.0, 1e-5))  # the total can change; the rule stays
    assert led.accountant("d") == "basic"
    with pytest.raises(PrivacyParameterError, match="delta > 0"):
        led.set_budget("e", (1.0, 0.0), accountant="zcdp")


def test_the_catalog_chooses_the_accountant(tmp_path, db):
    cat = catalog()
    cat["budget"]["accountant"] = "zcdp"
    with dpsql.connect(db, catalog=cat, ledger=tmp_path / "l.sqlite") as conn:
        assert conn.budget.accountant == "zcdp"
    cat["budget"] = {"epsilon": 1.0, "delta": 0.0, "accountant": "zcdp"}
    with pytest.raises(dpsql.CatalogError, match="delta > 0"):
        dpsql.load_catalog(cat)


# -- numbers and names at every entry point ---------------------------------------------------


GOOD = [(np.float64(1.5), 0), (np.float32(1.5), np.float64(1e-6)), (np.int64(2), 0),
        (Decimal("1.5"), Decimal("0")), (1, 0.0)]
BAD = [(float("nan"), 0), (1.0, float("nan")), (float("inf"), 0), (True, 0), (1, False),
       ("1", 0), (1e-320, 0), (1.0, 1e-320), (-1, 0), (0, 0), (1, 1), (np.bool_(True), 0),
       (Decimal("NaN"), 0), (10**400, 0), (1,), "10", None, (1, 2, 3)]


@pytest.mark.parametrize("budget", GOOD)
def test_real_numbers_are_accepted_as_floats(tmp_path, db, budget):
    with dpsql.connect(db, catalog=catalog(budget=None), budget=budget,
                       ledger=tmp_path / "l.sqlite") as conn:
        conn.execute(COUNT, epsilon=0.5)
        assert all(type(x) is float for x in conn.budget.remaining)
    # the seeded total is a REAL that every later process reads
    assert isinstance(Ledger(tmp_path / "l.sqlite").budgets()[0][2], float)


@pytest.mark.parametrize("budget", BAD, ids=repr)
def test_anything_else_is_a_privacy_parameter_error(tmp_path, db, budget):
    with pytest.raises(PrivacyParameterError):
        dpsql.connect(db, catalog=catalog(budget=None), budget=budget,
                      ledger=tmp_path / "l.sqlite")
    led = Ledger(tmp_path / "m.sqlite")
    for call in (lambda: led.set_budget("d", budget), lambda: led.ensure_budget("d", budget)):
        with pytest.raises(PrivacyParameterError):
            call()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e-320", "x"])
def test_the_budget_commands_refuse_bad_numbers(tmp_path, value):
    path = tmp_path / "l.sqlite"
    for cmd in ("set", "grant"):
        res = CliRunner().invoke(main, ["budget", cmd, "--ledger", str(path), "--dataset",
                                        "d", "--epsilon", value])
        assert res.exit_code != 0


@pytest.mark.parametrize("name", ["", "*", "a\nb", "x" * 1_000_000, " ", "e\x1b[2K"])
def test_owner_paths_refuse_bad_analyst_names(tmp_path, name):
    path = tmp_path / "l.sqlite"
    Ledger(path).set_budget("d", (1.0, 0.0))
    for cmd in ("set", "grant"):
        res = CliRunner().invoke(main, ["budget", cmd, "--ledger", str(path), "--dataset",
                                        "d", "--analyst", name, "--epsilon", "1"])
        assert res.exit_code == 1 and "analyst must be a name" in res.output
    cat = catalog()
    cat["budget"]["analysts"] = {name: {"epsilon": 1.0}}
    with pytest.raises(dpsql.CatalogError, match="analyst must be a name"):
        dpsql.load_catalog(cat)
    assert [r[1] for r in Ledger(path).budgets()] == ["*"]


# -- clean failures ------------------------------------------------------------------------------


def test_a_lock_held_past_the_owners_timeout_is_a_ledger_error(tmp_path, db, monkeypatch):
    path = tmp_path / "l.sqlite"
    monkeypatch.setenv(TIMEOUT_ENV, "0.5")
    conn = dpsql.connect(db, catalog=catalog(), ledger=path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(LedgerError,
                           match=r"stayed locked .*timeout of 0.5 s \(DPSQL_LEDGER_TIMEOUT\)"):
            conn.execute(COUNT, epsilon=1.0)
        with pytest.raises(dpsql.UnsupportedQueryError):  # the refusal is still the answer
            conn.execute("SELECT * FROM pums", epsilon=1.0)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert conn.execute(COUNT, epsilon=1.0).rows
    assert conn.budget.spent == (1.0, 0.0)
    conn.close()


def test_a_failed_outcome_write_keeps_the_charge_and_tells_the_owner(tmp_path, db, caplog,
                                                                      monkeypatch):
    conn = dpsql.connect(db, catalog=catalog(), ledger=tmp_path / "l.sqlite")
    led = ledger_of(conn)
    res = conn.execute(COUNT, epsilon=1.0)  # its outcome is queued
    assert res.rows
    real_tx = Ledger._tx

    def failing_tx(self, write=True, settle=True, wait=True):
        raise LedgerError("disk full (injected)")

    monkeypatch.setattr(Ledger, "_tx", failing_tx)
    with caplog.at_level(logging.ERROR, logger="dpsql.owner"):
        led.settle()  # the settling transaction fails: the outcome stays queued
    assert "could not be recorded" in caplog.text and "disk full (injected)" in caplog.text
    monkeypatch.setattr(Ledger, "_tx", real_tx)
    assert conn.budget.spent == (1.0, 0.0)
    assert led.log()[0]["outcome"] == "answered"  # written once the ledger can be

    # one outcome that cannot be written is dropped and logged; the charges go on
    caplog.clear()
    eid = led.charge("pums", "default", Cost(0.5), "SELECT 1")

    def broken_store(db, prefix, mac):
        raise sqlite3.OperationalError("database or disk is full (injected)")

    led.finish(eid, "answered", also=broken_store)
    with caplog.at_level(logging.ERROR, logger="dpsql.owner"):
        conn.execute(COUNT, epsilon=1.0)  # its charge carries the broken outcome
    assert "could not be recorded" in caplog.text and "injected" in caplog.text
    assert [e["outcome"] for e in led.log()] == ["answered", "charged", "answered"]
    assert led.spent("pums").basic == (2.5, 0.0)

    # one whose error ends the whole transaction (SQLite rolls it back on a full disk or
    # an I/O error): it is dropped, the transaction begins again and writes the others
    caplog.clear()
    ids = [led.charge("pums", "default", Cost(0.25), f"SELECT {i}") for i in range(3)]

    def disk_full(db, prefix, mac):
        db.execute("ROLLBACK")  # as SQLite does on SQLITE_FULL
        raise sqlite3.OperationalError("database or disk is full (injected)")

    for eid, also in zip(ids, [None, disk_full, None], strict=True):
        led.finish(eid, "answered", also=also)
    with caplog.at_level(logging.ERROR, logger="dpsql.owner"):
        assert conn.execute(COUNT, epsilon=1.0).rows  # its charge is not refused
    assert caplog.text.count("could not be recorded") == 1
    assert [e["outcome"] for e in led.log()][:4] == ["answered", "answered", "charged",
                                                      "answered"]
    assert led.spent("pums").basic == (4.25, 0.0)
    led.verify()
    conn.close()


def test_ctrl_c_in_or_just_after_the_charge_is_query_cancelled(tmp_path, db, monkeypatch):
    conn = dpsql.connect(db, catalog=catalog(), ledger=tmp_path / "l.sqlite")
    real_charge, real_finish = Ledger.charge, Ledger.finish

    def charge_then_interrupt(self, *args, **kwargs):
        real_charge(self, *args, **kwargs)
        raise KeyboardInterrupt  # after the COMMIT, before the caller has the id

    monkeypatch.setattr(Ledger, "charge", charge_then_interrupt)
    with pytest.raises(QueryCancelled, match="may have been recorded"):
        conn.execute(COUNT, epsilon=1.0)
    monkeypatch.setattr(Ledger, "charge", real_charge)

    def interrupt_answered(self, charge_id, outcome, detail=None):
        real_finish(self, charge_id, outcome, detail)
        if outcome == "answered":
            raise KeyboardInterrupt

    monkeypatch.setattr(Ledger, "finish", interrupt_answered)
    with pytest.raises(QueryCancelled) as info:
        conn.execute(COUNT, epsilon=1.0)
    assert info.value.charged
    assert conn.budget.spent == (2.0, 0.0)
    conn.close()


def _as_nobody(target, *args):
    """Runs ``target`` in a forked child without root's power to write any file."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child():
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            q.put(("ok", target(*args)))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            q.put(("error", f"{type(exc).__name__}: {exc}"))

    proc = ctx.Process(target=child)
    proc.start()
    result = q.get(timeout=60)
    proc.join(timeout=60)
    return result


def _try_open(path):
    Ledger(path)


def _read(path):
    from click.testing import CliRunner as Runner

    show = Runner().invoke(main, ["budget", "show", "--ledger", path])
    log = Runner().invoke(main, ["budget", "log", "--ledger", path])
    return show.exit_code, show.output, log.exit_code, log.output


def test_a_read_only_ledger_can_be_read_but_not_charged():
    folder = Path(tempfile.mkdtemp())
    try:
        path = folder / "l.sqlite"
        charged_ledger(path).close()
        Ledger(path).close()
        os.chmod(path, 0o444)
        os.chmod(folder, 0o555)  # not even a journal can be made
        kind, message = _as_nobody(_try_open, str(path))
        assert kind == "error" and "LedgerError" in message, message
        assert "read-only" in message and "fresh budget" not in message
        kind, (show_rc, show, log_rc, log) = _as_nobody(_read, str(path))
        assert show_rc == 0 and "spent epsilon=1.5" in show, show
        assert log_rc == 0 and "q2" in log, log
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)


def test_charges_move_the_checkpoint_so_an_open_stays_short(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_mod, "CHECKPOINT_EVERY", 5)
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path, n=12, eps=0.01)
    cp = led._checkpoint()[0]
    assert 5 <= cp <= 12  # a long-running connection moved it
    flip(path, "UPDATE totals SET epsilon = 0")
    with pytest.raises(LedgerError, match="altered"):  # and checks before moving it
        led.charge("d", "alice", Cost(0.01), "q")


V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE budgets (dataset TEXT NOT NULL, analyst TEXT NOT NULL, epsilon REAL NOT NULL,
    delta REAL NOT NULL, source TEXT NOT NULL, updated TEXT NOT NULL,
    PRIMARY KEY (dataset, analyst));
CREATE TABLE charges (id INTEGER PRIMARY KEY, time TEXT NOT NULL, dataset TEXT NOT NULL,
    analyst TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL, rho REAL NOT NULL,
    rho_delta REAL NOT NULL, sql TEXT NOT NULL, outcome TEXT NOT NULL, detail TEXT);
CREATE TABLE refusals (id INTEGER PRIMARY KEY, time TEXT NOT NULL, dataset TEXT NOT NULL,
    analyst TEXT NOT NULL, sql TEXT NOT NULL, detail TEXT NOT NULL);
INSERT INTO meta VALUES ('format', 'dpsql-ledger'), ('version', '1');
INSERT INTO budgets VALUES ('pums', '*', 10.0, 1e-5, 'catalog', 't');
INSERT INTO charges VALUES (1, 't', 'pums', 'alice', 1.5, 0.0, 1.125, 0.0, 'q1', 'answered',
    NULL);
INSERT INTO charges VALUES (2, 't', 'pums', 'bob', 0.5, 1e-6, 0.125, 1e-6, 'q2', 'failed',
    'BackendError');
"""


def test_a_version_1_ledger_is_refused_and_migrated(tmp_path):
    old = tmp_path / "old.sqlite"
    con = sqlite3.connect(old)
    con.executescript(V1_SCHEMA)
    con.close()
    with pytest.raises(LedgerError, match="format version 1.*budget migrate"):
        Ledger(old)
    res = CliRunner().invoke(main, ["budget", "migrate", "--from", str(old), "--to",
                                    str(tmp_path / "new.sqlite")])
    assert res.exit_code == 0 and "migrated 2 charges" in res.output, res.output
    led = Ledger(tmp_path / "new.sqlite")
    assert led.spent("pums").basic == (2.0, 1e-6)
    assert led.spent("pums", "alice").rho == 1.125
    assert [e["outcome"] for e in led.log()] == ["failed", "answered"]
    assert led.verify()["charges"] == 2


def test_a_sqlalchemy_url_naming_another_database_is_refused(tmp_path, db, pums_template,
                                                             monkeypatch):
    from sqlalchemy import create_engine, text
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.dialects import registry

    registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")
    other = tmp_path / "other.duckdb"
    shutil.copy(pums_template, other)
    cat = write_catalog(tmp_path / "owner", database=str(db))
    monkeypatch.setenv(CATALOG_ENV, str(cat))
    engine = create_engine(f"dpsql+duckdb:///{other}?epsilon=0.5&ledger=:memory:")
    with pytest.raises(sa_exc.OperationalError, match="database=.* is refused"):
        engine.connect()
    engine.dispose()
    os.link(db, tmp_path / "hard.duckdb")  # the same file by another name is the same
    engine = create_engine(f"dpsql+duckdb:///{tmp_path / 'hard.duckdb'}?epsilon=0.5"
                           "&ledger=:memory:")
    with engine.connect() as conn:
        assert conn.execute(text(COUNT)).fetchall()
    engine.dispose()


def test_a_new_ledger_never_replays_the_journal_of_a_deleted_one(tmp_path):
    path = tmp_path / "l.sqlite"
    holder = charged_ledger(path)
    os.unlink(path)
    # orphans of the deleted ledger beside its name: SQLite would play them back
    for suffix in ("-journal", "-wal"):
        Path(f"{path}{suffix}").write_bytes(os.urandom(4096))
    fresh = Ledger(path)  # the owner's new ledger at the same name
    fresh.verify()
    assert fresh.spent("d").basic == (0.0, 0.0) and fresh.id != holder.id
    assert not Path(f"{path}-journal").exists() and not Path(f"{path}-wal").exists()
    with pytest.raises(LedgerError, match="deleted|replaced"):
        holder.charge("d", "alice", Cost(0.1), "q")
    holder.close()
    fresh.close()


# -- the head record, the journal, the outcome MAC (hostile review of v2) --------------------


def _keyed(monkeypatch, path, n=3):
    monkeypatch.setenv(KEY_ENV, "owner-secret")
    led = charged_ledger(path, n=n, eps=3.0)
    led.set_budget("d", (1.0, 0.0), analyst="carol")
    return led


@pytest.mark.parametrize("wipe", [
    "DELETE FROM entries; DELETE FROM totals",
    "DELETE FROM entries WHERE id = (SELECT max(id) FROM entries); "
    "UPDATE totals SET n = n",  # a rewound tail (totals left as they are)
    "DELETE FROM budgets",
    "DELETE FROM budgets WHERE analyst = 'carol'",
    "DELETE FROM bindings",
    "DELETE FROM meta WHERE key = 'head'",
])
def test_wiping_rows_without_the_key_is_caught_by_an_open_connection_and_at_open(
        tmp_path, monkeypatch, wipe):
    path = tmp_path / "l.sqlite"
    led = _keyed(monkeypatch, path)
    led.bind("d", {"kind": "server", "url": "postgresql://h:5432/x"})
    led.charge("d", "carol", Cost(0.5), "q")
    Ledger(path).close()  # the checkpoint moved past every entry
    con = sqlite3.connect(path)
    con.executescript(wipe)
    con.close()
    with pytest.raises(LedgerError, match="head record"):  # the long-lived connection
        if "bindings" in wipe:
            led.bind("d", {"kind": "server", "url": "postgresql://h:5432/y"})
        else:
            led.charge("d", "carol", Cost(0.5), "q")
    with pytest.raises(LedgerError, match="head record"):
        led.bindings() if "bindings" in wipe else led.view("d", "carol").remaining
    with pytest.raises(LedgerError, match="head record"):
        Ledger(path)
    with pytest.raises(LedgerError, match="head record"):
        Ledger(path, readonly=True).verify()


def test_an_older_budget_row_put_back_is_caught(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    led = _keyed(monkeypatch, path)
    con = sqlite3.connect(path)
    old = con.execute("SELECT * FROM budgets WHERE analyst = 'carol'").fetchone()
    con.close()
    led.set_budget("d", (0.5, 0.0), analyst="carol")  # the owner lowers it
    con = sqlite3.connect(path)
    con.execute("DELETE FROM budgets WHERE analyst = 'carol'")
    con.execute("INSERT INTO budgets VALUES (?, ?, ?, ?, ?, ?, ?, ?)", old)  # valid MAC
    con.commit()
    con.close()
    with pytest.raises(LedgerError, match="budget of 'd'/'carol' does not match"):
        led.charge("d", "carol", Cost(0.75), "q")
    with pytest.raises(LedgerError, match="head record"):
        Ledger(path)


def test_an_older_total_this_connection_wrote_put_back_is_caught(tmp_path, monkeypatch):
    # the connection remembers the rows it wrote as checked (their MACs are its own):
    # an older one of them put back passes its MAC, and the head record catches it
    path = tmp_path / "l.sqlite"
    led = _keyed(monkeypatch, path, n=1)
    con = sqlite3.connect(path)
    old = con.execute("SELECT * FROM totals WHERE analyst = 'alice'").fetchone()
    con.close()
    led.charge("d", "alice", Cost(3.0), "q")
    flip(path, "DELETE FROM totals WHERE analyst = 'alice'")
    flip(path, "INSERT INTO totals VALUES (?, ?, ?, ?, ?, ?, ?, ?)", old)
    with pytest.raises(LedgerError, match="running total of 'd'/'alice' does not match"):
        led.charge("d", "alice", Cost(3.0), "q")


def test_a_head_record_this_connection_wrote_is_read_back_unparsed_and_still_checked(
        tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path)
    parsed = []
    monkeypatch.setattr(led, "_parse_head", lambda raw: parsed.append(raw) or
                        type(led)._parse_head(led, raw))
    led.charge("d", "alice", Cost(0.1), "q")
    assert parsed == []  # the text it wrote itself
    con = sqlite3.connect(path)
    doc = json.loads(con.execute("SELECT value FROM meta WHERE key = 'head'").fetchone()[0])
    con.close()
    doc["seq"] += 1  # another text: parsed, and its MAC no longer holds
    flip(path, "UPDATE meta SET value = ? WHERE key = 'head'", (json.dumps(doc),))
    with pytest.raises(LedgerError, match="head record is missing or was altered"):
        led.charge("d", "alice", Cost(0.1), "q")
    assert len(parsed) == 1


def test_a_whole_older_state_put_back_under_an_open_connection_is_caught(tmp_path,
                                                                         monkeypatch):
    path = tmp_path / "l.sqlite"
    led = _keyed(monkeypatch, path, n=1)
    snapshot = tmp_path / "old.sqlite"
    shutil.copy(path, snapshot)
    led.charge("d", "alice", Cost(3.0), "q")
    # the older file's content written back into the same file (same inode and id)
    path.write_bytes(snapshot.read_bytes())
    with pytest.raises(LedgerError, match="rewound"):
        led.charge("d", "alice", Cost(3.0), "q")


def test_the_head_is_one_row_checked_without_reading_history(tmp_path, monkeypatch):
    """The charge reads the head and the newest entry, never a scan of the entries."""
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path, n=5, eps=0.01)
    seen = []
    led._db.set_trace_callback(seen.append)
    led.charge("d", "alice", Cost(0.01), "q")
    led._db.set_trace_callback(None)
    scans = [s for s in seen if "FROM entries" in s and "LIMIT 1" not in s]
    assert not scans, scans


def test_audit_text_and_outcome_are_tamper_evident(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    monkeypatch.setenv(KEY_ENV, "owner-secret")
    led = charged_ledger(path, n=2)
    led.finish(1, "answered")
    led.refuse("d", "alice", "SELECT secret", "X: no")
    led.close()
    assert Ledger(path).verify()["entries"] == 3
    for edit in ("UPDATE entries SET sql = 'SELECT 1' WHERE id = 1",
                 "UPDATE entries SET outcome = 'failed' WHERE id = 1",
                 "UPDATE entries SET detail = 'BackendError' WHERE id = 2",
                 "DELETE FROM entries WHERE id = 3"):
        copy = tmp_path / "copy.sqlite"
        shutil.copy(path, copy)
        flip(copy, edit)
        with pytest.raises(LedgerError, match="altered|chain|head record"):
            Ledger(copy, readonly=True).verify()
        copy.unlink()


def test_a_deleted_side_file_loses_no_committed_charge(tmp_path):
    """Committed charges live in the main file: no -wal to delete."""
    path = tmp_path / "l.sqlite"
    led = charged_ledger(path, n=4)
    side = [p.name for p in tmp_path.iterdir() if p.name.startswith("l.sqlite-")]
    assert side == []
    assert led._db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    copy = tmp_path / "copy.sqlite"
    shutil.copy(path, copy)  # what a crash leaves: the main file alone
    assert Ledger(copy).spent("d").basic == (2.0, 0.0)


def test_a_new_ledger_file_is_private_to_its_owner(tmp_path):
    path = tmp_path / "l.sqlite"
    old = os.umask(0o022)
    try:
        charged_ledger(path).close()
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600
