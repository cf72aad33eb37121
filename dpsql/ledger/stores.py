"""Where a ledger lives: the SQLite file or the PostgreSQL schema, with its locking.

Each store opens its database, makes a new ledger complete before anyone can see it,
begins read and write transactions (SQLite's ``BEGIN IMMEDIATE`` write lock; on
PostgreSQL a row lock on the ledger's id row that serialises every charger on every
host), checks that the file is still the one opened, and turns its database errors
into :class:`~dpsql.errors.LedgerError` messages that say what to do
(:func:`_ledger_error`). Nothing here knows budgets or the chain.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import time
from pathlib import Path

from dpsql.errors import LedgerError
from dpsql.ledger.schema import _init_meta, _Schema
from dpsql.ledger.settings import TIMEOUT_ENV, _owner_key


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

    def begin_write(self, lock: bool = True, wait: bool = True) -> None:
        """``BEGIN IMMEDIATE``: SQLite's write lock is the whole file's, whatever
        ``lock`` says; a transaction without the charge lock (an outcome) holds it only
        for its one short write and commit. Without ``wait``, a lock another process
        holds is an error at once (SQLITE_BUSY) instead of after the timeout."""
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        if wait:
            self.db.execute("BEGIN IMMEDIATE")
            return
        self.db.execute("PRAGMA busy_timeout = 0")
        try:
            self.db.execute("BEGIN IMMEDIATE")
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")

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

    def begin_write(self, lock: bool = True, wait: bool = True) -> None:
        """``BEGIN``; with ``lock``, the row lock on the id row that serialises every
        charge of this ledger, on every host (an outcome's write takes only the row
        locks of what it updates, so it never waits for a charger, nor a charger for it,
        whatever ``wait`` says)."""
        if self._tx:
            self.db.execute("ROLLBACK")
        self.db.execute("BEGIN")
        self._tx = True
        if lock:
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
