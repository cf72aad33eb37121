"""The service under abuse: ledger creation and pins, catalog-query size, login
enumeration, throttling of guesses and handshakes, and what budget messages reveal."""

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
    # replace() and format() (Metabase's probes) only in bounded forms
    "SELECT replace('aaaaaaaa', 'a', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb')",
    "SELECT replace(replace('aaaaaaaa', 'a', 'bbbbbbbbbbbbbbbb'), 'b', 'cccccccccccccccc')",
    "SELECT replace(relname, 'a', relname) FROM pg_catalog.pg_class",
    "SELECT format(relname, relname) FROM pg_catalog.pg_class",
    "SELECT printf('%s', 1)",
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


# -- 3. and 4. logins: indistinguishable, throttled, bounded --------------------------------

def test_unknown_login_verifier_has_the_real_shape(tmp_path):
    from scramp import ScramClient

    from dpsql.server.auth import ScramExchange, VerifierStore

    store = VerifierStore(tmp_path / "logins.sqlite")
    store.add("alice", "pw")

    def server_first(login):
        client = ScramClient(["SCRAM-SHA-256"], login, "x")
        msg = ScramExchange(store, login).first(client.get_client_first())
        return dict(part.split("=", 1) for part in msg.split(","))

    import base64

    real, mock = server_first("alice"), server_first("mallory")
    assert real.keys() == mock.keys()
    assert len(base64.b64decode(real["s"])) == len(base64.b64decode(mock["s"])) == 32
    assert real["i"] == mock["i"] and len(real["r"]) == len(mock["r"])
    assert server_first("mallory")["s"] == mock["s"]  # stable, like a real salt


def test_throttle_caps_wait_and_evicts_oldest():
    from dpsql.server.auth import Throttle

    t = Throttle(max_keys=10)
    for _ in range(100):
        t.failed("10.0.0.1", "alice")
    assert 0 < t.delay("10.0.0.2", "alice") <= 5.0  # slowed, never locked out
    for i in range(20):
        t.failed(f"10.0.1.{i}", f"u{i}")
    assert len(t._fails) <= 10
    # the newest entries survive (no global clear); the oldest were evicted
    assert t.failures("u:u19") == 1 and t.failures("u:alice") == 0


def _inproc(tmp_path, extra: str, body):
    tmp_path.mkdir(exist_ok=True)
    """Runs ``body(server)`` (a coroutine function) against an in-process server."""
    import asyncio

    from dpsql.server.server import Server

    config = write_config(tmp_path, tls="off", extra=extra)
    add_users(config, ["alice"])

    async def main():
        server = Server(load_config(config))
        await server.start()
        task = asyncio.ensure_future(server.serve_forever())
        try:
            return await body(server)
        finally:
            task.cancel()
            await server.close()

    return asyncio.run(main())


async def _open(server, login: str):
    """Startup packet, read AuthenticationSASL: (reader, writer)."""
    import asyncio
    import struct

    from dpsql.server.protocol import PROTOCOL_3

    reader, writer = await asyncio.open_connection(*server.address)
    body = struct.pack("!i", PROTOCOL_3) + b"user\0" + login.encode() + b"\0\0"
    writer.write(struct.pack("!i", len(body) + 4) + body)
    kind = await reader.readexactly(1)
    n = struct.unpack("!i", await reader.readexactly(4))[0]
    data = await reader.readexactly(n - 4)
    return kind, data, reader, writer


async def _attempt(server, login: str, password: str) -> bytes:
    """One whole SCRAM attempt; the kind of the final message (b'E' on failure)."""
    import struct

    from scramp import ScramClient

    kind, _, reader, writer = await _open(server, login)
    client = ScramClient(["SCRAM-SHA-256"], login, password)
    first = client.get_client_first().encode()
    payload = b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first
    writer.write(b"p" + struct.pack("!i", len(payload) + 4) + payload)
    await reader.readexactly(1)
    n = struct.unpack("!i", await reader.readexactly(4))[0]
    client.set_server_first((await reader.readexactly(n - 4))[4:].decode())
    final = client.get_client_final().encode()
    writer.write(b"p" + struct.pack("!i", len(final) + 4) + final)
    kind = await reader.readexactly(1)
    writer.close()
    return kind


