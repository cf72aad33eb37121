"""The persistent, atomic, tamper-evident privacy-budget ledger (SQLite or PostgreSQL).

One ledger holds, per data set, the owner's total budget and optional per-analyst
budgets, the running totals of what was spent, and an audit log of every query. The
rules:

* **Charge before release.** ``charge`` checks that the query fits and records it in
  one write transaction, before the backend reads any data: SQLite's ``BEGIN
  IMMEDIATE`` write lock, or on PostgreSQL a row lock (``SELECT ... FOR UPDATE``) on the
  ledger's identity row, serialises every writer across threads, processes and hosts,
  so two queries can never both spend the last of a budget.
* **Constant-time admission.** The sums the accountants need (Σε, Σδ, Σρ and ρ's δ) are
  kept as running totals per (data set, analyst) and per data set (analyst ``*``),
  updated in the same transaction as the charge: a charge reads and writes a handful
  of rows whatever the ledger's age. The history stays, for audit and verification.
* **Failures keep their charge.** A query that fails after its charge is logged as
  ``failed``, one cancelled while it ran (Ctrl-C) as ``cancelled``; the charge stays.
  If even that outcome cannot be written (a full disk), the charge still stands and the
  failure goes to the owner's log (logger ``dpsql.owner``).
* **Refusals charge nothing and are bounded.** A query refused before reading data is
  logged as ``refused`` with cost 0, its text kept as a SHA-256 and the first
  :data:`SQL_KEPT` characters; past :data:`REFUSAL_CAP` stored refusals per analyst
  they are only counted. A query is never refused because the log is full.
* **Never forget.** A new ledger is made only where no file exists (an empty or foreign
  file is a :class:`~dpsql.errors.LedgerError`, never a fresh budget); it is created
  complete and linked into place atomically. Its real path is used (a symlink resolves
  to it), a file with a second hard link is refused (SQLite's locks follow the name),
  and every charge checks, inside its transaction, that the file at the path is still
  the one opened (device and inode) and still carries the ledger's random id: a ledger
  deleted or replaced under an open connection stops it before the next charge.
* **Tamper evidence.** Every entry carries the hash of the one before (a chain), over
  its cost, the full query's SHA-256 and length and the SHA-256 of the text kept; its
  outcome (written after execution) carries its own MAC bound to the entry's hash. With
  an owner secret (:data:`KEY_ENV`) the hashes are HMACs, and so are the budgets, the
  running totals and the data-set bindings, so only the key holder can rewrite them
  undetected.
* **The head record** (one ``meta`` row, MAC'd) names the newest entry (id and hash), a
  sequence number, and the exact version (128 bits of the MAC) of every budget, running
  total, binding and refusal-count row; it is rewritten in the same transaction as
  every charge, refusal, budget change and binding. Every transaction (charges and
  reads alike) checks it: its MAC, that the newest entry is the one it names (one index
  lookup), that it is not older than one this connection already saw, and that each
  row read is the version it names (a missing row must be missing there too). So,
  with the key, deleting or rewinding entries (a tail included), totals, budgets or
  bindings, or putting back an older row, is a :class:`~dpsql.errors.LedgerError` for
  an open connection and at the next open. At open the whole set of small-table rows
  is compared with the head, and the entries since the last verified checkpoint are
  checked and summed onto the checkpoint's totals, which must equal the running totals
  exactly (incremental: each entry is verified once by some open, not O(history) per
  open); ``dpsql budget verify`` checks the whole chain, every outcome MAC, and each
  stored text against the query's hash when the whole text is kept. Every stored cost
  must be finite and non-negative, or the ledger refuses. The head grows with the
  number of (data set, analyst) rows (about 70 bytes each) and is written per charge.
* **Clean failures.** A full disk, a read-only file, a lock held past the owner's
  timeout (:data:`TIMEOUT_ENV`, default 60 s) or a corrupt file is a ``LedgerError``,
  raised before any data is read.
* **Crash safety.** SQLite's rollback journal (``journal_mode=DELETE``) with
  ``synchronous=FULL``: a committed charge is in the main file itself, fsynced before
  the answer, so it survives a killed process or a crash and no side file holds it
  (deleting a ``-wal`` could lose committed charges; deleting a ``-journal`` can only
  lose an uncommitted one, for which no data was read). A killed process never leaves a
  half-written charge. A new ledger file is made with mode 0600 (it holds every
  analyst's SQL; SQLite gives its journal the same mode). A read-only open never falls
  back to ``immutable=1`` (which would ignore a journal and show a stale spend).

**What a ledger cannot detect on its own.** Without the owner's key, anyone who can
write the file can rewrite it consistently, head included (the chain then only catches
accidents: bit flips, truncation, naive edits). Even with the key, the file as a whole
(head included) can be rolled back to an older copy while no connection has it open
(an open connection refuses a head older than one it saw), or deleted then; when the
ledger is not pinned, the next connection then starts a fresh budget. Pinning the
ledger (which must then exist; creating it is the owner's act) and its id
(:data:`LEDGER_ID_ENV`, the catalog's ``ledger_id:``) turns a deleted or replaced file
into a refusal; a rollback stays undetectable from inside the file, so the owner keeps
the file where analysts cannot write it (behind ``dpsql serve``).

**Data sets and databases.** Each data set in a ledger is bound, at its first
connection, to the identity of its database (a file's device, inode and real path; a
server's normalised URL). A connection to another database under the same data set name
(e.g. two databases whose catalogs leave ``dataset:`` at ``"default"``) is refused: give
each its own ``dataset:`` or ledger, or, when the database really moved, the owner runs
``dpsql budget rebind``. A database file rebuilt at the same path (a new inode) is the
owner's new version of the same database and keeps its budget.

**Pins.** A connection names its database, ledger and analyst; a fresh ledger is a fresh
budget. When analysts can choose those arguments, the owner pins them, either in the
catalog (``database:``, ``ledger:``, both relative to the catalog file, ``ledger_id:``
and ``analyst:``) or in the environment the service process starts with
(:data:`DATABASE_ENV`, :data:`LEDGER_ENV`, :data:`LEDGER_ID_ENV`, :data:`ANALYST_ENV`,
and :data:`CATALOG_ENV`, which pins the catalog itself). The environment wins over the
catalog. Under a pin, a connection that names another database (compared by device and
inode for files, by normalised URL for servers), another ledger (``":memory:"``
included), another analyst or another catalog is refused with a
:class:`~dpsql.errors.LedgerError` before anything is opened; one that names none gets
the pinned one; a pinned ledger must already exist; and a connection's ``budget=`` is
only a cap, never the data set's total (only the owner sets that: the catalog's
``budget:`` or ``dpsql budget set``).

>>> led = Ledger(":memory:")
>>> led.ensure_budget("pums", (1.0, 1e-6))
>>> led.charge("pums", "alice", Cost(0.25), "SELECT COUNT(*) FROM pums")
1
>>> led.view("pums", "alice").spent
(0.25, 0.0)
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import math
import os
import secrets
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpsql.accounting import ACCOUNTANTS, NOTHING, Accounting, Cost, Spent
from dpsql.errors import BudgetExhaustedError, LedgerError, PrivacyParameterError
from dpsql.text import escape, is_plain

FORMAT = "dpsql-ledger"
VERSION = "3"
ALL = "*"  # analyst key of a data set's total budget

#: Environment variable of the service process: the only ledger (absolute path or URL).
LEDGER_ENV = "DPSQL_LEDGER"
#: Environment variable of the service process: the pinned ledger's id.
LEDGER_ID_ENV = "DPSQL_LEDGER_ID"
#: Environment variable of the service process: the only analyst identity.
ANALYST_ENV = "DPSQL_ANALYST"
#: Environment variable of the service process: the only catalog file (absolute path).
CATALOG_ENV = "DPSQL_CATALOG"
#: Environment variable of the service process: the only database (absolute path or URL).
DATABASE_ENV = "DPSQL_DATABASE"
#: The owner's secret that keys the ledger's hashes (HMAC-SHA256).
KEY_ENV = "DPSQL_LEDGER_KEY"
#: Seconds a charge waits for the ledger's lock before a LedgerError (default 60).
TIMEOUT_ENV = "DPSQL_LEDGER_TIMEOUT"

#: Characters of a refused query's text kept in the log (with its SHA-256 and length).
SQL_KEPT = 300
#: Characters of a charged query's text kept in the log (with its SHA-256 and length).
CHARGED_SQL_KEPT = 65536
#: Refusals stored per (data set, analyst); past it they are only counted.
REFUSAL_CAP = 1000
#: Longest analyst name accepted.
MAX_NAME = 200
#: A charge that finds this many entries past the checkpoint verifies them and moves
#: the checkpoint, so an open never has more than about this many entries to verify,
#: however long a connection ran before it (the one charge takes ~0.1 s more).
CHECKPOINT_EVERY = 10_000

_log = logging.getLogger("dpsql.owner")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# -- numbers ----------------------------------------------------------------------------


def real_number(value: Any, what: str) -> float:
    """``value`` as a finite, normal float, or a PrivacyParameterError.

    Accepts int, float, Decimal, Fraction and numpy integer/floating scalars; refuses
    bool, text, NaN, infinities and subnormal magnitudes (below 2.2e-308, where a
    float has lost precision and 1/x overflows).
    """
    np = sys.modules.get("numpy")
    ok = (int, float, Decimal, Fraction)
    if np is not None:
        ok = (*ok, np.integer, np.floating)
        if isinstance(value, np.bool_):
            ok = ()
    if isinstance(value, bool) or not isinstance(value, ok):
        raise PrivacyParameterError(f"{what} must be a real number, got {value!r}")
    try:
        x = float(value)
    except (OverflowError, ValueError):
        raise PrivacyParameterError(f"{what} must be a finite number, got {value!r}") \
            from None
    if not math.isfinite(x):
        raise PrivacyParameterError(f"{what} must be a finite number, got {value!r}")
    if x != 0 and abs(x) < sys.float_info.min:
        raise PrivacyParameterError(f"{what} is too small to be a usable number: {value!r}")
    return x


def check_budget(total: Any, what: str = "budget") -> tuple[float, float]:
    """An (epsilon, delta) budget as two floats: ε > 0 finite, 0 ≤ δ < 1.

    Raises:
        PrivacyParameterError: it is not such a pair.
    """
    if isinstance(total, str | bytes) or not hasattr(total, "__len__") or len(total) != 2:
        raise PrivacyParameterError(f"a {what} is an (epsilon, delta) pair, got {total!r}")
    eps = real_number(total[0], f"{what} epsilon")
    delta = real_number(total[1], f"{what} delta")
    if not eps > 0 or not 0 <= delta < 1:
        raise PrivacyParameterError(
            f"a {what} needs epsilon > 0 and 0 <= delta < 1, got ({eps}, {delta})")
    return (eps, delta)


def _check_extra(extra: Any) -> tuple[float, float]:
    if isinstance(extra, str | bytes) or not hasattr(extra, "__len__") or len(extra) != 2:
        raise PrivacyParameterError(f"a grant is an (epsilon, delta) pair, got {extra!r}")
    e = real_number(extra[0], "grant epsilon")
    d = real_number(extra[1], "grant delta")
    if e < 0 or d < 0:
        raise PrivacyParameterError(f"a grant adds, it cannot be negative: ({e}, {d})")
    return (e, d)


def _check_cost(cost: Cost) -> tuple[float, float, float, float]:
    parts = cost.parts
    if not all(math.isfinite(x) and x >= 0 for x in parts):
        raise LedgerError(f"refusing to record a cost that is not finite and non-negative: "
                          f"{parts}")
    return parts


def check_analyst(name: Any, where: str = "analyst") -> None:
    """An analyst name: printable text, at most :data:`MAX_NAME` characters, not ``'*'``.

    Raises:
        LedgerError: it is not.
    """
    if (not isinstance(name, str) or not name.strip() or name == ALL or not is_plain(name)
            or len(name) > MAX_NAME):
        shown = name if not isinstance(name, str) or len(name) <= 60 else name[:60] + "..."
        raise LedgerError(
            f"{where} must be a name of at most {MAX_NAME} printable characters ('*' is "
            f"reserved for the data set's total), got {shown!r}")


def check_dataset(name: Any, where: str = "data set") -> None:
    """A data set name: the same rule as analysts' names."""
    if (not isinstance(name, str) or not name.strip() or name == ALL or not is_plain(name)
            or len(name) > MAX_NAME):
        raise LedgerError(f"{where} must be a name of at most {MAX_NAME} printable "
                          f"characters, got {name!r}")


