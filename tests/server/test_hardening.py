"""The hostile review's findings: ledger creation, catalog-query size, login
enumeration, throttling, and what the budget messages reveal."""

from __future__ import annotations

import sqlite3

import pytest

from dpsql.server import ServerError
from dpsql.server.config import load_config

from .conftest import add_users, cli, init_ledger, write_config

# -- 1. the service never creates a ledger -----------------------------------------------

def _server(config):
    from dpsql.server.server import Server

    return Server(load_config(config))


def test_missing_empty_or_foreign_ledger_is_an_error(tmp_path):
    config = write_config(tmp_path, tls="off", ledger=False)
    ledger = tmp_path / "ledger.sqlite"
    out = cli("user", "add", "alice", "--config", str(config), "--budget", "1,0",
              "--password-env", "NOPE")
    assert out.returncode == 1 and "budget init" in out.stderr, out.stderr
    assert not ledger.exists()
    out = cli("user", "list", "--config", str(config))
    assert out.returncode == 1 and not ledger.exists()
    out = cli("serve", "--config", str(config), "--check")
    assert out.returncode == 1 and "budget init" in out.stderr and not ledger.exists()
    with pytest.raises(ServerError, match="never creates a ledger"):
        _server(config)
    assert not ledger.exists()
    ledger.write_bytes(b"")  # an empty (truncated) file
    with pytest.raises(ServerError, match="empty file"):
        _server(config)
    ledger.unlink()
    sqlite3.connect(ledger).execute("CREATE TABLE t (x)").connection.close()  # foreign
    with pytest.raises(ServerError, match="not a dpsql ledger"):
        _server(config)


def test_ledger_id_pin(tmp_path):
    config = write_config(tmp_path, tls="off")
    from dpsql.ledger import Ledger

    real = Ledger(tmp_path / "ledger.sqlite", create=False)
    real_id = real.id
    real.close()
    text = config.read_text()
    config.write_text(text + "ledger_id: deadbeef\n")
    with pytest.raises(ServerError, match="not the pinned"):
        _server(config)
    out = cli("serve", "--config", str(config), "--check")
    assert out.returncode == 1 and "not the pinned" in out.stderr
    out = cli("user", "add", "alice", "--config", str(config), "--budget", "1,0",
              "--password-env", "NOPE")
    assert out.returncode == 1 and "not the pinned" in out.stderr
    config.write_text(text + f"ledger_id: {real_id}\n")
    add_users(config, ["alice"])
    server = _server(config)
    assert server.ledger.id == real_id
    server.ledger.close()
    # a replaced ledger (a fresh one at the same path) is refused by the pin
    (tmp_path / "ledger.sqlite").unlink()
    init_ledger(tmp_path / "ledger.sqlite")
    with pytest.raises(ServerError, match="not the pinned"):
        _server(config)


# -- 2. a catalog query's answer is bounded ------------------------------------------------

@pytest.fixture(scope="module")
def probe_db():
    from dpsql.catalog import load_catalog
    from dpsql.datasets import catalog_path
    from dpsql.server.catalog_sql import ProbeDB

    return ProbeDB(load_catalog(str(catalog_path("pums"))))


@pytest.mark.parametrize("sql", [
    "SELECT repeat('x', 10000) FROM range(100000)",
    "SELECT 1 FROM range(100000000)",
    "SELECT * FROM generate_series(1, 100000000)",
    "SELECT generate_series(1, 100000000)",
    "SELECT lpad('x', 100000000)",
    "SELECT unnest(range(100000000))",
    "SELECT x FROM unnest(list_resize([1], 100000000)) t(x)",
    "SELECT * FROM pg_catalog.pg_class, repeat('x', 5)",
])
def test_generators_refused_in_catalog_queries(probe_db, sql):
    from dpsql.errors import UnsupportedQueryError

    with pytest.raises(UnsupportedQueryError, match="catalog query"):
        probe_db.run(sql, "alice")


def test_catalog_answer_capped_in_rows_and_bytes(probe_db):
    from dpsql.errors import UnsupportedQueryError
    from dpsql.server.catalog_sql import ProbeDB

    # pg_proc has thousands of rows: its square is far over the row cap
    with pytest.raises(UnsupportedQueryError, match="too large"):
        probe_db.run("SELECT a.proname, b.proname FROM pg_catalog.pg_proc a, "
                     "pg_catalog.pg_proc b", "alice")
    small = ProbeDB(probe_db.catalog, max_bytes=4096)
    with pytest.raises(UnsupportedQueryError, match="too large"):
        small.run("SELECT proname FROM pg_catalog.pg_proc", "alice")
    # the clients' own probes still answer (test_recorded_probes_answer has them all)
    cols, rows = probe_db.run("SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r'",
                              "alice")
    assert ("pums",) in rows


def test_catalog_error_names_no_duckdb_class(probe_db):
    from dpsql.errors import UnsupportedQueryError

    with pytest.raises(UnsupportedQueryError) as info:
        probe_db.run("SELECT nosuchcolumn FROM pg_catalog.pg_class", "alice")
    assert "Exception" not in str(info.value) and "Binder" not in str(info.value)
