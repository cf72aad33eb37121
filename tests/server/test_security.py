"""Security of the service: logins, TLS, cancel keys, malformed frames, probe replay."""

from __future__ import annotations

import os
import random
import socket
import ssl
import struct
import time
from pathlib import Path

import psycopg
import pytest

from dpsql.datasets import catalog_path
from dpsql.server.catalog_sql import ProbeDB
from dpsql.server.protocol import PROTOCOL_3

from .conftest import add_users, start, stop, write_config

FIXTURES = Path(__file__).parent / "fixtures"


def _fails(dsn: str) -> psycopg.OperationalError:
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(dsn, connect_timeout=20).close()
    return info.value


def test_wrong_password_and_unknown_user_look_the_same(service):
    t0 = time.monotonic()
    wrong = _fails(service.dsn("alice", password="nope"))
    t1 = time.monotonic()
    unknown = _fails(service.dsn("alice", password="nope").replace("user=alice",
                                                                   "user=mallory"))
    t2 = time.monotonic()
    assert 'password authentication failed for user "alice"' in str(wrong)
    assert 'password authentication failed for user "mallory"' in str(unknown)
    # the same fixed wait for both (0.5 s by default), never a fast "no such user"
    assert (t1 - t0) >= 0.45 and (t2 - t1) >= 0.45
    assert abs((t1 - t0) - (t2 - t1)) < 0.4


def test_no_user_and_plain_tcp_refused(service):
    sock = socket.create_connection((service.host, service.port), timeout=10)
    sock.sendall(struct.pack("!ii", 8, 80877103))
    assert sock.recv(1) == b"S"
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(sock)
    body = struct.pack("!i", PROTOCOL_3) + b"database\0pums\0\0"  # no user
    s.sendall(struct.pack("!i", len(body) + 4) + body)
    reply = s.recv(4096)
    assert reply[:1] == b"E" and b"28000" in reply and b"no user name" in reply
    s.close()
    err = _fails(service.dsn("alice", sslmode="disable"))
    assert "TLS is required" in str(err)


def test_gssenc_refused_then_tls(service):
    # libpq tries GSS encryption first when asked; the server says N and goes on
    with psycopg.connect(service.dsn("alice", gssencmode="prefer")) as con:
        assert con.execute("SELECT 1").fetchone() == (1,)


def test_cancel_with_wrong_key_is_ignored(service):
    with psycopg.connect(service.dsn("alice"), autocommit=True) as con:
        pid = con.info.backend_pid
        raw = socket.create_connection((service.host, service.port))
        raw.sendall(struct.pack("!iiii", 16, 80877102, pid, 12345))
        raw.close()
        time.sleep(0.2)
        assert con.execute("SELECT 1").fetchone() == (1,)


def test_other_login_cannot_read_budget(service):
    with psycopg.connect(service.dsn("bob"), autocommit=True) as con:
        row = con.execute("SHOW dpsql.budget").fetchone()
        assert row[0] == "bob"
        # the ledger and the login store are not reachable as tables either
        for sql in ("SELECT * FROM pg_catalog.pg_authid", "SELECT * FROM pg_roles"):
            assert con.execute(sql).fetchall() == []


def _raw_session(service):
    """A TLS socket after a successful login, via the startup sequence by hand."""
    from scramp import ScramClient

    sock = socket.create_connection((service.host, service.port), timeout=10)
    sock.sendall(struct.pack("!ii", 8, 80877103))
    assert sock.recv(1) == b"S"
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(sock)
    body = struct.pack("!i", PROTOCOL_3) + b"user\0alice\0\0"
    s.sendall(struct.pack("!i", len(body) + 4) + body)

    def read():
        head = b""
        while len(head) < 5:
            head += s.recv(5 - len(head))
        n = struct.unpack("!i", head[1:])[0] - 4
        data = b""
        while len(data) < n:
            data += s.recv(n - len(data))
        return head[:1], data

    kind, data = read()
    assert kind == b"R" and data[4:].startswith(b"SCRAM-SHA-256")
    client = ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw-1")
    first = client.get_client_first().encode()
    payload = b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first
    s.sendall(b"p" + struct.pack("!i", len(payload) + 4) + payload)
    kind, data = read()
    client.set_server_first(data[4:].decode())
    final = client.get_client_final().encode()
    s.sendall(b"p" + struct.pack("!i", len(final) + 4) + final)
    while True:
        kind, data = read()
        if kind == b"Z":
            return s


@pytest.mark.slow  # fuzzing
def test_fuzzer_random_and_mutated_frames(service):
    """Garbage closes the sender's connection only; the server keeps answering others."""
    rng = random.Random(20)
    with psycopg.connect(service.dsn("bob"), autocommit=True) as other:
        valid = [b"Q" + struct.pack("!i", 13) + b"SELECT 1\0",
                 b"P" + struct.pack("!i", 8) + b"\0\0\0\0",
                 b"B" + struct.pack("!i", 12) + b"\0\0\0\0\0\0\0\0",
                 b"D" + struct.pack("!i", 6) + b"S\0", b"S" + struct.pack("!i", 4)]
        for i in range(int(os.environ.get("DPSQL_SERVE_FUZZ", "40"))):
            if i % 4 == 0:  # before login: random startup bytes
                sock = socket.create_connection((service.host, service.port), timeout=5)
                data = rng.randbytes(rng.randint(1, 64))
            else:
                sock = _raw_session(service)
                frame = bytearray(rng.choice(valid))
                for _ in range(rng.randint(1, 4)):
                    frame[rng.randrange(len(frame))] = rng.randrange(256)
                data = bytes(frame) + (rng.randbytes(rng.randint(0, 32)) if i % 3 else b"")
                if i % 7 == 0:  # an oversize length: refused before it is read
                    data = b"Q" + struct.pack("!i", 50_000_000)
            try:
                sock.sendall(data)
                sock.settimeout(2)
                sock.recv(4096)
            except OSError:
                pass
            finally:
                sock.close()
            assert other.execute("SELECT 1").fetchone() == (1,)
    assert service.proc.poll() is None


@pytest.mark.parametrize("client", sorted(p.stem for p in FIXTURES.glob("*.sql")))
def test_recorded_probes_answer(client):
    """Every catalog query the clients sent (recorded with DPSQL_SERVE_TRACE) still
    answers, free, from the catalog alone."""
    from dpsql.catalog import load_catalog

    db = ProbeDB(load_catalog(str(catalog_path("pums"))))
    queries = [q.strip() for q in (FIXTURES / f"{client}.sql").read_text().split("\n;;\n")
               if q.strip() and not q.startswith("-- no probes")]
    for q in dict.fromkeys(queries):
        n = len({int(x) for x in __import__("re").findall(r"\$(\d+)", q)})
        db.run(q, "alice", [None] * n)


def test_tls_off_only_on_loopback_and_plain_login(tmp_path):
    from dpsql.server import ServerError
    from dpsql.server.config import config_from_mapping

    with pytest.raises(ServerError, match="loopback"):
        config_from_mapping({"database": "x", "catalog": "c", "ledger": "l", "tls": "off",
                             "listen": {"host": "0.0.0.0"}}, tmp_path)
    config = write_config(tmp_path, tls="off")
    add_users(config, ["alice"])
    proc, host, port = start(config)
    try:
        dsn = (f"host={host} port={port} user=alice password=alice-pw-1 dbname=pums "
               "sslmode=disable")
        with psycopg.connect(dsn) as con:  # SCRAM still, over loopback TCP
            assert con.execute("SELECT 1").fetchone() == (1,)
    finally:
        stop(proc)
