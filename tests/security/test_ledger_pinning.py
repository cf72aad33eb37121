"""Issue 13, item 8: the data owner, not the connection, chooses the ledger and the analyst.

The attack: through ``dpsql.connect(..., ledger=":memory:")`` or a SQLAlchemy URL
``...&ledger=:memory:`` (or any fresh path) every connection got a full budget seeded
again from the catalog, so five connections answered five queries at ε = 1 against a
total of 1. With the ledger pinned (in the catalog, or by ``DPSQL_LEDGER`` in the
service's environment) such a connection is refused before anything is opened, and every
connection spends from the one pinned budget. The analyst identity and the catalog pin
the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import registry

import dpsql
from dpsql import dbapi
from dpsql.cli import main
from dpsql.datasets import catalog_path
from dpsql.ledger import ANALYST_ENV, CATALOG_ENV, LEDGER_ENV, Ledger

registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")

QUERY = "SELECT COUNT(*) AS n FROM pums"
TOTAL = (1.0, 1e-6)


@pytest.fixture(autouse=True)
def _no_pins_from_outside(monkeypatch):
    """Each test sets the environment pins it needs; none leak in from the shell."""
    for name in (LEDGER_ENV, ANALYST_ENV, CATALOG_ENV):
        monkeypatch.delenv(name, raising=False)


def write_catalog(folder: Path, **top) -> Path:
    """The bundled pums catalog with a total of ε = 1 and ``top`` keys (pins) added."""
    doc = yaml.safe_load(catalog_path("pums").read_text(encoding="utf-8"))
    doc["budget"] = {"epsilon": TOTAL[0], "delta": TOTAL[1]}
    doc.update(top)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    if isinstance(top.get("ledger"), str) and top["ledger"].endswith(".sqlite"):
        owner_creates(folder / top["ledger"])
    return path


def owner_creates(ledger: Path) -> None:
    """The owner creates a pinned ledger (a connection never does: a missing pinned
    ledger is refused, not taken as a fresh budget)."""
    Ledger(ledger).close()


def untouched(ledger: Path) -> bool:
    return Ledger(ledger).log() == []


@pytest.fixture
def pinned(tmp_path) -> tuple[Path, Path]:
    """(catalog, ledger): a catalog that pins ``owner.ledger.sqlite`` beside itself."""
    cat = write_catalog(tmp_path / "owner", ledger="owner.ledger.sqlite")
    return cat, tmp_path / "owner" / "owner.ledger.sqlite"


def url(db: Path, catalog: Path | None, **extra) -> str:
    query = {"epsilon": "1", **({"catalog": str(catalog)} if catalog else {}), **extra}
    return f"dpsql+duckdb:///{db}?" + "&".join(f"{k}={v}" for k, v in query.items())


# -- the attack, through every entry point ---------------------------------------------


def test_unpinned_attack_is_what_the_pin_stops(security_db, tmp_path):
    """Without a pin, fresh ledgers are fresh budgets: the reason pins exist."""
    cat = write_catalog(tmp_path / "plain")
    answered = 0
    for i in range(3):
        with dpsql.connect(security_db, cat, ledger=tmp_path / f"fresh{i}.sqlite") as conn:
            conn.execute(QUERY, epsilon=1.0)
            answered += 1
    assert answered == 3  # ε = 3 spent against a total of 1: the hole


@pytest.mark.parametrize("ask", [":memory:", "other.sqlite", "PATH_OBJECT", "LEDGER_OBJECT",
                                 "MEMORY_LEDGER_OBJECT"])
def test_connect_refuses_another_ledger(security_db, pinned, tmp_path, ask):
    cat, led = pinned
    other = tmp_path / "other.sqlite"
    arg = {":memory:": ":memory:", "other.sqlite": str(other), "PATH_OBJECT": other,
           "LEDGER_OBJECT": None, "MEMORY_LEDGER_OBJECT": None}[ask]
    if ask == "LEDGER_OBJECT":
        arg = Ledger(other)
    elif ask == "MEMORY_LEDGER_OBJECT":
        arg = Ledger(":memory:")
    with pytest.raises(dpsql.LedgerError, match=r"ledger=.* is refused.*pinned"):
        dpsql.connect(security_db, cat, ledger=arg)
    # refused before anything was opened: nothing charged, no other ledger created
    assert untouched(led)
    if not isinstance(arg, Ledger):
        assert not other.exists()


def test_five_connections_share_one_pinned_budget(security_db, pinned):
    """The reported attack (five queries at ε = 1 against 1) now answers exactly one."""
    cat, led = pinned
    answered, refused = 0, 0
    for _ in range(5):
        with dpsql.connect(security_db, cat) as conn:
            try:
                conn.execute(QUERY, epsilon=1.0)
                answered += 1
            except dpsql.BudgetExhaustedError:
                refused += 1
    assert (answered, refused) == (1, 4)
    with dpsql.connect(security_db, cat) as conn:
        assert conn.budget.spent == (1.0, 0.0) and conn.budget.remaining == (0.0, TOTAL[1])


def test_spend_on_one_connection_is_seen_on_another(security_db, pinned, monkeypatch):
    cat, led = pinned
    first = dpsql.connect(security_db, cat)
    # the same file under other spellings is the same budget, so it is accepted
    monkeypatch.chdir(led.parent)
    second = dpsql.connect(security_db, str(cat), ledger="owner.ledger.sqlite")
    third = dpsql.connect(security_db, cat, ledger=Ledger(led))
    first.execute(QUERY, epsilon=0.25)
    assert second.budget.spent == (0.25, 0.0) and third.budget.spent == (0.25, 0.0)
    second.execute(QUERY, epsilon=0.5)
    assert first.budget.remaining[0] == pytest.approx(0.25)
    for conn in (first, second, third):
        conn.close()


def test_pinned_ledger_through_a_symlink_is_the_same_budget(security_db, pinned, tmp_path):
    cat, led = pinned
    with dpsql.connect(security_db, cat) as conn:
        conn.execute(QUERY, epsilon=0.5)
    link = tmp_path / "link.sqlite"
    link.symlink_to(led)
    with dpsql.connect(security_db, cat, ledger=link) as conn:
        assert conn.budget.spent == (0.5, 0.0)


def test_dbapi_refuses_another_ledger(security_db, pinned, tmp_path):
    cat, led = pinned
    for arg in (":memory:", str(tmp_path / "fresh.sqlite")):
        with pytest.raises(dbapi.OperationalError, match="ledger=.* is refused") as info:
            dbapi.connect(security_db, str(cat), ledger=arg, epsilon=1.0)
        assert isinstance(info.value, dpsql.LedgerError)
    assert not (tmp_path / "fresh.sqlite").exists()
    conn = dbapi.connect(security_db, str(cat), epsilon=1.0)
    conn.cursor().execute(QUERY)
    with pytest.raises(dpsql.BudgetExhaustedError):
        dbapi.connect(security_db, str(cat), epsilon=1.0).cursor().execute(QUERY)
    assert conn.budget.spent == (1.0, 0.0)
    conn.close()


def test_sqlalchemy_url_refuses_another_ledger(security_db, pinned, tmp_path):
    cat, led = pinned
    for ledger in (":memory:", tmp_path / "fresh.sqlite"):
        engine = create_engine(url(security_db, cat, ledger=ledger))
        with pytest.raises(sa_exc.OperationalError, match="is refused") as info:
            engine.connect()
        assert isinstance(info.value.orig, dpsql.LedgerError)
        engine.dispose()
    assert not (tmp_path / "fresh.sqlite").exists()
    answered = 0
    for _ in range(3):  # three engines, one pinned budget of ε = 1
        engine = create_engine(url(security_db, cat))
        try:
            with engine.connect() as conn:
                conn.execute(text(QUERY)).fetchall()
                answered += 1
        except sa_exc.OperationalError as exc:
            assert isinstance(exc.orig, dpsql.BudgetExhaustedError)
        engine.dispose()
    assert answered == 1
    with dpsql.connect(security_db, cat) as conn:
        assert conn.budget.spent == (1.0, 0.0)


# -- the analyst pin --------------------------------------------------------------------


def test_analyst_pin_refuses_another_name(security_db, tmp_path):
    cat = write_catalog(tmp_path / "a", ledger="l.sqlite", analyst="alice")
    with pytest.raises(dpsql.LedgerError, match=r"analyst='mallory' is refused"):
        dpsql.connect(security_db, cat, analyst="mallory")
    assert untouched(tmp_path / "a" / "l.sqlite")
    with pytest.raises(dbapi.OperationalError, match="analyst='mallory' is refused"):
        dbapi.connect(security_db, str(cat), analyst="mallory")
    engine = create_engine(url(security_db, cat, analyst="mallory"))
    with pytest.raises(sa_exc.OperationalError, match="analyst='mallory' is refused"):
        engine.connect()
    engine.dispose()
    with dpsql.connect(security_db, cat) as conn:
        assert conn.analyst == "alice"
        conn.execute(QUERY, epsilon=0.25)
    with dpsql.connect(security_db, cat, analyst="alice") as conn:
        assert conn.budget.spent == (0.25, 0.0)


def test_analyst_pin_alone_still_allows_choosing_the_ledger(security_db, tmp_path):
    """Pins are independent: an analyst pin says who, not where."""
    cat = write_catalog(tmp_path / "a", analyst="alice")
    with dpsql.connect(security_db, cat, ledger=":memory:") as conn:
        assert conn.analyst == "alice"


def test_per_analyst_budget_holds_under_the_analyst_pin(security_db, tmp_path):
    cat = write_catalog(tmp_path / "a", ledger="l.sqlite", analyst="alice",
                        budget={"epsilon": 1.0, "delta": 1e-6,
                                "analysts": {"alice": {"epsilon": 0.3}}})
    with dpsql.connect(security_db, cat) as conn:
        conn.execute(QUERY, epsilon=0.25)
        with pytest.raises(dpsql.BudgetExhaustedError, match="analyst 'alice'"):
            conn.execute(QUERY, epsilon=0.25)
    with pytest.raises(dpsql.LedgerError):  # a new name would have a fresh 0.3
        dpsql.connect(security_db, cat, analyst="alice2")


@pytest.mark.parametrize("name", ["*", "bob\n2026-01-01 answered", "al\u200bice",
                                  "eve\x1b[2K", "x\u202e"])
def test_analyst_names_are_printable_and_not_the_total(security_db, name):
    with pytest.raises(dpsql.LedgerError, match="analyst must be a name"):
        dpsql.connect(security_db, catalog_path("pums"), ledger=":memory:", analyst=name)


# -- pins from the service's environment ------------------------------------------------


def test_env_pins_the_ledger(security_db, tmp_path, monkeypatch):
    cat = write_catalog(tmp_path / "plain")
    led = tmp_path / "env.ledger.sqlite"
    monkeypatch.setenv(LEDGER_ENV, str(led))
    with pytest.raises(dpsql.LedgerError, match=f"is refused.*{LEDGER_ENV}"):
        dpsql.connect(security_db, cat, ledger=":memory:")
    with pytest.raises(dpsql.LedgerError, match="is refused"):
        dpsql.connect(security_db, cat, ledger=tmp_path / "fresh.sqlite")
    assert not led.exists()
    # a missing pinned ledger is refused, never a fresh budget: the owner creates it
    with pytest.raises(dpsql.LedgerError, match="does not exist"):
        dpsql.connect(security_db, cat)
    assert not led.exists()
    owner_creates(led)
    with dpsql.connect(security_db, cat) as conn:
        conn.execute(QUERY, epsilon=1.0)
    with (dpsql.connect(security_db, cat, ledger=led) as conn,
          pytest.raises(dpsql.BudgetExhaustedError)):
        conn.execute(QUERY, epsilon=0.5)


def test_env_wins_over_the_catalog(security_db, pinned, tmp_path, monkeypatch):
    cat, catalog_ledger = pinned
    env_ledger = tmp_path / "env.sqlite"
    owner_creates(env_ledger)
    monkeypatch.setenv(LEDGER_ENV, str(env_ledger))
    monkeypatch.setenv(ANALYST_ENV, "carol")
    with pytest.raises(dpsql.LedgerError, match=LEDGER_ENV):
        dpsql.connect(security_db, cat, ledger=catalog_ledger)
    with dpsql.connect(security_db, cat) as conn:
        assert conn.analyst == "carol"
        conn.execute(QUERY, epsilon=0.5)
    assert not untouched(env_ledger) and untouched(catalog_ledger)
    with pytest.raises(dpsql.LedgerError, match=f"analyst='bob' is refused.*{ANALYST_ENV}"):
        dpsql.connect(security_db, cat, analyst="bob")


@pytest.mark.parametrize("value", [":memory:", "relative.sqlite"])
def test_a_malformed_env_pin_fails_closed(security_db, tmp_path, monkeypatch, value):
    monkeypatch.setenv(LEDGER_ENV, value)
    with pytest.raises(dpsql.LedgerError, match=f"{LEDGER_ENV} must be an absolute"):
        dpsql.connect(security_db, write_catalog(tmp_path / "c"))


def test_env_analyst_pin_must_be_a_name(security_db, tmp_path, monkeypatch):
    monkeypatch.setenv(ANALYST_ENV, "*")
    with pytest.raises(dpsql.LedgerError, match=ANALYST_ENV):
        dpsql.connect(security_db, write_catalog(tmp_path / "c"), ledger=":memory:")


def test_pinned_ledger_is_not_seeded_by_a_connection(security_db, tmp_path, monkeypatch):
    """Under a pin budget= is a cap only: an analyst cannot choose the data set's total."""
    doc_path = write_catalog(tmp_path / "c")
    doc = yaml.safe_load(doc_path.read_text(encoding="utf-8"))
    del doc["budget"]
    doc_path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    led = tmp_path / "env.sqlite"
    owner_creates(led)
    monkeypatch.setenv(LEDGER_ENV, str(led))
    with pytest.raises(dpsql.PrivacyParameterError, match="pinned ledger"):
        dpsql.connect(security_db, doc_path, budget=(100.0, 0.5))
    Ledger(led).set_budget("pums", (2.0, 1e-6))  # the owner sets it
    with dpsql.connect(security_db, doc_path, budget=(100.0, 0.5)) as conn:
        assert conn.budget.remaining == (2.0, 1e-6)
    with (dpsql.connect(security_db, doc_path, budget=(0.5, 0.0)) as conn,
          pytest.raises(dpsql.BudgetExhaustedError, match="connection")):
        conn.execute(QUERY, epsilon=1.0)


