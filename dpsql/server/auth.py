"""Logins: SCRAM-SHA-256 verifiers, the login store, throttling, a trial certificate.

The store keeps, per login, only a SCRAM-SHA-256 verifier (salt, iteration count,
StoredKey, ServerKey; RFC 5802/7677), the same secret PostgreSQL keeps in
``pg_authid``: it lets the server check a proof but not log in as the user, and a
password is never stored or logged. The store is its own small SQLite file beside the
ledger (the ledger's schema belongs to the ledger); budgets live in the ledger.

Unknown logins get a *mock* exchange: a salt derived from the login name and a secret
kept in the store, so the server's first message for an unknown name looks like one for
a real name and stays the same across attempts, and the exchange fails at the proof like
a wrong password. Failures are answered after a fixed delay and throttled per client
address and per login.

>>> store = VerifierStore(":memory:")
>>> store.add("alice", "s3cret", iterations=4096)
>>> [name for name, *_ in store.list()]
['alice']
>>> ok, _ = scram_exchange_offline(store, "alice", "s3cret")
>>> wrong = scram_exchange_offline(store, "alice", "wrong")[0]
>>> ok, wrong, scram_exchange_offline(store, "bob", "x")[0]
(True, False, False)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from datetime import UTC, datetime
from pathlib import Path

from scramp import ScramClient, ScramException, ScramMechanism

from dpsql.ledger import check_analyst
from dpsql.server import ServerError

MECHANISM = "SCRAM-SHA-256"
#: PostgreSQL's default (scram_iterations); the minimum RFC 7677 allows.
DEFAULT_ITERATIONS = 4096
#: The salt length of a real verifier (scramp's); a mock verifier's salt has it too.
SALT_BYTES = 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS logins (
    name TEXT PRIMARY KEY, salt BLOB NOT NULL, iterations INTEGER NOT NULL,
    stored_key BLOB NOT NULL, server_key BLOB NOT NULL,
    created TEXT NOT NULL, updated TEXT NOT NULL);
"""


