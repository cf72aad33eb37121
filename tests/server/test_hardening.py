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