def test_env_pins_the_catalog(security_db, pinned, tmp_path, monkeypatch):
    """With analyst-chosen URLs the catalog must be pinned too, else any catalog file on
    the server (the bundled pums.yaml carries ε = 10) brings its own fresh budget."""
    cat, led = pinned
    monkeypatch.setenv(CATALOG_ENV, str(cat))
    for other in (catalog_path("pums"), str(catalog_path("pums")),
                  yaml.safe_load(cat.read_text(encoding="utf-8")), dpsql.load_catalog(cat)):
        with pytest.raises(dpsql.LedgerError, match=f"catalog=.* is refused.*{CATALOG_ENV}"):
            dpsql.connect(security_db, other, ledger=":memory:")
    engine = create_engine(url(security_db, catalog_path("pums"), ledger=":memory:"))
    with pytest.raises(sa_exc.OperationalError, match="catalog=.* is refused"):
        engine.connect()
    engine.dispose()
    # no catalog argument (or the pinned file itself) uses the pin and its pinned ledger
    with dpsql.connect(security_db) as conn:
        conn.execute(QUERY, epsilon=0.5)
    engine = create_engine(url(security_db, None, epsilon="0.5"))
    with engine.connect() as conn:
        conn.execute(text(QUERY)).fetchall()
    engine.dispose()
    with dpsql.connect(security_db, cat) as conn:
        assert conn.budget.spent == (1.0, 0.0)
    assert not untouched(led)