class VerifierStore:
    """The login store: one SQLite file of SCRAM-SHA-256 verifiers.

    Safe to share between threads; every write is one transaction, so the CLI can
    change logins while a server runs (the server reads a verifier at each login).
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.exists():
                raise ServerError(f"login store directory {str(parent)!r} does not exist")
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
                os.chmod(self.path, 0o600)  # verifiers are secrets (offline guessing)
            self._db.execute("PRAGMA synchronous = FULL")
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA.strip().split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    row = self._db.execute(
                        "SELECT value FROM meta WHERE key = 'mock_secret'").fetchone()
                    if row is None:
                        self._db.execute(
                            "INSERT INTO meta VALUES ('format', 'dpsql-logins'), "
                            "('mock_secret', ?)", (secrets.token_hex(32),))
                        row = self._db.execute(
                            "SELECT value FROM meta WHERE key = 'mock_secret'").fetchone()
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            self._mock_secret = bytes.fromhex(row[0])
        except sqlite3.DatabaseError as exc:
            raise ServerError(f"{self.path!r} is not a usable dpsql login store ({exc})") \
                from None

    def _write(self, sql: str, args: tuple) -> int:
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def add(self, name: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> None:
        """Adds a login.

        Raises:
            ServerError: the name is taken, not a valid analyst name, or the password
                is empty.
        """
        check_login_name(name)
        salt, stored, server, i = make_verifier(password, iterations)
        now = _now()
        try:
            self._write("INSERT INTO logins VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (name, salt, i, stored, server, now, now))
        except sqlite3.IntegrityError:
            raise ServerError(f"login {name!r} exists; use 'dpsql user passwd'") from None

    def set_password(self, name: str, password: str,
                     iterations: int = DEFAULT_ITERATIONS) -> None:
        """Replaces a login's verifier.

        Raises:
            ServerError: no such login.
        """
        salt, stored, server, i = make_verifier(password, iterations)
        n = self._write("UPDATE logins SET salt = ?, iterations = ?, stored_key = ?, "
                        "server_key = ?, updated = ? WHERE name = ?",
                        (salt, i, stored, server, _now(), name))
        if n == 0:
            raise ServerError(f"no login {name!r}")

    def remove(self, name: str) -> None:
        """Removes a login (its account and spending stay in the ledger).

        Raises:
            ServerError: no such login.
        """
        if self._write("DELETE FROM logins WHERE name = ?", (name,)) == 0:
            raise ServerError(f"no login {name!r}")

    def list(self) -> list[tuple[str, int, str, str]]:
        """(name, iterations, created, updated) of every login, by name."""
        with self._lock:
            return self._db.execute("SELECT name, iterations, created, updated FROM logins "
                                    "ORDER BY name").fetchall()

    def exists(self, name: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM logins WHERE name = ?",
                                    (name,)).fetchone() is not None

    def verifier(self, name: str) -> tuple[tuple[bytes, bytes, bytes, int], bool]:
        """(salt, stored key, server key, iterations) and whether the login exists.

        An unknown name gets a mock verifier: a salt stable for the name (so probing
        the salt twice does not tell a real login from a made-up one) and random keys
        that no proof matches.
        """
        with self._lock:
            row = self._db.execute("SELECT salt, stored_key, server_key, iterations FROM "
                                   "logins WHERE name = ?", (name,)).fetchone()
        if row is not None:
            return (bytes(row[0]), bytes(row[1]), bytes(row[2]), int(row[3])), True
        # the same shape as a real verifier: scramp's salt length, the default count
        salt = hmac.new(self._mock_secret, b"salt:" + name.encode("utf-8", "replace"),
                        hashlib.sha256).digest()
        while len(salt) < SALT_BYTES:
            salt += hmac.new(self._mock_secret, salt, hashlib.sha256).digest()
        return (salt[:SALT_BYTES], secrets.token_bytes(32), secrets.token_bytes(32),
                DEFAULT_ITERATIONS), False

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_login_name(name: str) -> None:
    """A login is an analyst name (printable, not ``*``) of at most 63 bytes (as
    PostgreSQL's NAMEDATALEN allows).

    Raises:
        ServerError: it is not.
    """
    try:
        check_analyst(name, "login")
    except Exception as exc:  # noqa: BLE001 - re-raised as the service's error
        raise ServerError(str(exc)) from None
    if len(name.encode("utf-8")) > 63 or name != name.strip():
        raise ServerError(f"login {name!r}: at most 63 bytes, no surrounding spaces")


def make_verifier(password: str, iterations: int = DEFAULT_ITERATIONS):
    """A fresh SCRAM-SHA-256 verifier: (salt, stored key, server key, iterations).

    Raises:
        ServerError: an empty password.
    """
    if not isinstance(password, str) or not password:
        raise ServerError("the password must not be empty")
    try:
        return ScramMechanism(MECHANISM).make_auth_info(password, iteration_count=iterations)
    except ScramException as exc:
        raise ServerError(f"cannot make a verifier: {exc}") from None


class ScramExchange:
    """The server side of one SCRAM-SHA-256 exchange (RFC 5802), via ``scramp``.

    The login name comes from the startup packet, as in PostgreSQL; the name inside
    the SCRAM message is ignored (libpq sends an empty one).
    """

    def __init__(self, store: VerifierStore, login: str):
        self.verifier, self.known = store.verifier(login)
        self._server = ScramMechanism(MECHANISM).make_server(lambda _name: self.verifier)

    def first(self, client_first: str) -> str:
        """Raises ScramException on a malformed message."""
        # libpq sends an empty SCRAM user name ("n=,"), which scramp refuses: parse
        # a stand-in name, then restore the client's own bare message, which both
        # sides sign (RFC 5802's AuthMessage)
        head, sep, bare = client_first.partition(",")
        gs2_rest, sep2, bare = bare.partition(",")
        if not (sep and sep2):
            raise ScramException("malformed client-first message")
        original = bare
        if bare.startswith("n=,"):
            bare = "n=*," + bare[3:]
        self._server.set_client_first(f"{head},{gs2_rest},{bare}")
        self._server.client_first_bare = original
        return self._server.get_server_first()

    def final(self, client_final: str) -> str | None:
        """The server-final message on success; None when the proof is wrong."""
        try:
            self._server.set_client_final(client_final)
        except ScramException:
            return None
        if not self.known:  # a mock verifier never authenticates, whatever the proof
            return None
        return self._server.get_server_final()


def scram_exchange_offline(store: VerifierStore, login: str, password: str):
    """A whole exchange in process (for tests and ``serve --check``): (ok, exchange)."""
    client = ScramClient([MECHANISM], login, password)
    ex = ScramExchange(store, login)
    client.set_server_first(ex.first(client.get_client_first()))
    final = ex.final(client.get_client_final())
    return final is not None, ex


class Throttle:
    """Failed logins, per client address and per login, in a sliding window.

    After ``free`` failures in ``window`` seconds, each further attempt from that
    address (or for that login) waits an extra second per failure, up to ``max_wait``
    (5 s, well below the authentication timeout: a real user is slowed, never locked
    out). The server runs at most one attempt per login at a time, so the wait bounds
    the guessing rate whatever the concurrency. The table keeps at most ``max_keys``
    addresses and logins, evicting those that failed least recently.
    """

    #: Failures kept per key: enough to reach the longest wait.
    PER_KEY = 64

    def __init__(self, free: int = 5, window: float = 300.0, max_wait: float = 5.0,
                 max_keys: int = 100_000):
        self.free, self.window, self.max_wait = free, window, max_wait
        self.max_keys = max_keys
        self._fails: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def failures(self, key: str) -> int:
        """Failures in the window for ``"a:" + address`` or ``"u:" + login``."""
        with self._lock:
            return self._count(key, time.monotonic())

    def _count(self, key: str, now: float) -> int:
        q = self._fails.get(key)
        if q is None:
            return 0
        while q and q[0] < now - self.window:
            q.popleft()
        if not q:
            del self._fails[key]
            return 0
        return len(q)

    def delay(self, address: str, login: str) -> float:
        """Seconds to wait before this attempt may proceed."""
        now = time.monotonic()
        with self._lock:
            n = max(self._count("a:" + address, now), self._count("u:" + login, now))
        return min(self.max_wait, max(0, n - self.free + 1)) if n >= self.free else 0.0

    def failed(self, address: str, login: str) -> None:
        now = time.monotonic()
        with self._lock:
            for key in ("a:" + address, "u:" + login):
                q = self._fails.get(key)
                if q is None:
                    q = self._fails[key] = deque(maxlen=self.PER_KEY)
                self._fails.move_to_end(key)
                q.append(now)
            while len(self._fails) > self.max_keys:  # bounded memory: the oldest go
                self._fails.popitem(last=False)


def self_signed(cert_path: Path, key_path: Path, host: str = "localhost") -> None:
    """Writes a self-signed certificate and its key (for a local trial only).

    Clients with ``sslmode=require`` accept it (they encrypt without checking who
    signed it); ``verify-full`` clients need a certificate from a real CA.
    """
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    alt: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for ip in ("127.0.0.1", "::1"):
        alt.append(x509.IPAddress(ipaddress.ip_address(ip)))
    now = datetime.now(UTC)
    from datetime import timedelta

    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .sign(key, hashes.SHA256()))
    key_bytes = key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_bytes)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