# -- hashing ----------------------------------------------------------------------------


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _storable(text: str) -> str:
    """Text a database can store: a lone surrogate (not UTF-8) becomes a visible escape;
    NUL (which PostgreSQL's text refuses) too."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def _owner_key() -> bytes | None:
    value = os.environ.get(KEY_ENV)
    return value.encode("utf-8") if value else None


def _timeout() -> float:
    value = os.environ.get(TIMEOUT_ENV)
    if not value:
        return 60.0
    try:
        t = float(value)
    except ValueError:
        t = math.nan
    if not (math.isfinite(t) and t > 0):
        raise LedgerError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {value!r}")
    return t


# -- database identity ------------------------------------------------------------------


def normalise_url(url: str) -> str | None:
    """A server URL as ``backend://host:port/database`` (no user, password or driver).

    None when ``url`` is not a URL SQLAlchemy reads.
    """
    import sqlalchemy as sa

    try:
        u = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return None
    backend = u.get_backend_name()
    port = u.port or {"postgresql": 5432, "mysql": 3306}.get(backend)
    host = (u.host or "localhost").lower()
    if host in ("127.0.0.1", "::1"):
        host = "localhost"
    return f"{backend}://{host}:{port}/{u.database or ''}"


def database_identity(database: Any) -> dict | None:
    """What identifies a database for its ledger: a file's real path, device and inode,
    or a server's normalised URL; None for an in-memory database or a live object
    without a file."""
    from dpsql.backends import ledger_home

    if isinstance(database, str) and "://" in database:
        home = ledger_home(database)
        if home is None:
            norm = normalise_url(database)
            return None if norm is None else {"kind": "server", "url": norm}
        database = home
    if isinstance(database, str | Path) and str(database) != ":memory:":
        real = os.path.realpath(database)
        try:
            st = os.stat(real)
        except OSError:
            return None
        return {"kind": "file", "path": real, "dev": st.st_dev, "ino": st.st_ino}
    try:
        import duckdb

        if isinstance(database, duckdb.DuckDBPyConnection):
            row = database.execute("SELECT path FROM duckdb_databases() "
                                   "WHERE database_name = current_database()").fetchone()
            if row and row[0]:
                return database_identity(row[0])
    except ImportError:  # pragma: no cover - duckdb is a dependency
        pass
    return None


def _shown_identity(identity: dict) -> str:
    return identity.get("path") or identity.get("url") or "?"


# -- the stores -------------------------------------------------------------------------


class _SQLite:
    """SQLite specifics: connection, locking, errors, the file's identity."""

    kind = "sqlite"
    prefix = ""
    real = "REAL"
    integer = "INTEGER"
    id_column = "id INTEGER PRIMARY KEY"

    def __init__(self, path: str, timeout: float, create: bool, readonly: bool):
        self.memory = path == ":memory:"
        self.readonly = readonly
        self.timeout = timeout
        self.path = path if self.memory else os.path.realpath(path)
        self.stat: os.stat_result | None = None
        self.created = False
        if not self.memory:
            self._prepare_file(path, create)
            # SQLite would quietly open an unwritable file read-only (the rollback journal
            # needs no -shm); the file and its folder (where the journal goes) must be
            # writable for charges, so say so at open, not at the first charge
            if not readonly and not (os.access(self.path, os.W_OK)
                                     and os.access(Path(self.path).parent, os.W_OK)):
                raise LedgerError(f"ledger {path!r} is read-only (the file or its folder): it "
                                  "cannot record charges (dpsql budget show/log can still "
                                  "read it)")
        try:
            if readonly:
                self.db = self._open_readonly()
            else:
                self.db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                          check_same_thread=False)
                self.db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
                if not self.memory:
                    # a rollback journal, not WAL: a committed charge lives in the main
                    # file itself (fsynced), so deleting a side file (the -wal) cannot
                    # lose it; a deleted -journal only loses an uncommitted one
                    mode = self.db.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
                    if mode != "delete":
                        raise LedgerError(f"ledger {path!r}: cannot leave journal mode "
                                          f"{mode!r} (another process holds it open)")
                self.db.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            raise _ledger_error(exc, path, "open") from None
        if not self.memory:
            self._check_identity()

    def _prepare_file(self, given: str, create: bool) -> None:
        p = Path(self.path)
        if p.is_dir():
            raise LedgerError(f"ledger path {given!r} is a directory")
        if not p.parent.exists():
            raise LedgerError(f"ledger directory {str(p.parent)!r} does not exist")
        if not p.exists():
            if not create:
                raise LedgerError(
                    f"ledger {given!r} does not exist, and this ledger may not be created "
                    "here (a pinned ledger is created by the data owner: dpsql budget "
                    "init or dpsql budget set); refusing to start a fresh budget")
            self._create_atomically(p)
        st = self._stat_settled(p)
        if st.st_size == 0:
            raise LedgerError(
                f"ledger {given!r} is an empty file, not a ledger: a ledger is never made "
                "over an existing file (was it truncated?); refusing to start a fresh "
                "budget; the owner restores it from a copy, or removes it")

    def _stat_settled(self, p: Path) -> os.stat_result:
        # a new ledger is linked into place and its temporary name removed just after:
        # a second link seen for a moment is that, not an attack
        deadline = time.monotonic() + 0.5
        while True:
            st = os.stat(p)
            if st.st_nlink <= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if st.st_nlink > 1:
            raise LedgerError(
                f"ledger {str(p)!r} has {st.st_nlink} hard links: SQLite's locks follow the "
                "name, so writers through two names would not exclude each other; keep "
                "one name (remove the other links)")
        return st

    def _create_atomically(self, p: Path) -> None:
        """Builds a complete empty ledger under a temporary name and links it into place,
        so no process ever sees a half-made (empty) file at the ledger's path."""
        tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.new")
        # No ledger at this name, so a -journal, -wal or -shm here is an orphan of a ledger
        # that was deleted while a process had it open: SQLite would play that journal back
        # into the new file. The old process keeps its own open descriptors either way.
        for suffix in ("-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{p}{suffix}")
        try:
            # only the owner may read it: it holds every analyst's SQL (SQLite gives its
            # journal the same mode)
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            con = sqlite3.connect(tmp, isolation_level=None)
            try:
                con.execute("PRAGMA journal_mode = DELETE")
                _Schema(self).create(con)
                _init_meta(con, "?", "", secrets.token_hex(16), _owner_key())
            finally:
                con.close()
            try:
                os.link(tmp, p)
                self.created = True
            except FileExistsError:
                pass  # another process made it first: open theirs
        except sqlite3.Error as exc:
            raise _ledger_error(exc, str(p), "create") from None
        except OSError as exc:
            raise LedgerError(f"cannot create ledger {str(p)!r}: {exc.strerror}") from None
        finally:
            for suffix in ("", "-journal", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(f"{tmp}{suffix}")

    def _open_readonly(self) -> sqlite3.Connection:
        uri = "file:" + (Path(self.path).as_uri()[7:] if not self.memory else ":memory:")
        # No immutable=1 fallback: it would ignore a journal (a crash's hot journal, or an
        # older ledger's WAL) and show a stale, lower spend. With the rollback journal a
        # plain read-only open works in a folder we cannot write; when it does not (a hot
        # journal only a writer can roll back), it is a LedgerError.
        con = sqlite3.connect(uri + "?mode=ro", uri=True, isolation_level=None,
                              check_same_thread=False, timeout=self.timeout)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error:
            con.close()
            raise
        return con

    def _check_identity(self) -> None:
        st = self._stat_settled(Path(self.path))
        self.stat = st

    def same_file(self) -> None:
        """Raises a LedgerError if the file at the path is no longer the one opened."""
        if self.memory:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise LedgerError(
                f"ledger {self.path!r} was deleted while this connection had it open; "
                "refusing to charge an unlinked file (the owner restores it)") from None
        except OSError as exc:
            raise LedgerError(f"ledger {self.path!r} cannot be checked: {exc.strerror}") \
                from None
        if (st.st_dev, st.st_ino) != (self.stat.st_dev, self.stat.st_ino):
            raise LedgerError(f"ledger {self.path!r} was replaced by another file while this "
                              "connection had it open; refusing to charge")
        if st.st_nlink > 1:
            raise LedgerError(f"ledger {self.path!r} gained a second hard link; refusing to "
                              "charge (SQLite's locks follow the name)")

    def begin_write(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        self.db.execute("BEGIN IMMEDIATE")

    def begin_read(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        self.db.execute("BEGIN")

    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def execute(self, sql: str, args: tuple = ()):
        return self.db.execute(sql, args)

    def errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def close(self) -> None:
        self.db.close()


class _Postgres:
    """PostgreSQL specifics: the same ledger in schema ``dpsql_ledger`` (or ``?schema=``)."""

    kind = "postgresql"
    real = "DOUBLE PRECISION"
    integer = "BIGINT"
    id_column = "id BIGINT PRIMARY KEY"

    def __init__(self, url: str, timeout: float, create: bool, readonly: bool):
        import psycopg
        import sqlalchemy as sa

        self.readonly = readonly
        self.created = False
        u = sa.make_url(url)
        schema = u.query.get("schema", "dpsql_ledger")
        if not isinstance(schema, str) or not schema.isidentifier():
            raise LedgerError(f"ledger schema must be a plain name, got {schema!r}")
        self.schema = schema
        self.prefix = f'"{schema}".'
        self.path = u.set(password=None).render_as_string()
        conninfo = u.set(drivername="postgresql", query={}).render_as_string(
            hide_password=False)
        try:
            self.db = psycopg.connect(conninfo, autocommit=True,
                                      connect_timeout=max(1, int(timeout)))
            self.db.execute(f"SET lock_timeout = '{int(timeout * 1000)}ms'")
            if readonly:
                self.db.execute("SET default_transaction_read_only = on")
        except psycopg.Error as exc:
            raise LedgerError(f"cannot open the PostgreSQL ledger {self.path!r}: "
                              f"{str(exc).strip()}") from None
        self._tx = False
        exists = self.db.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
            "table_name = 'meta'", (schema,)).fetchone()
        if not exists:
            if not create:
                raise LedgerError(f"no dpsql ledger in schema {schema!r} of {self.path!r}, and "
                                  "this ledger may not be created here; refusing to start a "
                                  "fresh budget")
            self._create()

    def _create(self) -> None:
        import psycopg

        try:
            with self.db.transaction():
                # one creator at a time: CREATE ... IF NOT EXISTS races on the catalogs
                self.db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                                ("dpsql-ledger:" + self.schema,))
                if self.db.execute(
                        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                        "AND table_name = 'meta'", (self.schema,)).fetchone():
                    return
                self.db.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                _Schema(self).create(self.db)
                _init_meta(self.db, "%s", self.prefix, secrets.token_hex(16), _owner_key())
                self.created = True
        except psycopg.Error as exc:
            raise LedgerError(f"cannot create the PostgreSQL ledger {self.path!r}: "
                              f"{str(exc).strip()}") from None

    def same_file(self) -> None:
        """Nothing to compare on a server: the id row, checked and locked, is the identity."""

    def begin_write(self) -> None:
        if self._tx:
            self.db.execute("ROLLBACK")
        self.db.execute("BEGIN")
        self._tx = True
        # the row lock that serialises every charge of this ledger, on every host
        self.db.execute(f"SELECT value FROM {self.prefix}meta WHERE key = 'id' FOR UPDATE")

    def begin_read(self) -> None:
        if self._tx:
            self.db.execute("ROLLBACK")
        self.db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self._tx = True

    def in_transaction(self) -> bool:
        return self._tx

    def execute(self, sql: str, args: tuple = ()):
        if sql in ("COMMIT", "ROLLBACK"):
            self._tx = False
        return self.db.execute(sql.replace("?", "%s"), args)

    def errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.Error,)

    def close(self) -> None:
        self.db.close()