def test_no_catalog_without_a_pin_is_a_catalog_error(security_db):
    with pytest.raises(dpsql.CatalogError, match="no catalog"):
        dpsql.connect(security_db, ledger=":memory:")


# -- the catalog keys -------------------------------------------------------------------


def test_relative_ledger_resolves_against_the_catalog_file(tmp_path, monkeypatch):
    cat = write_catalog(tmp_path / "here", ledger="sub/../l.sqlite")
    monkeypatch.chdir(tmp_path)
    assert dpsql.load_catalog(cat).ledger == str((tmp_path / "here" / "l.sqlite").resolve())


@pytest.mark.parametrize("top, message", [
    ({"ledger": ":memory:"}, "cannot be ':memory:'"),
    ({"ledger": ""}, "must be a file path"),
    ({"ledger": 3}, "must be a file path"),
    ({"database": ""}, "database must be a file path"),
    ({"database": ":memory:"}, "cannot be ':memory:'"),
    ({"ledger_id": "../x"}, "ledger_id must be"),
    ({"analyst": "*"}, "analyst must be a name"),
    ({"analyst": "bob\nforged"}, "analyst must be a name"),
])
def test_catalog_pins_are_checked(tmp_path, top, message):
    with pytest.raises(dpsql.CatalogError, match=message):
        dpsql.load_catalog(write_catalog(tmp_path, **top))