def test_leaving_mid_scram_counts_as_a_failure(tmp_path):
    import struct

    from scramp import ScramClient

    async def body(server):
        _, _, reader, writer = await _open(server, "alice")
        first = ScramClient(["SCRAM-SHA-256"], "alice", "x").get_client_first().encode()
        payload = b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first
        writer.write(b"p" + struct.pack("!i", len(payload) + 4) + payload)
        await reader.readexactly(5)  # the server-first message's header: then leave
        writer.close()
        import asyncio

        for _ in range(50):
            if server.throttle.failures("u:alice"):
                break
            await asyncio.sleep(0.05)
        return server.throttle.failures("u:alice")

    assert _inproc(tmp_path, "", body) == 1


def test_parallel_guesses_for_one_login_run_one_at_a_time(tmp_path):
    import asyncio
    import time

    async def body(server):
        t0 = time.monotonic()
        kinds = await asyncio.gather(*[_attempt(server, "alice", f"guess{i}")
                                       for i in range(6)])
        return kinds, time.monotonic() - t0

    kinds, elapsed = _inproc(tmp_path, "limits: {failed_login_delay_seconds: 0.3}\n",
                             body)
    assert set(kinds) == {b"E"}
    assert elapsed >= 6 * 0.3 - 0.05  # serialized: not 6 guesses in 0.3 s


def test_handshakes_count_toward_the_connection_limits(tmp_path):
    import asyncio

    async def body(server):
        idle = [await asyncio.open_connection(*server.address) for _ in range(3)]
        await asyncio.sleep(0.2)
        r, w = await asyncio.open_connection(*server.address)  # a fourth: refused
        reply = await asyncio.wait_for(r.read(200), 5)
        w.close()
        for _, writer in idle:
            writer.close()
        return reply

    per_address = _inproc(tmp_path / "a", "limits: {max_handshakes_per_address: 3}\n", body)
    assert b"53300" in per_address and b"authenticating" in per_address
    total = _inproc(tmp_path / "b", "limits: {max_connections: 3}\n", body)
    assert b"53300" in total and b"too many clients" in total


# -- 5. a login sees its own budget only -----------------------------------------------------

def test_budget_shows_own_remaining_not_the_data_sets(tmp_path):
    from dpsql.datasets import catalog_path
    from dpsql.ledger import ALL, Ledger
    from dpsql.server.session import QueryError, Session, as_query_error

    write_config(tmp_path, tls="off")
    ledger = Ledger(tmp_path / "ledger.sqlite", create=False)
    ledger.set_budget("pums", (1.0, 1e-5), ALL)
    ledger.set_budget("pums", (5.0, 1e-5), "alice")
    ledger.set_budget("pums", (5.0, 1e-5), "bob")
    sessions = []
    try:
        for login in ("bob", "alice"):
            sessions.append(Session(str(tmp_path / "pums.duckdb"),
                                    str(catalog_path("pums")), ledger, login, None))
        bob, alice = sessions
        bob.run("SET dpsql.epsilon = 0.9")
        bob.run("SELECT COUNT(*) AS n FROM pums")
        alice.run("SET dpsql.epsilon = 0.5")
        row = alice.run("SHOW dpsql.budget").rows[0]
        assert row[0] == "alice" and row[3] == pytest.approx(5.0) and row[5] == 5.0
        with pytest.raises(QueryError) as info:
            try:
                alice.run("SELECT COUNT(*) AS n FROM pums")
            except QueryError:
                raise
            except Exception as exc:  # noqa: BLE001 - as the server maps it
                raise as_query_error(exc) from None
        text = info.value.message
        assert info.value.code == "53400" and "data set budget" not in text
        assert "0.1" not in text and "epsilon=0.5" in text
    finally:
        for s in sessions:
            s.close()
        ledger.close()