class _Schema:
    def __init__(self, store):
        self.s = store

    def statements(self) -> list[str]:
        p, r, i = self.s.prefix, self.s.real, self.s.integer
        return [
            f"CREATE TABLE {p}meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            f"CREATE TABLE {p}budgets (dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
            f"epsilon {r} NOT NULL, delta {r} NOT NULL, accountant TEXT NOT NULL, "
            "source TEXT NOT NULL, updated TEXT NOT NULL, mac TEXT NOT NULL, "
            "PRIMARY KEY (dataset, analyst))",
            f"CREATE TABLE {p}totals (dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
            f"epsilon {r} NOT NULL, delta {r} NOT NULL, rho {r} NOT NULL, "
            f"rho_delta {r} NOT NULL, n {i} NOT NULL, mac TEXT NOT NULL, "
            "PRIMARY KEY (dataset, analyst))",
            f"CREATE TABLE {p}entries ({self.s.id_column}, time TEXT NOT NULL, "
            "dataset TEXT NOT NULL, analyst TEXT NOT NULL, kind TEXT NOT NULL, "
            f"epsilon {r} NOT NULL, delta {r} NOT NULL, rho {r} NOT NULL, "
            f"rho_delta {r} NOT NULL, sql TEXT NOT NULL, sql_hash TEXT NOT NULL, "
            f"sql_length {i} NOT NULL, outcome TEXT NOT NULL, detail TEXT, "
            "prev TEXT NOT NULL, hash TEXT NOT NULL, omac TEXT NOT NULL)",
            f"CREATE TABLE {p}refusal_counts (dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
            f"stored {i} NOT NULL, dropped {i} NOT NULL, PRIMARY KEY (dataset, analyst))",
            f"CREATE TABLE {p}bindings (dataset TEXT PRIMARY KEY, db TEXT NOT NULL, "
            "updated TEXT NOT NULL, mac TEXT NOT NULL)",
        ]

    def create(self, con) -> None:
        for statement in self.statements():
            con.execute(statement)


def _init_meta(con, ph: str, prefix: str, ledger_id: str, key: bytes | None) -> None:
    mac = _Mac(ledger_id, key)
    rows = [("format", FORMAT), ("version", VERSION), ("id", ledger_id),
            ("keyed", "1" if key else "0"), ("key_check", mac("key-check")),
            ("created", _now()), ("checkpoint", _checkpoint_doc(mac, 0, mac("genesis"), {})),
            ("head", _head_doc(mac, 0, 0, mac("genesis"), {}))]
    for k, v in rows:
        con.execute(f"INSERT INTO {prefix}meta VALUES ({ph}, {ph})", (k, v))


class _Mac:
    """SHA-256 of a record bound to the ledger's id; HMAC-SHA256 with the owner's key."""

    def __init__(self, ledger_id: str, key: bytes | None):
        self.prefix = f"dpsql-ledger:{ledger_id}:".encode()
        self.key = key

    def __call__(self, *parts: Any) -> str:
        msg = self.prefix + json.dumps(parts, separators=(",", ":"), ensure_ascii=True).encode()
        if self.key is not None:
            return hmac.new(self.key, msg, hashlib.sha256).hexdigest()
        return hashlib.sha256(msg).hexdigest()


def _checkpoint_doc(mac: _Mac, last_id: int, last_hash: str, totals: dict) -> str:
    rows = sorted([*k, *v] for k, v in totals.items())
    return json.dumps({"id": last_id, "hash": last_hash, "totals": rows,
                       "mac": mac("checkpoint", last_id, last_hash, rows)})


_ENTRY_COLUMNS = ("id, time, dataset, analyst, kind, epsilon, delta, rho, rho_delta, sql, "
                  "sql_hash, sql_length, outcome, detail, omac, prev, hash")


def _head_doc(mac: _Mac, seq: int, last_id: int, last_hash: str, rows: dict) -> str:
    items = sorted([k, v] for k, v in rows.items())
    return json.dumps({"seq": seq, "id": last_id, "hash": last_hash, "rows": items,
                       "mac": mac("head", seq, last_id, last_hash, items)})


def _hk(kind: str, *names: str) -> str:
    """The head's key of one row of a small table (b: budgets, t: totals, g: bindings,
    r: refusal counts)."""
    return kind + json.dumps(list(names), ensure_ascii=True)


def _tag(mac: str) -> str:
    return mac[:32]  # 128 bits of the row's MAC: enough to pin the row's exact version


#: The outcomes an entry of each kind may carry.
_OUTCOMES = {"charge": ("charged", "answered", "failed", "cancelled"),
             "refusal": ("refused",)}


def _ledger_error(exc: BaseException, path: str, doing: str,
                  timeout: float | None = None) -> LedgerError:
    """A database error while using the ledger, as a LedgerError that says what to do."""
    text = str(exc)
    low = text.lower()
    if "locked" in low or "lock timeout" in low or "busy" in low:
        wait = f" of {timeout:g} s" if timeout is not None else ""
        return LedgerError(f"ledger {path!r} stayed locked by another process past the "
                           f"owner's timeout{wait} ({TIMEOUT_ENV}); nothing was charged")
    if "full" in low or "disk i/o" in low or "no space" in low:
        return LedgerError(f"ledger {path!r} cannot be written (disk full or I/O error: "
                           f"{text}); nothing was charged")
    if "readonly" in low or "read-only" in low or "read only" in low:
        return LedgerError(f"ledger {path!r} is read-only: it cannot record charges "
                           "(dpsql budget show/log can still read it)")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return LedgerError(f"{path!r} is not a usable dpsql ledger ({text}); refusing to "
                           "start a fresh budget over it")
    if "unable to open" in low:
        return LedgerError(f"ledger {path!r} cannot be opened ({text})")
    return LedgerError(f"ledger {path!r} failed while trying to {doing} ({text})")


class Ledger:
    """A budget ledger: an SQLite file, ``":memory:"`` (only when asked for explicitly), or
    a PostgreSQL URL (``postgresql+psycopg://user@host/db``, optional ``?schema=name``).

    Args:
        path: where the ledger is.
        create: whether a missing ledger may be created here (never over an existing
            file; a pinned ledger is opened with ``create=False``).
        readonly: open for reading only (``budget show``/``log``/``verify``); charges fail.
        expect_id: the ledger id the owner pinned; another id is a LedgerError.
        timeout: seconds to wait for the lock (default :data:`TIMEOUT_ENV` or 60).
        refusal_cap: refusals stored per (data set, analyst) before they are only counted.

    Raises:
        LedgerError: missing where it may not be created, empty, foreign, corrupted,
            tampered with, keyed with another key, or not readable.
    """

    def __init__(self, path: str | Path, *, create: bool = True, readonly: bool = False,
                 expect_id: str | None = None, timeout: float | None = None,
                 refusal_cap: int = REFUSAL_CAP):
        self._lock = threading.Lock()
        self._seen = -1  # the newest head (its seq) this connection has seen committed
        self._head: dict = {}
        self._head_dirty = False
        self.refusal_cap = refusal_cap
        timeout = _timeout() if timeout is None else timeout
        self._timeout = timeout
        text = str(path)
        if text.startswith(("postgresql://", "postgresql+", "postgres://")):
            self._s: Any = _Postgres(text, timeout, create, readonly)
        else:
            self._s = _SQLite(text, timeout, create, readonly)
        self.path = self._s.path
        self._p = self._s.prefix
        try:
            self._open(expect_id)
        except BaseException:
            self._s.close()
            raise

    # -- opening ------------------------------------------------------------------------

    @property
    def _db(self):
        """The SQLite connection (tests and tools); None for PostgreSQL."""
        return getattr(self._s, "db", None) if self._s.kind == "sqlite" else None

    def _open(self, expect_id: str | None) -> None:
        errors = self._s.errors()
        try:
            if self._s.kind == "sqlite":
                check = self._s.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise LedgerError(f"ledger {self.path!r} is corrupted ({check})")
                if self._s.memory:
                    _Schema(self._s).create(self._s.db)
                    _init_meta(self._s.db, "?", "", secrets.token_hex(16), _owner_key())
                else:
                    tables = {r[0] for r in self._s.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table'")}
                    if "meta" not in tables:
                        raise LedgerError(f"{self.path!r} is an SQLite file but not a dpsql "
                                          "ledger; refusing to start a fresh budget over it")
            meta = dict(self._s.execute(f"SELECT key, value FROM {self._p}meta").fetchall())
            if meta.get("format") != FORMAT:
                raise LedgerError(f"{self.path!r} is not a dpsql ledger")
            if meta.get("version") != VERSION:
                raise LedgerError(
                    f"ledger {self.path!r} has format version {meta.get('version')}; this "
                    f"dpsql reads version {VERSION} (dpsql budget migrate converts a "
                    "version-1 ledger into a new file; a version-2 ledger has no head "
                    "record and is read by the dpsql that wrote it)")
            self.id = meta["id"]
            if expect_id is not None and expect_id != self.id:
                raise LedgerError(
                    f"ledger {self.path!r} has id {self.id}, not the pinned {expect_id}: the "
                    "file was replaced; refusing to charge a ledger that is not the owner's")
            key = _owner_key()
            self.keyed = meta.get("keyed") == "1"
            if self.keyed and key is None:
                raise LedgerError(f"ledger {self.path!r} is keyed: set {KEY_ENV} to the "
                                  "owner's key")
            if not self.keyed and key is not None:
                raise LedgerError(f"ledger {self.path!r} was made without a key, but "
                                  f"{KEY_ENV} is set: refusing an unkeyed ledger where a "
                                  "keyed one is expected (was it replaced?)")
            self._mac = _Mac(self.id, key)
            if not hmac.compare_digest(meta.get("key_check", ""), self._mac("key-check")):
                raise LedgerError(f"ledger {self.path!r} was made with another key than "
                                  f"{KEY_ENV}, or its id was changed")
            self._verify_since_checkpoint()
        except errors as exc:
            raise _ledger_error(exc, self.path, "open", self._timeout) from None

    def _checkpoint(self) -> tuple[int, str, dict]:
        raw = self._s.execute(f"SELECT value FROM {self._p}meta WHERE key = 'checkpoint'"
                              ).fetchone()
        try:
            doc = json.loads(raw[0])
            last_id, last_hash, rows = int(doc["id"]), str(doc["hash"]), doc["totals"]
            ok = hmac.compare_digest(str(doc["mac"]),
                                     self._mac("checkpoint", last_id, last_hash, rows))
            totals = {(r[0], r[1]): tuple(r[2:]) for r in rows}
        except (TypeError, ValueError, KeyError, IndexError):
            ok = False
        if not ok:
            raise LedgerError(f"ledger {self.path!r}: its checkpoint was altered")
        return last_id, last_hash, totals

    def _verify_since_checkpoint(self) -> None:
        """Checks the entries after the checkpoint and the running totals; moves the
        checkpoint forward (unless read-only). Raises LedgerError on any mismatch."""
        write = not self._s.readonly
        (self._s.begin_write if write else self._s.begin_read)()
        try:
            self._load_head()
            last_id, last_hash, totals = self._checkpoint()
            if last_id:
                # the checkpointed entry itself is re-hashed: the chain's newest verified link
                row = self._s.execute(f"SELECT {_ENTRY_COLUMNS} FROM {self._p}entries "
                                      "WHERE id = ?", (last_id,)).fetchone()
                if row is None or row[-1] != last_hash:
                    raise LedgerError(f"ledger {self.path!r}: the checkpointed entry "
                                      f"{last_id} was altered or removed")
                self._check_entry(row, row[-2])
            new_id, new_hash, totals, count = self._replay(last_id, last_hash, totals)
            if (new_id, new_hash) != (self._head["id"], self._head["hash"]):
                raise LedgerError(f"ledger {self.path!r}: its entries end at {new_id}, not "
                                  f"where its head record says ({self._head['id']}): "
                                  "entries were removed or rewound")
            self._compare_totals(totals)
            self._check_small_tables()
            self._cp_id = last_id
            if write and count:
                self._s.execute(f"UPDATE {self._p}meta SET value = ? WHERE key = 'checkpoint'",
                                (_checkpoint_doc(self._mac, new_id, new_hash, totals),))
                self._cp_id = new_id
            self._s.execute("COMMIT")
            self._seen = self._head["seq"]
        except BaseException:
            if self._s.in_transaction():
                self._s.execute("ROLLBACK")
            raise

    def _advance_checkpoint(self, db) -> None:
        """Verifies the entries after the checkpoint against the running totals and
        moves the checkpoint to the newest entry (inside the caller's transaction)."""
        last_id, last_hash, totals = self._checkpoint()
        new_id, new_hash, totals, _ = self._replay(last_id, last_hash, totals)
        self._compare_totals(totals)
        db.execute(f"UPDATE {self._p}meta SET value = ? WHERE key = 'checkpoint'",
                   (_checkpoint_doc(self._mac, new_id, new_hash, totals),))
        self._cp_id = new_id

    def _check_entry(self, row: tuple, prev: str) -> None:
        """One entry: its cost, its link to ``prev``, its hash (over the stored text's
        hash too), its stored text against its full-text hash when all of it is kept,
        and its outcome's MAC."""
        (eid, t, ds, an, kind, e, d, r, rd, sql, sql_hash, length, outcome, detail, omac, p,
         h) = row
        parts = (e, d, r, rd)
        if not all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in parts):
            raise LedgerError(f"ledger {self.path!r}: entry {eid} has a cost that is not "
                              "a finite non-negative number (corrupted or altered)")
        if not isinstance(sql, str) or not isinstance(length, int):
            raise LedgerError(f"ledger {self.path!r}: entry {eid} was altered")
        if p != prev or not hmac.compare_digest(
                str(h), self._mac("entry", eid, t, ds, an, kind, *parts, sql_hash, length,
                                  _sha(sql), p)):
            raise LedgerError(f"ledger {self.path!r}: entry {eid} breaks the hash chain "
                              "(corrupted or altered)")
        # text is only ever lengthened when made storable, so a stored text as long as
        # the query is the query itself: it must have the query's hash
        if len(sql) == length and _sha(sql) != sql_hash:
            raise LedgerError(f"ledger {self.path!r}: the text of entry {eid} does not match "
                              "its hash (altered)")
        if kind not in _OUTCOMES:
            raise LedgerError(f"ledger {self.path!r}: entry {eid} has unknown kind")
        if outcome not in _OUTCOMES[kind] or not hmac.compare_digest(
                str(omac), self._mac("outcome", eid, h, outcome, detail)):
            raise LedgerError(f"ledger {self.path!r}: the outcome of entry {eid} was altered")

    def _replay(self, after: int, prev: str, totals: dict) -> tuple[int, str, dict, int]:
        """Verifies the chain after entry ``after`` and adds its charges to ``totals``
        (in id order, the order the running totals were summed in)."""
        totals = dict(totals)
        last_id, count = after, 0
        cur = self._s.execute(f"SELECT {_ENTRY_COLUMNS} FROM {self._p}entries WHERE id > ? "
                              "ORDER BY id", (after,))
        for row in cur:
            self._check_entry(row, prev)
            eid, ds, an, kind, h = row[0], row[2], row[3], row[4], row[-1]
            if kind == "charge":
                e, d, r, rd = row[5:9]
                for key in ((ds, an), (ds, ALL)):
                    old = totals.get(key, (0.0, 0.0, 0.0, 0.0, 0))
                    totals[key] = (old[0] + e, old[1] + d, old[2] + r, old[3] + rd, old[4] + 1)
            prev, last_id, count = h, eid, count + 1
        return last_id, prev, totals, count

    def _compare_totals(self, totals: dict) -> None:
        rows = self._s.execute(
            "SELECT dataset, analyst, epsilon, delta, rho, rho_delta, n, mac FROM "
            f"{self._p}totals").fetchall()
        stored = {}
        for ds, an, *vals, mac in rows:
            self._check_totals_row(ds, an, tuple(vals), mac)
            stored[(ds, an)] = tuple(vals)
        want = {k: v for k, v in totals.items() if v[4]}
        if stored != want:
            bad = sorted(set(stored) ^ set(want) | {k for k in stored if stored[k] !=
                                                    want.get(k)})
            raise LedgerError(f"ledger {self.path!r}: the running totals of {bad[:3]} do not "
                              "match its entries (corrupted or altered)")

    def _check_totals_row(self, ds: str, an: str, vals: tuple, mac: str) -> None:
        if not all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in vals[:4]) \
                or not isinstance(vals[4], int) or vals[4] < 0:
            raise LedgerError(f"ledger {self.path!r}: the running total of {ds!r}/{an!r} is "
                              "not a finite non-negative number (corrupted or altered)")
        if not hmac.compare_digest(mac, self._mac("totals", ds, an, *vals)):
            raise LedgerError(f"ledger {self.path!r}: the running total of {ds!r}/{an!r} was "
                              "altered")

    def _check_small_tables(self) -> None:
        """Every row of budgets, totals, bindings and refusal counts: its MAC, and the
        whole set against the head record (no row removed, added or rolled back)."""
        found: dict = {}
        for row in self._s.execute(
                "SELECT dataset, analyst, epsilon, delta, accountant, source, mac FROM "
                f"{self._p}budgets").fetchall():
            self._check_budget_row(row, head=False)
            found[_hk("b", row[0], row[1])] = _tag(row[-1])
        for ds, an, *vals, mac in self._s.execute(
                "SELECT dataset, analyst, epsilon, delta, rho, rho_delta, n, mac FROM "
                f"{self._p}totals").fetchall():
            self._check_totals_row(ds, an, tuple(vals), mac)
            found[_hk("t", ds, an)] = _tag(mac)
        for ds, db, _, mac in self._s.execute(
                f"SELECT dataset, db, updated, mac FROM {self._p}bindings").fetchall():
            self._check_binding_row(ds, db, mac, head=False)
            found[_hk("g", ds)] = _tag(mac)
        for ds, an, stored, dropped in self._s.execute(
                f"SELECT dataset, analyst, stored, dropped FROM {self._p}refusal_counts"
        ).fetchall():
            found[_hk("r", ds, an)] = [stored, dropped]
        want = self._head["rows"]
        if found != want:
            bad = sorted(k for k in set(found) | set(want) if found.get(k) != want.get(k))
            raise LedgerError(
                f"ledger {self.path!r}: its budgets, running totals, bindings or refusal "
                f"counts do not match its head record ({', '.join(bad[:3])}): rows were "
                "removed, added or rolled back")

    def _check_binding_row(self, ds: str, db: str, mac: str, head: bool = True) -> None:
        if not isinstance(mac, str) or not hmac.compare_digest(
                mac, self._mac("binding", ds, db)):
            raise LedgerError(f"ledger {self.path!r}: the database of data set {ds!r} "
                              "was altered")
        if head:
            self._match_head(_hk("g", ds), _tag(mac), f"the binding of {ds!r}")

    # -- the head record ----------------------------------------------------------------

    def _load_head(self) -> None:
        """Reads and checks the head record (inside the caller's transaction): its MAC,
        that it is not older than one this connection saw, and that the newest entry is
        the one it names. One row and one index lookup."""
        raw = self._s.execute(f"SELECT value FROM {self._p}meta WHERE key = 'head'"
                              ).fetchone()
        try:
            doc = json.loads(raw[0])
            seq, last_id, last_hash = int(doc["seq"]), int(doc["id"]), str(doc["hash"])
            items = doc["rows"]
            ok = hmac.compare_digest(str(doc["mac"]),
                                     self._mac("head", seq, last_id, last_hash, items))
            rows = {str(k): v for k, v in items}
        except (TypeError, ValueError, KeyError, IndexError):
            ok = False
        if not ok:
            raise LedgerError(f"ledger {self.path!r}: its head record is missing or was "
                              "altered")
        if seq < self._seen:
            raise LedgerError(f"ledger {self.path!r} was rewound to an older state while this "
                              "connection had it open; refusing to charge")
        tail = self._s.execute(f"SELECT id, hash FROM {self._p}entries ORDER BY id DESC "
                               "LIMIT 1").fetchone()
        actual = (0, self._mac("genesis")) if tail is None else tuple(tail)
        if actual != (last_id, last_hash):
            raise LedgerError(f"ledger {self.path!r}: its newest entry does not match its head "
                              "record: entries were removed, rewound or added")
        self._head = {"seq": seq, "id": last_id, "hash": last_hash, "rows": rows}
        self._head_dirty = False

    def _match_head(self, key: str, value: Any, what: str) -> None:
        if self._head["rows"].get(key) != value:
            raise LedgerError(f"ledger {self.path!r}: {what} does not match the ledger's head "
                              "record (removed, rolled back or altered)")

    def _head_set(self, key: str, value: Any) -> None:
        self._head["rows"][key] = value
        self._head_dirty = True

    def _write_head(self, db) -> None:
        h = self._head
        h["seq"] += 1
        db.execute(f"UPDATE {self._p}meta SET value = ? WHERE key = 'head'",
                   (_head_doc(self._mac, h["seq"], h["id"], h["hash"], h["rows"]),))

    def _check_budget_row(self, row, head: bool = True) -> tuple[float, float]:
        ds, an, e, d, acc, src, mac = row
        if not (isinstance(e, float) and math.isfinite(e) and e > 0 and isinstance(d, float)
                and 0 <= d < 1) or acc not in ACCOUNTANTS:
            raise LedgerError(f"ledger {self.path!r}: the budget of {ds!r}/{an!r} is not a "
                              "valid (epsilon, delta) (corrupted or altered)")
        if not hmac.compare_digest(mac, self._mac("budget", ds, an, e, d, acc, src)):
            raise LedgerError(f"ledger {self.path!r}: the budget of {ds!r}/{an!r} was altered")
        if head:
            self._match_head(_hk("b", ds, an), _tag(mac), f"the budget of {ds!r}/{an!r}")
        return (e, d)

    # -- transactions -------------------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self, write: bool = True):
        """One transaction under the connection's lock; database errors as LedgerError.

        A KeyboardInterrupt can land between any two steps here (the analyst's Ctrl-C in
        the shell). A transaction left open would keep the ledger locked for every
        process: each exit path rolls back what is still open, and a transaction an
        interrupt left open anyway is rolled back before the next one begins. An
        uncommitted charge is lost only when no data was read for it.
        """
        s = self._s
        with self._lock:
            try:
                try:
                    if write:
                        if s.readonly:
                            raise LedgerError(f"ledger {self.path!r} was opened read-only")
                        s.begin_write()
                        s.same_file()
                        row = s.execute(f"SELECT value FROM {self._p}meta WHERE key = 'id'"
                                        ).fetchone()
                        if row is None or row[0] != self.id:
                            raise LedgerError(f"ledger {self.path!r} is no longer the ledger "
                                              "this connection opened; refusing to charge")
                    else:
                        s.begin_read()
                    self._load_head()
                    yield s
                    if self._head_dirty:
                        self._write_head(s)
                    s.execute("COMMIT")
                    self._seen = self._head["seq"]
                except s.errors() as exc:
                    raise _ledger_error(exc, self.path, "record", self._timeout) from None
            except BaseException:
                try:
                    if s.in_transaction():
                        s.execute("ROLLBACK")
                except s.errors():
                    pass
                raise

    # -- budgets ------------------------------------------------------------------------

    def _budget_row(self, db, dataset: str, analyst: str):
        row = db.execute(
            "SELECT dataset, analyst, epsilon, delta, accountant, source, mac FROM "
            f"{self._p}budgets WHERE dataset = ? AND analyst = ?", (dataset, analyst)
        ).fetchone()
        if row is None:
            self._match_head(_hk("b", dataset, analyst), None,
                             f"the budget of {dataset!r}/{analyst!r}")
            return None
        total = self._check_budget_row(row)
        return total, row[4]

    def _write_budget(self, db, dataset, analyst, total, accountant, source,
                      replace: bool) -> None:
        mac = self._mac("budget", dataset, analyst, total[0], total[1], accountant, source)
        if replace:
            db.execute(f"DELETE FROM {self._p}budgets WHERE dataset = ? AND analyst = ?",
                       (dataset, analyst))
        db.execute(f"INSERT INTO {self._p}budgets VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (dataset, analyst, total[0], total[1], accountant, source, _now(), mac))
        self._head_set(_hk("b", dataset, analyst), _tag(mac))

    def _charged(self, db, dataset: str) -> bool:
        return db.execute(f"SELECT 1 FROM {self._p}totals WHERE dataset = ? AND analyst = ?",
                          (dataset, ALL)).fetchone() is not None

    def ensure_budget(self, dataset: str, total: tuple[float, float],
                      analyst: str = ALL, source: str = "catalog",
                      accountant: str = "basic") -> None:
        """Records a budget unless one is already set (the owner's, or an earlier seed)."""
        total = check_budget(total)
        _check_accountant(accountant, total)
        if analyst != ALL:
            check_analyst(analyst)
        with self._tx() as db:
            if self._budget_row(db, dataset, analyst) is None:
                self._write_budget(db, dataset, analyst, total, accountant, source, False)

    def set_budget(self, dataset: str, total: tuple[float, float], analyst: str = ALL,
                   accountant: str | None = None) -> None:
        """Owner command: sets a total (data set when analyst is ``*``) outright.

        Args:
            accountant: ``"basic"`` or ``"zcdp"`` (data-set totals only); None keeps the
                data set's (``"basic"`` for a new one). It cannot change once the data
                set has a charge (the admission rule would change mid-sequence).
        """
        total = check_budget(total)
        check_dataset(dataset)
        if analyst != ALL:
            check_analyst(analyst, "--analyst")
        with self._tx() as db:
            old = self._budget_row(db, dataset, ALL)
            current = old[1] if old else "basic"
            if analyst != ALL:
                accountant = "basic"
            elif accountant is None:
                accountant = current
            elif accountant != current and self._charged(db, dataset):
                raise LedgerError(
                    f"data set {dataset!r} already has charges admitted by the {current!r} "
                    "accountant; its accountant cannot change (see dpsql.accounting)")
            _check_accountant(accountant, total if analyst == ALL else (1.0, 0.5))
            self._write_budget(db, dataset, analyst, total, accountant, "owner", True)

    def grant(self, dataset: str, extra: tuple[float, float], analyst: str = ALL) -> None:
        """Owner command: raises a total by ``extra``."""
        extra = _check_extra(extra)
        if analyst != ALL:
            check_analyst(analyst, "--analyst")
        with self._tx() as db:
            row = self._budget_row(db, dataset, analyst)
            if row is None:
                raise LedgerError(f"no budget set for data set {dataset!r}, analyst "
                                  f"{analyst!r}; use set first")
            total = check_budget((row[0][0] + extra[0], row[0][1] + extra[1]))
            self._write_budget(db, dataset, analyst, total, row[1], "owner", True)

    def budgets(self, dataset: str | None = None) -> list[tuple]:
        """(dataset, analyst, epsilon, delta, source) rows, sorted."""
        query = f"SELECT dataset, analyst, epsilon, delta, source FROM {self._p}budgets"
        args: tuple = ()
        if dataset is not None:
            query += " WHERE dataset = ?"
            args = (dataset,)
        with self._tx(write=False) as db:
            self._check_small_tables()
            return [tuple(r) for r in db.execute(query + " ORDER BY dataset, analyst", args)]

    def accountant(self, dataset: str) -> str:
        """The data set's accountant (``"basic"`` when it has no total yet)."""
        with self._tx(write=False) as db:
            row = self._budget_row(db, dataset, ALL)
        return row[1] if row else "basic"

    # -- data sets and databases --------------------------------------------------------

    def bind(self, dataset: str, identity: dict | None, rebind: bool = False) -> None:
        """Binds ``dataset`` to its database, or checks the binding (see the module doc).

        Args:
            identity: from :func:`database_identity`; None (an in-memory database) binds
                nothing.
            rebind: the owner's say-so that the data set now lives in this database.

        Raises:
            LedgerError: the data set belongs to another database.
        """
        if identity is None:
            return
        with self._tx() as db:
            row = db.execute(f"SELECT db, mac FROM {self._p}bindings WHERE dataset = ?",
                             (dataset,)).fetchone()
            if row is None:
                self._match_head(_hk("g", dataset), None, f"the binding of {dataset!r}")
            else:
                self._check_binding_row(dataset, row[0], row[1])
            if row is not None and not rebind:
                old = json.loads(row[0])
                if _same_database(old, identity):
                    if old == identity:
                        return
                    _log.warning("ledger %s: data set %s: database %s is now %s (same %s)",
                                 escape(self.path), escape(dataset),
                                 escape(json.dumps(old)), escape(json.dumps(identity)),
                                 "path" if old.get("path") == identity.get("path") else "file")
                else:
                    raise LedgerError(
                        f"data set {dataset!r} in ledger {self.path!r} belongs to database "
                        f"{_shown_identity(old)!r}, not {_shown_identity(identity)!r}: two "
                        "databases never share a budget by accident; give this database its "
                        "own data set ('dataset:' in its catalog) or its own ledger, or, if "
                        "the database moved, the owner runs dpsql budget rebind")
            text = json.dumps(identity, sort_keys=True)
            db.execute(f"DELETE FROM {self._p}bindings WHERE dataset = ?", (dataset,))
            mac = self._mac("binding", dataset, text)
            db.execute(f"INSERT INTO {self._p}bindings VALUES (?, ?, ?, ?)",
                       (dataset, text, _now(), mac))
            self._head_set(_hk("g", dataset), _tag(mac))

    def bindings(self) -> dict[str, dict]:
        with self._tx(write=False) as db:
            self._check_small_tables()
            return {ds: json.loads(text) for ds, text in
                    db.execute(f"SELECT dataset, db FROM {self._p}bindings").fetchall()}

    # -- charging -----------------------------------------------------------------------

    def _totals_row(self, db, dataset: str, analyst: str) -> tuple | None:
        row = db.execute(
            "SELECT epsilon, delta, rho, rho_delta, n, mac FROM "
            f"{self._p}totals WHERE dataset = ? AND analyst = ?", (dataset, analyst)
        ).fetchone()
        key = _hk("t", dataset, analyst)
        if row is None:
            self._match_head(key, None, f"the running total of {dataset!r}/{analyst!r}")
            return None
        self._check_totals_row(dataset, analyst, tuple(row[:5]), row[5])
        self._match_head(key, _tag(row[5]), f"the running total of {dataset!r}/{analyst!r}")
        return tuple(row[:5])

    def _spent(self, db, dataset: str, analyst: str) -> Spent:
        row = self._totals_row(db, dataset, analyst)
        return NOTHING if row is None else Spent((row[0], row[1]), row[2], row[3])

    def _add(self, db, dataset: str, analyst: str, parts: tuple) -> None:
        old = self._totals_row(db, dataset, analyst)
        if old is None:
            new = (*(0.0 + x for x in parts), 1)
            mac = self._mac("totals", dataset, analyst, *new)
            db.execute(f"INSERT INTO {self._p}totals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (dataset, analyst, *new, mac))
        else:
            new = (old[0] + parts[0], old[1] + parts[1], old[2] + parts[2],
                   old[3] + parts[3], old[4] + 1)
            mac = self._mac("totals", dataset, analyst, *new)
            db.execute(f"UPDATE {self._p}totals SET epsilon = ?, delta = ?, rho = ?, "
                       "rho_delta = ?, n = ?, mac = ? WHERE dataset = ? AND analyst = ?",
                       (*new, mac, dataset, analyst))
        self._head_set(_hk("t", dataset, analyst), _tag(mac))

    def _append(self, db, dataset: str, analyst: str, kind: str, parts: tuple, sql: str,
                keep: int, outcome: str, detail: str | None) -> int:
        # the newest entry was checked against the head when the transaction began
        last_id, prev = self._head["id"], self._head["hash"]
        eid, t = last_id + 1, _now()
        sql = sql if isinstance(sql, str) else repr(sql)
        sql_hash = _sha(sql)
        stored = _storable(sql[:keep])
        detail = None if detail is None else _storable(detail[:1000])
        h = self._mac("entry", eid, t, dataset, analyst, kind, *parts, sql_hash, len(sql),
                      _sha(stored), prev)
        db.execute(f"INSERT INTO {self._p}entries ({_ENTRY_COLUMNS}) VALUES "
                   "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (eid, t, dataset, analyst, kind, *parts, stored, sql_hash, len(sql),
                    outcome, detail, self._mac("outcome", eid, h, outcome, detail), prev, h))
        self._head["id"], self._head["hash"] = eid, h
        self._head_dirty = True
        return eid

    def charge(self, dataset: str, analyst: str, cost: Cost, sql: str,
               cap: tuple[tuple[float, float], list[Cost]] | None = None) -> int:
        """Checks and records ``cost`` atomically; returns the charge's id.

        The time this takes does not depend on how many charges came before: it reads
        the budgets and the running totals (a few rows), appends one entry and updates
        two totals, all in one transaction.

        Args:
            cap: an extra (total, charges so far) limit, e.g. a connection's own budget.

        Raises:
            BudgetExhaustedError: the cost does not fit (nothing charged; the refusal
                is logged).
            LedgerError: the ledger cannot record it (nothing charged, no data read).
        """
        parts = _check_cost(cost)
        refusal = None
        with self._tx() as db:
            reason = None
            base = self._budget_row(db, dataset, ALL)
            if base is None:
                reason = f"no budget is set for data set {dataset!r}"
            else:
                (dataset_total, accountant) = base
                checks = [("data set", dataset_total, self._spent(db, dataset, ALL))]
                own = self._budget_row(db, dataset, analyst)
                if own is not None:
                    checks.append((f"analyst {analyst!r}", own[0],
                                   self._spent(db, dataset, analyst)))
                if cap is not None:
                    checks.append(("connection", cap[0], _sum(cap[1])))
                for name, total, so_far in checks:
                    acc = Accounting(total, accountant)
                    if not acc.fits(so_far.plus(cost)):
                        left = acc.remaining(so_far)
                        reason = (
                            f"query needs epsilon={cost.epsilon:g}, delta={cost.delta:g} "
                            f"but the {name} budget has only epsilon={left[0]:g}, "
                            f"delta={left[1]:g} left (total epsilon={total[0]:g}, "
                            f"delta={total[1]:g}, {accountant} composition)"
                        )
                        break
            if reason is not None:
                self._store_refusal(db, dataset, analyst, sql,
                                    "BudgetExhaustedError: " + reason)
                refusal = BudgetExhaustedError(reason)
            else:
                eid = self._append(db, dataset, analyst, "charge", parts, sql,
                                   CHARGED_SQL_KEPT, "charged", None)
                self._add(db, dataset, analyst, parts)
                self._add(db, dataset, ALL, parts)
                if eid - self._cp_id >= CHECKPOINT_EVERY:
                    self._advance_checkpoint(db)
        if refusal is not None:
            raise refusal
        if cap is not None:
            cap[1].append(cost)
        return eid

    def _store_refusal(self, db, dataset: str, analyst: str, sql: Any, detail: str) -> None:
        row = db.execute(f"SELECT stored, dropped FROM {self._p}refusal_counts WHERE "
                         "dataset = ? AND analyst = ?", (dataset, analyst)).fetchone()
        key = _hk("r", dataset, analyst)
        self._match_head(key, None if row is None else list(row),
                         f"the refusal count of {dataset!r}/{analyst!r}")
        stored, dropped = row if row else (0, 0)
        if stored < self.refusal_cap:
            self._append(db, dataset, analyst, "refusal", (0.0, 0.0, 0.0, 0.0),
                         sql if isinstance(sql, str) else repr(sql), SQL_KEPT, "refused",
                         detail)
            stored += 1
        else:
            dropped += 1
        db.execute(f"DELETE FROM {self._p}refusal_counts WHERE dataset = ? AND analyst = ?",
                   (dataset, analyst))
        db.execute(f"INSERT INTO {self._p}refusal_counts VALUES (?, ?, ?, ?)",
                   (dataset, analyst, stored, dropped))
        self._head_set(key, [stored, dropped])

    def finish(self, charge_id: int, outcome: str, detail: str | None = None,
               also=None) -> None:
        """Marks a charged query ``answered``, ``failed`` or ``cancelled`` (Ctrl-C).

        The charge itself stays whatever happens here: when the outcome cannot be written
        (a full disk, a lock held too long) the failure goes to the owner's log and the
        caller goes on.

        Args:
            also: ``also(db, prefix, mac)`` writes in the same transaction (the answer
                cache stores the released answer with its outcome); its database errors
                are the outcome's.
        """
        assert outcome in ("answered", "failed", "cancelled")
        try:
            with self._tx() as db:
                if also is not None:
                    also(db, self._p, self._mac)
                row = db.execute(f"SELECT hash, kind FROM {self._p}entries WHERE id = ?",
                                 (charge_id,)).fetchone()
                if row is None or row[1] != "charge":
                    raise LedgerError(f"ledger {self.path!r}: charge {charge_id} is missing")
                detail = None if detail is None else _storable(detail[:1000])
                db.execute(f"UPDATE {self._p}entries SET outcome = ?, detail = ?, omac = ? "
                           "WHERE id = ?", (outcome, detail,
                                            self._mac("outcome", charge_id, row[0], outcome,
                                                      detail), charge_id))
        except LedgerError as exc:
            _log.error("ledger %s: charge %d is kept, but its outcome %r could not be "
                       "recorded: %s", escape(self.path), charge_id, outcome, escape(str(exc)))

    @contextlib.contextmanager
    def side_table(self, write: bool = False):
        """One transaction, under this ledger's checks and locks, for a module that keeps
        its own table in the ledger (:mod:`dpsql.answer_cache`); yields ``(db, prefix,
        mac)``. Its database errors are :class:`~dpsql.errors.LedgerError`."""
        with self._tx(write) as db:
            yield db, self._p, self._mac

    @property
    def kind(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._s.kind

    @property
    def readonly(self) -> bool:
        return self._s.readonly

    def refuse(self, dataset: str, analyst: str, sql: str, detail: str) -> None:
        """Logs a query refused before any data was read (it costs nothing).

        Never raises for the ledger's own trouble: the query is refused either way, and
        a failure to log it goes to the owner's log.
        """
        try:
            with self._tx() as db:
                self._store_refusal(db, dataset, analyst, sql, detail)
        except LedgerError as exc:
            _log.error("ledger %s: a refusal could not be logged: %s", escape(self.path),
                       escape(str(exc)))

    # -- reading ------------------------------------------------------------------------

    def spent(self, dataset: str, analyst: str | None = None) -> Spent:
        with self._tx(write=False) as db:
            return self._spent(db, dataset, ALL if analyst is None else analyst)

    def view(self, dataset: str, analyst: str, cap=None) -> BudgetView:
        return BudgetView(self, dataset, analyst, cap)

    def spenders(self) -> list[tuple[str, str]]:
        """(dataset, analyst) of everyone who was charged, sorted."""
        with self._tx(write=False) as db:
            self._check_small_tables()
            return sorted(tuple(r) for r in db.execute(
                f"SELECT dataset, analyst FROM {self._p}totals WHERE analyst <> ?", (ALL,)))

    def refusal_counts(self, dataset: str | None = None) -> list[tuple[str, str, int, int]]:
        """(dataset, analyst, stored, only counted) per analyst with refusals."""
        where, args = ("WHERE dataset = ?", (dataset,)) if dataset else ("", ())
        with self._tx(write=False) as db:
            self._check_small_tables()
            return [tuple(r) for r in db.execute(
                f"SELECT dataset, analyst, stored, dropped FROM {self._p}refusal_counts "
                f"{where} ORDER BY dataset, analyst", args)]

    def log(self, dataset: str | None = None, limit: int = 100) -> list[dict]:
        """The audit log, newest first by insertion (never by wall-clock time)."""
        where, args = ("WHERE dataset = ?", (dataset,)) if dataset else ("", ())
        keys = ("id", "time", "dataset", "analyst", "sql", "sql_hash", "sql_length",
                "epsilon", "delta", "outcome", "detail")
        with self._tx(write=False) as db:
            rows = db.execute(f"SELECT {', '.join(keys)} FROM {self._p}entries {where} "
                              "ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def verify(self) -> dict:
        """Checks the whole chain, the checkpoint and the running totals (O(history)).

        Returns:
            {"entries": n, "charges": m, "id": ledger id, "keyed": bool}.

        Raises:
            LedgerError: anything does not match.
        """
        with self._tx(write=False) as db:
            last_id, last_hash, cp_totals = self._checkpoint()
            end_id, end_hash, totals, count = self._replay(0, self._mac("genesis"), {})
            if (end_id, end_hash) != (self._head["id"], self._head["hash"]):
                raise LedgerError(f"ledger {self.path!r}: its entries end at {end_id}, not "
                                  "where its head record says: entries were removed")
            if last_id:
                _, at_cp, totals_cp, _ = self._replay_until(last_id)
                if at_cp != last_hash or {k: v for k, v in totals_cp.items() if v[4]} != \
                        {k: tuple(v) for k, v in cp_totals.items() if v[4]}:
                    raise LedgerError(f"ledger {self.path!r}: the checkpoint does not match "
                                      "the chain (altered)")
            self._compare_totals(totals)
            self._check_small_tables()
            charges = db.execute(f"SELECT count(*) FROM {self._p}entries WHERE "
                                 "kind = 'charge'").fetchone()[0]
        return {"entries": count, "charges": charges, "id": self.id, "keyed": self.keyed}

    def _replay_until(self, last: int) -> tuple[int, str, dict, int]:
        totals: dict = {}
        prev = self._mac("genesis")
        for (_eid, ds, an, kind, e, d, r, rd, h) in self._s.execute(
                "SELECT id, dataset, analyst, kind, epsilon, delta, rho, rho_delta, hash "
                f"FROM {self._p}entries WHERE id <= ? ORDER BY id", (last,)):
            if kind == "charge":
                for key in ((ds, an), (ds, ALL)):
                    old = totals.get(key, (0.0, 0.0, 0.0, 0.0, 0))
                    totals[key] = (old[0] + e, old[1] + d, old[2] + r, old[3] + rd, old[4] + 1)
            prev = h
        return last, prev, totals, 0

    def close(self) -> None:
        with self._lock:
            self._s.close()


def migrate_v1(source: str | Path, target: str | Path) -> int:
    """Copies a version-1 ledger's budgets and charges, in order, into a new ledger.

    Returns:
        The number of charges copied.

    Raises:
        LedgerError: ``source`` is not a version-1 ledger, ``target`` exists, or a
            recorded cost is not a finite non-negative number.
    """
    if Path(target).exists():
        raise LedgerError(f"{str(target)!r} exists; migrate writes a new ledger")
    try:
        con = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
        meta = dict(con.execute("SELECT key, value FROM meta"))
        if meta.get("format") != FORMAT or meta.get("version") != "1":
            raise LedgerError(f"{str(source)!r} is not a version-1 dpsql ledger")
        budgets = con.execute("SELECT dataset, analyst, epsilon, delta, source FROM budgets "
                              "ORDER BY dataset, analyst").fetchall()
        charges = con.execute("SELECT dataset, analyst, epsilon, delta, rho, rho_delta, sql, "
                              "outcome, detail FROM charges ORDER BY id").fetchall()
        con.close()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read {str(source)!r} as a version-1 ledger: {exc}") \
            from None
    led = Ledger(target, create=True)
    with led._tx() as db:
        for ds, an, e, d, src in budgets:
            led._write_budget(db, ds, an, check_budget((e, d)), "basic", src, True)
        for ds, an, e, d, r, rd, sql, outcome, detail in charges:
            parts = _check_cost(Cost(e, d, r, rd))
            led._append(db, ds, an, "charge", parts, sql, CHARGED_SQL_KEPT, outcome, detail)
            led._add(db, ds, an, parts)
            led._add(db, ds, ALL, parts)
    led.close()
    return len(charges)


def _sum(costs: list[Cost]) -> Spent:
    s = NOTHING
    for c in costs:
        s = s.plus(c)
    return s


def _check_accountant(accountant: str, total: tuple[float, float]) -> None:
    if accountant not in ACCOUNTANTS:
        raise PrivacyParameterError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, "
                                    f"got {accountant!r}")
    if accountant == "zcdp" and not total[1] > 0:
        raise PrivacyParameterError("the zcdp accountant needs a total delta > 0 (it converts "
                                    "rho to (epsilon, delta) with some delta)")


def _same_database(old: dict, new: dict) -> bool:
    if old.get("kind") != new.get("kind"):
        return False
    if old["kind"] == "server":
        return old.get("url") == new.get("url")
    # the same file (a hard link or a moved file), or the owner's file rebuilt in place
    return (old.get("dev"), old.get("ino")) == (new.get("dev"), new.get("ino")) \
        or old.get("path") == new.get("path")


class BudgetView:
    """One analyst's budget on one data set: ``spent``, ``remaining``, ``total``.

    ``spent`` is by basic composition (Σε, Σδ); ``remaining`` is the least of what the
    data set's total, the analyst's own total and the connection's cap leave under the
    data set's accountant; ``zcdp`` reports the zCDP view.
    """

    def __init__(self, ledger: Ledger, dataset: str, analyst: str, cap=None):
        self.ledger, self.dataset, self.analyst = ledger, dataset, analyst
        self._cap = cap  # (total, list of this connection's costs) or None

    def _limits(self) -> tuple[str, list[tuple[tuple[float, float], Spent]]]:
        out = []
        led = self.ledger
        with led._tx(write=False) as db:
            base = led._budget_row(db, self.dataset, ALL)
            accountant = base[1] if base else "basic"
            if base is not None:
                out.append((base[0], led._spent(db, self.dataset, ALL)))
            own = led._budget_row(db, self.dataset, self.analyst) \
                if self.analyst != ALL else None
            if own is not None:
                out.append((own[0], led._spent(db, self.dataset, self.analyst)))
        if self._cap is not None:
            out.append((self._cap[0], _sum(self._cap[1])))
        return accountant, out

    def refusal(self, cost: Cost) -> str | None:
        """Why ``cost`` would not fit now (None if it would): a read, for refusing a
        query early and cheaply; :meth:`Ledger.charge` decides, atomically."""
        accountant, limits = self._limits()
        names = self._limit_names()
        for name, (total, so_far) in zip(names, limits, strict=False):
            acc = Accounting(total, accountant)
            if not acc.fits(so_far.plus(cost)):
                left = acc.remaining(so_far)
                return (f"query needs epsilon={cost.epsilon:g}, delta={cost.delta:g} "
                        f"but the {name} budget has only epsilon={left[0]:g}, "
                        f"delta={left[1]:g} left (total epsilon={total[0]:g}, "
                        f"delta={total[1]:g}, {accountant} composition)")
        return None

    def _limit_names(self) -> list[str]:
        """The names of :meth:`_limits`' entries, in its order (as the charge says them)."""
        led = self.ledger
        names = []
        with led._tx(write=False) as db:
            if led._budget_row(db, self.dataset, ALL) is not None:
                names.append("data set")
            if self.analyst != ALL and led._budget_row(db, self.dataset,
                                                       self.analyst) is not None:
                names.append(f"analyst {self.analyst!r}")
        if self._cap is not None:
            names.append("connection")
        return names

    @property
    def total(self) -> tuple[float, float]:
        _, limits = self._limits()
        return (min(t[0] for t, _ in limits), min(t[1] for t, _ in limits))

    @property
    def spent(self) -> tuple[float, float]:
        """What this analyst has spent on the data set (all connections, all time)."""
        return self.ledger.spent(self.dataset, self.analyst).basic

    @property
    def remaining(self) -> tuple[float, float]:
        accountant, limits = self._limits()
        left = [Accounting(t, accountant).remaining(s) for t, s in limits]
        return (min(x[0] for x in left), min(x[1] for x in left))

    @property
    def accountant(self) -> str:
        return self._limits()[0]

    @property
    def zcdp(self) -> dict:
        """The analyst's spend as zCDP: ρ, the δ it does not cover, and ε at the total δ."""
        s = self.ledger.spent(self.dataset, self.analyst)
        return {"rho": s.rho, "delta": s.rho_delta,
                "epsilon": s.zcdp_epsilon(self.total[1])}

    def __repr__(self) -> str:
        (se, sd), (re_, rd) = self.spent, self.remaining
        return (f"Budget(dataset={self.dataset!r}, analyst={self.analyst!r}, "
                f"spent=({se:g}, {sd:g}), remaining=({re_:g}, {rd:g}))")


# -- pins: the owner, not the connection, chooses database, ledger and analyst ----------


@dataclass(frozen=True)
class Pins:
    """What a connection was pinned to, and by whom.

    Attributes:
        ledger: the pinned ledger (absolute path or PostgreSQL URL), or None.
        analyst: the pinned analyst name, or None.
        database: the pinned database (absolute path or URL), or None.
        ledger_id: the pinned ledger's id, or None.
        ledger_source, analyst_source, database_source: where each pin came from.
    """

    ledger: str | None = None
    analyst: str | None = None
    ledger_source: str = ""
    analyst_source: str = ""
    database: str | None = None
    database_source: str = ""
    ledger_id: str | None = None


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None  # set but empty: not pinned, as shells treat it


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and "://" in value


def _env_path(name: str, urls: bool = False) -> str:
    value = _env(name)
    if urls and _is_url(value):
        if normalise_url(value) is None:
            raise LedgerError(f"{name} is not a URL dpsql reads: {value!r}")
        return value
    if value == ":memory:" or not Path(value).is_absolute():
        # fail closed: a misconfigured pin must not silently become no pin
        raise LedgerError(f"{name} must be an absolute file path"
                          f"{' or a URL' if urls else ''}, got {value!r}")
    return str(Path(value).resolve())


def _same_file(given: str | Path, pinned: str) -> bool:
    if str(given) == ":memory:":
        return False
    if _is_url(pinned) or _is_url(str(given)):
        return _is_url(pinned) and _is_url(str(given)) and \
            normalise_url(str(given)) == normalise_url(pinned)
    a, b = Path(given).resolve(), Path(pinned)
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)  # a hard link, or a case-insensitive file system
    except OSError:
        return False


def pinned_catalog(catalog: Any) -> Any:
    """The catalog a connection may use: the argument, unless the owner pinned one.

    With :data:`CATALOG_ENV` set, ``catalog`` must be None (use the pin) or a path to
    the pinned file; a dict or a :class:`~dpsql.catalog.Catalog` object is refused too,
    because a catalog states the bounds and privacy units that DP rests on.

    Raises:
        LedgerError: the argument names another catalog, or the pin is malformed.
    """
    if _env(CATALOG_ENV) is None:
        return catalog
    pin = _env_path(CATALOG_ENV)
    if catalog is None or (isinstance(catalog, str | Path) and _same_file(catalog, pin)):
        return pin
    shown = catalog if isinstance(catalog, str | Path) else type(catalog).__name__
    raise LedgerError(
        f"catalog={str(shown)!r} is refused: the data owner pinned the catalog "
        f"({CATALOG_ENV}); leave catalog unset")


def pins(catalog) -> Pins:
    """The pins in force for ``catalog``: environment first, then the catalog.

    Raises:
        LedgerError: a pin in the environment is malformed.
    """
    ledger = analyst = database = None
    ledger_source = analyst_source = database_source = ""
    if _env(LEDGER_ENV) is not None:
        ledger, ledger_source = _env_path(LEDGER_ENV, urls=True), LEDGER_ENV
    elif getattr(catalog, "ledger", None) is not None:
        ledger, ledger_source = catalog.ledger, "the catalog's 'ledger:'"
    if _env(ANALYST_ENV) is not None:
        analyst, analyst_source = _env(ANALYST_ENV), ANALYST_ENV
        check_analyst(analyst, ANALYST_ENV)
    elif getattr(catalog, "analyst", None) is not None:
        analyst, analyst_source = catalog.analyst, "the catalog's 'analyst:'"
    if _env(DATABASE_ENV) is not None:
        database, database_source = _env_path(DATABASE_ENV, urls=True), DATABASE_ENV
    elif getattr(catalog, "database", None) is not None:
        database, database_source = catalog.database, "the catalog's 'database:'"
    ledger_id = _env(LEDGER_ID_ENV) or getattr(catalog, "ledger_id", None)
    return Pins(ledger, analyst, ledger_source, analyst_source, database, database_source,
                ledger_id)


def apply_pins(pinned: Pins, ledger: Any, analyst: str | None) -> tuple[Any, str | None]:
    """The (ledger, analyst) a connection uses: the pins, or its own when unpinned.

    Under a pin, an argument naming the same ledger file (or the same analyst) is
    accepted; anything else, ``":memory:"`` included, is refused.

    Raises:
        LedgerError: ``ledger`` or ``analyst`` names something other than its pin.
    """
    if pinned.ledger is not None and ledger is not None:
        given = ledger.path if isinstance(ledger, Ledger) else ledger
        if not (isinstance(given, str | Path) and _same_file(given, pinned.ledger)):
            raise LedgerError(
                f"ledger={str(given)!r} is refused: the data owner pinned this "
                f"data set's ledger ({pinned.ledger_source}); leave ledger unset")
    if pinned.ledger is not None and not isinstance(ledger, Ledger):
        ledger = pinned.ledger
    if pinned.analyst is not None:
        if analyst and analyst != pinned.analyst:
            raise LedgerError(
                f"analyst={analyst!r} is refused: the data owner pinned the "
                f"analyst identity ({pinned.analyst_source}); leave analyst unset")
        analyst = pinned.analyst
    return ledger, analyst


def apply_database_pin(pinned: Pins, database: Any) -> Any:
    """The database a connection uses: the pin, or its own when unpinned.

    Under a pin, ``database`` must be None (use the pin), the same file (by device and
    inode: a symlink or hard link to it is the same) or the same server (normalised URL:
    backend, host, port, database name). Anything else, an open connection object
    included (its file cannot be checked), is refused before anything is opened.

    Raises:
        LedgerError: ``database`` names another database than the pin.
    """
    pin = pinned.database
    if pin is None:
        return database
    if database is None:
        return pin
    if isinstance(database, str | Path):
        given = str(database)
        if _is_url(pin) and _is_url(given) and normalise_url(given) == normalise_url(pin):
            return database
        from dpsql.backends import ledger_home

        a = ledger_home(given) if _is_url(given) else Path(given)
        b = ledger_home(pin) if _is_url(pin) else Path(pin)
        if a is not None and b is not None and str(given) != ":memory:":
            with contextlib.suppress(OSError):
                if os.path.samefile(a, b):
                    return database
    shown = database if isinstance(database, str | Path) else type(database).__name__
    raise LedgerError(
        f"database={str(shown)!r} is refused: the data owner pinned this data set's "
        f"database ({pinned.database_source}); leave it unset or name the same one")