def test_relative_ledger_in_a_dict_catalog_is_refused():
    doc = yaml.safe_load(catalog_path("pums").read_text(encoding="utf-8"))
    doc["ledger"] = "l.sqlite"
    with pytest.raises(dpsql.CatalogError, match="relative"):
        dpsql.load_catalog(doc)


# -- unpinned behaviour is unchanged ----------------------------------------------------


def test_unpinned_connections_choose_their_ledger_and_analyst(security_db, tmp_path):
    cat = write_catalog(tmp_path / "plain")
    with dpsql.connect(security_db, cat, ledger=":memory:", analyst="zed") as conn:
        conn.execute(QUERY, epsilon=0.5)
        assert conn.analyst == "zed" and conn.budget.spent == (0.5, 0.0)
    with dbapi.connect(security_db, str(cat), ledger=":memory:", epsilon=0.5) as conn:
        conn.cursor().execute(QUERY)


# -- the command line -------------------------------------------------------------------


def test_cli_honours_the_pins(security_db, pinned, tmp_path):
    cat, led = pinned
    runner = CliRunner()
    args = ["query", QUERY, "-d", str(security_db), "-c", str(cat), "-e", "0.25"]
    refused = runner.invoke(main, [*args, "--ledger", str(tmp_path / "fresh.sqlite")])
    assert refused.exit_code == 1 and "LedgerError" in refused.stderr
    assert not (tmp_path / "fresh.sqlite").exists()
    assert runner.invoke(main, args).exit_code == 0
    # explain spends nothing; with a pin it uses the pinned ledger instead of ':memory:'
    explained = runner.invoke(main, ["explain", QUERY, "-d", str(security_db), "-c",
                                     str(cat), "-e", "0.5"])
    assert explained.exit_code == 0, explained.output
    assert "Rewritten SQL" in explained.output
    log = runner.invoke(main, ["budget", "log"], env={LEDGER_ENV: str(led)})
    assert log.exit_code == 0 and log.output.count("answered") == 1
    assert os.environ.get(LEDGER_ENV) is None
