"""SQLite through SQLAlchemy: ``sqlite:///path/to/file.db``.

Least privilege: the file is opened read-only (``file:...?mode=ro`` URI, so the file
must exist and is never created or written), with ``PRAGMA query_only``, untrusted schema
objects (``trusted_schema = OFF``), no extension loading, and an authorizer that allows
reading and nothing else (no ATTACH, no writes, no DDL, no PRAGMA but the few metadata
ones dpsql reads). LIKE is made case-sensitive, as in DuckDB.

SQLite has no hash function, so dpsql registers ``dpsql_hash(seed, uid, keys...)`` — a
keyed BLAKE2b of the values — on its own connection for the L0 order; and no
GREATEST/LEAST, TRY or exact wide sums: see :mod:`dpsql.backends.dialects`. SQLite is
dynamically typed: column types are read from the declared types (``INTEGER`` →
BIGINT, ``REAL``/``DOUBLE`` → DOUBLE, ``TEXT`` → VARCHAR, ``DECIMAL(p,s)``, ``DATE``,
``TIMESTAMP``, ``BOOLEAN``); dates must be stored as ISO-8601 text.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import struct
import urllib.parse
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool
from sqlglot import exp

from dpsql.backends import dialects
from dpsql.backends._sqlalchemy import SQLAlchemyBackend
from dpsql.errors import BackendError

#: PRAGMAs dpsql reads once its connection is set up (metadata, and SQLAlchemy's
#: isolation-level probe); none of them may be given a value.
_ALLOWED_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                    "read_uncommitted"}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}


def _authorizer(action, arg1, arg2, dbname, source):
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _DENIED_FUNCTIONS \
            else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _ALLOWED_PRAGMAS and (
            arg2 is None or (arg1 or "").lower() != "read_uncommitted"):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_TRANSACTION:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def keyed_hash(seed, *values) -> int:
    """``dpsql_hash``: a keyed 64-bit hash of (seed, values) for the L0 order."""
    h = hashlib.blake2b(digest_size=8, key=str(seed).encode()[:64])
    for v in values:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        h.update(repr(v).encode())
        h.update(b"\x1f")
    return struct.unpack(">q", h.digest())[0]


def fmod(a, b):
    """``dpsql_fmod``: C's fmod (the sign of ``a``), like DuckDB's ``%`` on reals; NULL
    for NULL, zero, non-finite or non-numeric input (never an error)."""
    try:
        a, b = float(a), float(b)
        return None if b == 0 else math.fmod(a, b)
    except (TypeError, ValueError, OverflowError):
        return None


def _connect_read_only(path: Path) -> sqlite3.Connection:
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    con.create_function(dialects.SQLITE_HASH, -1, keyed_hash, deterministic=True)
    con.create_function(dialects.SQLITE_FMOD, 2, fmod, deterministic=True)
    con.execute("PRAGMA query_only = ON")
    con.execute("PRAGMA trusted_schema = OFF")
    con.execute("PRAGMA case_sensitive_like = ON")
    con.set_authorizer(_authorizer)
    return con


def duckdb_type(declared: str) -> str:
    """A declared SQLite column type → the DuckDB type name (SQLite's affinity rules)."""
    t = (declared or "").upper().strip()
    if t.startswith(("DECIMAL", "NUMERIC")):
        return t.replace(" ", "").replace("NUMERIC", "DECIMAL")
    if t.startswith("TIMESTAMP") or t == "DATETIME":
        return "TIMESTAMP"
    if t in ("DATE", "BOOLEAN", "BOOL"):
        return "BOOLEAN" if t.startswith("BOOL") else "DATE"
    if "INT" in t:
        return "BIGINT"
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return "VARCHAR"
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return "DOUBLE"
    return "DECIMAL" if t else "BLOB"


class SQLiteBackend(SQLAlchemyBackend):
    dialect = "sqlite"
    supports_hash = False                # dpsql registers its own keyed hash
    supports_no_external_access = True   # authorizer: no ATTACH, no extensions
    supports_greatest_least = False
    supports_try = False
    supports_exact_integer_sums = False  # TOTAL: a float, exact below 2^53
    supports_unique_constraints = True
    transforms = dialects.SQLITE

    def __init__(self, url: str | sa.URL):
        url = sa.make_url(url)
        if not url.database or url.database == ":memory:":
            raise BackendError("an SQLite URL must name a database file (sqlite:///path.db)")
        path = Path(url.database).expanduser().resolve()
        if not path.exists():
            raise BackendError(f"SQLite database file {str(path)!r} does not exist")
        self.path = path
        engine = sa.create_engine("sqlite://", creator=lambda: _connect_read_only(path),
                                  poolclass=StaticPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sa.exc.DBAPIError as exc:
            raise BackendError(f"cannot open SQLite database {str(path)!r}: "
                               f"{type(exc.orig).__name__}") from None
        super().__init__(engine, str(path))

    def _read_columns(self, table: str) -> dict[str, str] | None:
        with self._lock, self._engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT name, type FROM sqlite_master "
                                        "WHERE type IN ('table', 'view') AND lower(name) = ?",
                                        (table.lower(),)).fetchall()
            if not rows:
                return None
            name = rows[0][0]
            info = conn.exec_driver_sql(f"PRAGMA table_info({_quote(name)})").fetchall()
        return {r[1].lower(): duckdb_type(r[2]) for r in info} or None

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        out: set[tuple[str, ...]] = set()
        if self.columns(table) is None:
            return out
        with self._lock, self._engine.connect() as conn:
            info = conn.exec_driver_sql(f"PRAGMA table_info({_quote(table)})").fetchall()
            pk = [r[1].lower() for r in sorted(info, key=lambda r: r[5]) if r[5] > 0]
            if pk:  # also covers INTEGER PRIMARY KEY, which has no index
                out.add(tuple(pk))
            for index in conn.exec_driver_sql(f"PRAGMA index_list({_quote(table)})"):
                _, name, unique, _origin, partial = tuple(index)[:5]
                if unique and not partial:
                    cols = conn.exec_driver_sql(f"PRAGMA index_info({_quote(name)})")
                    names = [c[2] for c in cols]
                    if all(names):  # no expression columns
                        out.add(tuple(c.lower() for c in names))
        return out

    def _describe(self, conn, sql: str, expression: exp.Expression) -> list[tuple[str, str]]:
        conn.exec_driver_sql("EXPLAIN " + sql).fetchall()  # compiles; runs nothing
        return self._inferred_types(expression)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
