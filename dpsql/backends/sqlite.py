"""SQLite through SQLAlchemy: ``sqlite:///path/to/file.db``.

Least privilege: the file is opened read-only (``file:...?mode=ro`` URI, so the file
must exist and is never created or written), with ``PRAGMA query_only``, untrusted schema
objects (``trusted_schema = OFF``), no extension loading, and an authorizer that allows
reading and nothing else (no ATTACH, no writes, no DDL, no PRAGMA but the few metadata
ones dpsql reads). LIKE is made case-sensitive, as in DuckDB.

One statement, compiled not run: Python's ``sqlite3`` prepares exactly one statement per
call and refuses text that holds a second one ("You can only execute one statement at a
time") before anything runs; while a query's statement compiles, the authorizer allows
reading only (no PRAGMA, no transaction statement). The pre-charge check compiles the
query under ``EXPLAIN``, which lists the compiled program and runs none of it. A
progress handler interrupts a query that runs longer than the owner's
``statement_timeout_seconds`` (:class:`~dpsql.limits.Limits`).

SQLite has no hash function, so dpsql registers ``dpsql_hash(seed, uid, keys...)`` — a
keyed BLAKE2b of the values — on its own connection for the L0 order; and no
GREATEST/LEAST, TRY or exact wide sums: see :mod:`dpsql.backends.sqlite_dialect`. SQLite is
dynamically typed: column types are read from the declared types (``INTEGER`` →
BIGINT, ``REAL``/``DOUBLE`` → DOUBLE, ``TEXT`` → VARCHAR, ``DECIMAL(p,s)``, ``DATE``,
``TIMESTAMP``, ``BOOLEAN``); dates must be stored as ISO-8601 text.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sqlite3
import struct
import time
import urllib.parse
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool
from sqlglot import exp

from dpsql.backends import _boundary, sqlite_dialect, total
from dpsql.backends._sqlalchemy import SQLAlchemyBackend
from dpsql.errors import BackendError, QueryCancelled
from dpsql.limits import Limits

#: PRAGMAs dpsql reads once its connection is set up (metadata, and SQLAlchemy's
#: isolation-level probe); none of them may be given a value.
_ALLOWED_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                    "read_uncommitted"}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}


class _Guard:
    """State of dpsql's connection around one statement built from a query: its
    deadline (a ``time.monotonic()`` value, or None) and whether only a query may be
    compiled (no PRAGMA, no transaction statement: nothing but reading)."""

    def __init__(self):
        self.deadline: float | None = None
        self.query_only = False
        self.timed_out = False
        #: a Ctrl-C landed in dpsql's own Python code SQLite runs (:class:`ExactSum`)
        self.cancelled = False

    def interrupt(self) -> bool:
        """The progress handler: True stops the running statement.

        Ctrl-C also stops it here: Python raises ``KeyboardInterrupt`` inside this
        callback, which ``sqlite3`` swallows and turns into an "interrupted" error, so
        ``timed_out`` tells the two apart.
        """
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.timed_out = True
            return True
        return self.cancelled


def _authorizer(guard: _Guard, action, arg1, arg2, dbname, source):
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _DENIED_FUNCTIONS \
            else sqlite3.SQLITE_OK
    if guard.query_only:  # a query's statement: reading and nothing else
        return sqlite3.SQLITE_DENY
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


#: sqlite3's texts for an exception raised by a Python aggregate's method or function.
_PYTHON_ERRORS = ("user-defined aggregate's", "user-defined function raised exception")


def _own(function, guard: _Guard):
    """``function`` as SQLite calls it on dpsql's connection: never an error.

    A Ctrl-C that lands in its Python code is handed to ``guard`` (the statement is
    then cancelled: :meth:`SQLiteBackend._run`) and anything else it might raise gives
    NULL. What can still escape is an interrupt raised on entry, before any handler
    runs, so a statement that fails in dpsql's Python code was interrupted
    (:data:`_PYTHON_ERRORS`), and its failure says nothing of the data.
    """
    def call(*args):
        try:
            return function(*args)
        except KeyboardInterrupt:
            guard.cancelled = True
        except Exception:  # noqa: BLE001 - an error here would fail the statement
            pass
        return None
    return call


class ExactSum:
    """``dpsql_isum``: the exact sum of integers, whatever order SQLite adds them in.

    Python integers do not round or overflow, so the total is a function of the multiset
    of values (:func:`dpsql.backends.sqlite_dialect.sqlite_sums`). Never an error: a
    value that is not an integer (the SQL gives it none: its argument is of an integer
    family) is rounded if finite and skipped otherwise. NULL when there is nothing to add,
    as ``SUM``; a total beyond SQLite's 64-bit integers is returned as the nearest float
    (still a function of the values).

    >>> s = ExactSum()
    >>> for v in (2**53, 1, 1, None): s.step(v)
    >>> s.finalize(), ExactSum().finalize()
    (9007199254740994, None)
    """

    #: The connection's :class:`_Guard` (set per connection by :func:`_connect_read_only`).
    #: A Ctrl-C that lands in this Python code would fail the statement as an error of
    #: the aggregate ("may depend on the data"); it is handed to the progress handler
    #: instead, which stops the statement as cancelled.
    guard: _Guard | None = None
    # class defaults, no __init__: SQLite makes one per group, and a Ctrl-C landing in a
    # Python __init__ failed the statement as an error of the aggregate
    total = 0
    seen = False

    def step(self, value) -> None:
        try:
            if isinstance(value, int):
                self.total += value
            elif isinstance(value, float) and math.isfinite(value):
                self.total += round(value)
            else:
                return
            self.seen = True
        except KeyboardInterrupt:
            self._cancel()
        except Exception:  # noqa: BLE001 - an aggregate that raises fails the query
            return

    def finalize(self):
        try:
            if not self.seen:
                return None
            if -(2**63) <= self.total < 2**63:
                return self.total
            return float(self.total)
        except KeyboardInterrupt:
            self._cancel()
        except Exception:  # noqa: BLE001 - never an error after the charge
            return None
        return None

    def _cancel(self) -> None:
        if self.guard is not None:
            self.guard.cancelled = True


class ExactSumOut(ExactSum):
    """``dpsql_isum_out``: :class:`ExactSum` for a sum the query returns, whose total
    beyond SQLite's 64-bit integers comes back as its decimal digits (text), exactly,
    not as the nearest float (:func:`dpsql.backends.sqlite_dialect.sqlite_sums`).

    >>> s = ExactSumOut()
    >>> for v in (2**62, 2**62, 1): s.step(v)
    >>> s.finalize()
    '9223372036854775809'
    """

    def finalize(self):
        try:
            if self.seen and not -(2**63) <= self.total < 2**63:
                return str(self.total)
        except KeyboardInterrupt:
            self._cancel()
            return None
        except Exception:  # noqa: BLE001 - never an error after the charge
            return None
        return super().finalize()


#: SQLite virtual-machine instructions between two calls of the timeout handler.
_PROGRESS_STEPS = 10_000


def utf8(raw):
    """``dpsql_utf8``: a BLOB's bytes as text when they are valid UTF-8, else NULL.

    >>> utf8("é".encode()), utf8(b"\\xff"), utf8(None)
    ('é', None, None)
    """
    if not isinstance(raw, bytes):
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def decode_text(raw: bytes) -> str:
    """SQLite TEXT → str, never an error: SQLite stores whatever bytes it was given, and
    the default decoding fails the fetch (after the charge) on a value that is not UTF-8.
    Bytes that are not UTF-8 are written as ``\\xNN`` escapes (different invalid bytes
    stay different; the result is always valid text).

    >>> decode_text("é".encode()), decode_text(b"\\xffa")
    ('é', '\\\\xffa')
    """
    return raw.decode("utf-8", "backslashreplace")


def _connect_read_only(path: Path, guard: _Guard) -> sqlite3.Connection:
    """dpsql's connection, read-only, under ``guard`` (deadline, queries only)."""
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    con.text_factory = decode_text
    con.set_progress_handler(guard.interrupt, _PROGRESS_STEPS)
    con.create_function(sqlite_dialect.SQLITE_HASH, -1, _own(keyed_hash, guard),
                        deterministic=True)
    con.create_function(sqlite_dialect.SQLITE_FMOD, 2, _own(fmod, guard), deterministic=True)
    con.create_function(sqlite_dialect.SQLITE_UTF8, 1, _own(utf8, guard), deterministic=True)
    con.create_aggregate(sqlite_dialect.SQLITE_ISUM, 1,
                         type("ExactSum", (ExactSum,), {"guard": guard}))
    con.create_aggregate(sqlite_dialect.SQLITE_ISUM_OUT, 1,
                         type("ExactSumOut", (ExactSumOut,), {"guard": guard}))
    con.execute("PRAGMA query_only = ON")
    con.execute("PRAGMA trusted_schema = OFF")
    con.execute("PRAGMA case_sensitive_like = ON")
    con.set_authorizer(functools.partial(_authorizer, guard))
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
    reports_types = False
    dialect = "sqlite"
    supports_hash = False                # dpsql registers its own keyed hash
    supports_no_external_access = True   # authorizer: no ATTACH, no extensions
    supports_greatest_least = False
    supports_try = False
    supports_exact_integer_sums = True   # dpsql_isum: Python integers (sqlite_sums)
    # BIGINT grid units are added by dpsql_isum, exactly below 2^63 (dpsql.grid_units)
    supports_grid_sums = True
    supports_unique_constraints = True
    transforms = sqlite_dialect.SQLITE
    functions = sqlite_dialect.FUNCTIONS
    _errors = SQLAlchemyBackend._errors + (sqlite3.Error,)

    def __init__(self, url: str | sa.URL, limits: Limits | None = None):
        url = sa.make_url(url)
        if not url.database or url.database == ":memory:":
            raise BackendError("an SQLite URL must name a database file (sqlite:///path.db)")
        path = Path(url.database).expanduser().resolve()
        if not path.exists():
            raise BackendError(f"SQLite database file {str(path)!r} does not exist")
        self.path = path
        self._guard = guard = _Guard()
        engine = sa.create_engine("sqlite://",
                                  creator=lambda: _connect_read_only(path, guard),
                                  poolclass=StaticPool)
        failure = None
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
            failure = getattr(exc, "orig", None) or exc
        if failure is not None:
            raise _boundary.open_failed(f"SQLite database {str(path)!r}", failure)
        super().__init__(engine, str(path), limits)

    #: Every table's, index's, view's and trigger's DDL as SQLite keeps it (column
    #: types and collations, keys, views): any schema change rewrites a row here.
    schema_sql = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"

    def _read_only_rows(self, table: str, sql: str, params=()) -> list[tuple]:
        """Rows of a metadata statement dpsql wrote (names quoted, values bound)."""
        return self._call(
            lambda conn: [tuple(r) for r in conn.exec_driver_sql(sql, params).fetchall()],
            lambda exc: _boundary.schema_failed(self.name, table, exc))

    def _table_name(self, table: str) -> str | None:
        rows = self._read_only_rows(table, "SELECT name FROM sqlite_master WHERE type IN "
                                    "('table', 'view') AND lower(name) = ?", (table.lower(),))
        return rows[0][0] if rows else None

    def _read_columns(self, table: str) -> dict[str, str] | None:
        name = self._table_name(table)
        if name is None:
            return None
        info = self._read_only_rows(table, f"PRAGMA table_info({_quote(name)})")
        return {r[1].lower(): duckdb_type(r[2]) for r in info} or None

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        """PRIMARY KEY and UNIQUE column sets whose columns cannot hold NULL.

        SQLite lets a UNIQUE column, and a PRIMARY KEY column of a rowid table (unless it
        is the rowid itself), hold any number of NULLs, so a key proves one row per value
        only when each of its columns is declared NOT NULL — or when it is an INTEGER
        PRIMARY KEY, the rowid, which is never NULL (such a key has no index of its own).
        A WITHOUT ROWID table's key columns are NOT NULL, and ``table_info`` says so.
        """
        out: set[tuple[str, ...]] = set()
        name = self._table_name(table)
        if name is None:
            return out
        info = self._read_only_rows(table, f"PRAGMA table_info({_quote(name)})")
        not_null = {r[1].lower() for r in info if r[3]}
        indexes = [tuple(r)[:5] for r in
                   self._read_only_rows(table, f"PRAGMA index_list({_quote(name)})")]
        pk = tuple(r[1].lower() for r in sorted(info, key=lambda r: r[5]) if r[5] > 0)
        rowid_alias = len(pk) == 1 and not any(origin == "pk" for _, _, _, origin, _ in indexes)
        if pk and (rowid_alias or all(c in not_null for c in pk)):
            out.add(pk)
        for _, index, unique, _origin, partial in indexes:
            if unique and not partial:
                cols = [c[2] for c in
                        self._read_only_rows(table, f"PRAGMA index_info({_quote(index)})")]
                if cols and all(cols) and all(c.lower() in not_null for c in cols):
                    out.add(tuple(c.lower() for c in cols))  # no expression columns
        return out

    def _read_collations(self, table: str) -> set[str]:
        """Columns under NOCASE or RTRIM (declared, or given by a view's expression).

        Measured rather than parsed from the ``CREATE`` text: each column's values (none:
        ``WHERE 0``) are unioned with probes of pairwise different bytes; a compound
        SELECT takes the leftmost column's collation, so fewer distinct probes mean the
        column compares different strings as equal. Reads no rows.
        """
        name = self._table_name(table)
        if name is None:
            return set()
        columns = [r[1] for r in self._read_only_rows(table, f"PRAGMA table_info({_quote(name)})")]
        if not columns:
            return set()
        probes = _boundary.COLLATION_PROBES
        values = ", ".join("(" + ", ".join([_literal(p)] * len(columns)) + ")" for p in probes)
        counts = ", ".join(f"count(DISTINCT {_quote(c)})" for c in columns)
        listed = ", ".join(_quote(c) for c in columns)
        rows = self._read_only_rows(
            table, f"SELECT {counts} FROM (SELECT {listed} FROM {_quote(name)} WHERE 0 "
                   f"UNION ALL VALUES {values})")
        return {c.lower() for c, n in zip(columns, rows[0], strict=True) if n != len(probes)}

    def _guarded(self, conn, sql: str):
        """Runs one statement built from a query under the owner's timeout, where the
        authorizer lets nothing but reading compile; returns (description, rows)."""
        seconds = self.limits.statement_timeout_seconds
        self._guard.deadline = time.monotonic() + seconds if seconds > 0 else None
        self._guard.query_only = True
        try:
            result = conn.exec_driver_sql(sql)
            return result.cursor.description, result.fetchall()
        finally:
            self._guard.deadline = None
            self._guard.query_only = False

    def _describe(self, conn, sql: str, expression: exp.Expression) -> list[tuple[str, str]]:
        # EXPLAIN compiles the one statement (sqlite3 refuses text holding a second) and
        # lists its program without running it
        self._guarded(conn, "EXPLAIN " + sql)
        return self._inferred_types(expression)

    def _run(self, conn, sql: str):
        self._guard.timed_out = False
        self._guard.cancelled = False
        try:
            ran = self._guarded(conn, sql)
        except sa.exc.OperationalError as exc:
            # SQLite's fixed text for SQLITE_INTERRUPT (no data in it): stopped, and not
            # by the timeout, so by Ctrl-C in the progress handler
            if str(getattr(exc, "orig", "")) == "interrupted" and not self._guard.timed_out:
                raise QueryCancelled() from None
            # dpsql's Python functions catch every Exception; what escapes them is a
            # KeyboardInterrupt raised on entry, before their handlers (_own): Ctrl-C
            if str(getattr(exc, "orig", "")).startswith(_PYTHON_ERRORS):
                raise QueryCancelled() from None
            raise
        finally:
            cancelled, self._guard.cancelled = self._guard.cancelled, False
        if cancelled:
            # a Ctrl-C that dpsql's Python code caught (the value it gave is wrong) after
            # the progress handler's last look: the statement ended, its rows are not used
            raise QueryCancelled()
        return ran


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- totality: SQLite's allow-list ------------------------------------------------------------
#
# SQLite is dynamically typed: after ``sqlite_typed_tables`` a column holds values of its
# declared storage classes, but an expression has no type dpsql could ask for, so every
# entry below is decided by the operation alone and must hold for values of EVERY storage
# class (NULL, INTEGER, REAL, TEXT -- valid UTF-8 or not -- and BLOB). Measured on SQLite
# 3.40 and exercised by the extreme-value fuzzer (``tests/privacy/totality.py``). What is
# not listed is refused before the charge: SQLite has no guard (no TRY). Text that is not
# UTF-8 never fails the fetch: dpsql's connection decodes with escapes (``decode_text``).

_DPSQL_CASTS = {sqlite_dialect.SQLITE_HASH.upper(): "BLOB",
                sqlite_dialect.SQLITE_FMOD.upper(): "DOUBLE",
                sqlite_dialect.SQLITE_UTF8.upper(): "BLOB"}


def _cast_to(node: exp.Expression, kind: str) -> bool:
    return isinstance(node, exp.Cast) and node.to.is_type(kind)


def _own_function(node: exp.Expression, types: total.Types) -> bool:
    """dpsql's Python functions (``keyed_hash``, ``fmod``, ``utf8``) never raise on bytes
    or floats, and each argument is cast to one of those first (a Python function given
    text that is not UTF-8 fails before it is called); the hash's first argument is the
    seed, a constant dpsql writes. ``dpsql_isum`` (:class:`ExactSum`: catches everything).
    SQLite's own TOTAL (a float sum: inf, never an error), and STRFTIME/DATE/DATETIME
    (NULL for any value they cannot read)."""
    name = str(node.this).upper()
    args = node.expressions
    if name in ("TOTAL", "STRFTIME", "DATE", "DATETIME", sqlite_dialect.SQLITE_ISUM.upper(),
                sqlite_dialect.SQLITE_ISUM_OUT.upper()):
        return True
    kind = _DPSQL_CASTS.get(name)
    if kind is None:
        return False
    if name == sqlite_dialect.SQLITE_HASH.upper():
        return bool(args) and isinstance(args[0], exp.Literal) and all(
            _cast_to(a, kind) for a in args[1:])
    return all(_cast_to(a, kind) for a in args)


def _like(node: exp.Expression, types: total.Types) -> bool:
    """A constant pattern of at most 1,000 characters: SQLite fails a LIKE only on a
    pattern past 50,000 bytes or an ESCAPE that is not one character (never listed)."""
    pattern = node.expression
    return isinstance(pattern, exp.Literal) and pattern.is_string and \
        len(pattern.this.encode()) <= 1000


def _shrinking_replace(node: exp.Expression, types: total.Types) -> bool:
    """REPLACE of a constant by a constant no longer than it: no value can grow (SQLite
    fails a result past its length limit, and a repeated REPLACE grows geometrically)."""
    search, repl = node.expression, node.args.get("replacement")
    if not all(isinstance(x, exp.Literal) and x.is_string for x in (search, repl)):
        return False
    return len(repl.this.encode()) <= len(search.this.encode()) <= 1000 and bool(search.this)


_E = total.Entry
#: SQLite's operations that cannot fail, for values of every storage class.
TOTAL = total.AllowList("SQLite", (
    _E((*total.COMPARISONS, exp.Is), total.always,
       "SQLite orders values of all storage classes and converts nothing that can fail"),
    _E((exp.And, exp.Or, exp.Xor, exp.Not), total.always,
       "any value is a truth value (converted to a number, never an error)"),
    _E((exp.Case, exp.Coalesce, exp.Nullif, exp.If, exp.Max, exp.Min), total.always,
       "chooses one of the values (scalar or aggregate MAX/MIN)"),
    _E((exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg), total.always,
       "integer overflow becomes REAL, a zero divisor NULL, text a number: never an error"),
    _E((exp.Cast, exp.TryCast), total.always, "CAST in SQLite converts whatever it can and "
                                              "gives 0, '' or NULL otherwise"),
    _E((exp.Ceil, exp.Round, exp.Sqrt, exp.Ln, exp.Exp, exp.Pow, exp.Sign), total.always,
       "SQLite's C math functions: NULL outside their domain, inf on overflow"),
    _E((exp.DPipe, exp.Length, exp.Lower, exp.Upper, exp.Trim, exp.Substring,
        exp.StrPosition), total.always,
       "text functions work on bytes of any class; at most as long as their inputs"),
    _E((exp.Replace,), _shrinking_replace, _shrinking_replace.__doc__.split(":")[0]),
    _E((exp.Like, exp.ILike), _like, _like.__doc__.split(":")[0]),
    _E((exp.Count, exp.Avg), total.always,
       "counts rows; AVG accumulates in floating point (SUM is written TOTAL)"),
    _E((exp.RowNumber,), total.always, "numbers rows"),
    _E((exp.Typeof,), total.always, "names a value's storage class"),
    _E((exp.Anonymous,), _own_function, _own_function.__doc__.split(";")[0]),
), guards=(), conditions_of_any_type=True, guard_forms=False)

SQLiteBackend.allow = TOTAL
#: All of SQLite's transforms run before the list is applied (nothing is typed: no probe
#: needs DuckDB's spellings translated first). A ``TRY`` the rewrite wrote is dropped, and
#: what it held is then checked against the list like anything else.
SQLiteBackend.pre_transforms = sqlite_dialect.SQLITE
SQLiteBackend.transforms = ()


# -- how ``dpsql.connect`` reaches this engine (the registry: :mod:`dpsql.backends`) --------


def from_url(url: sa.URL, limits: Limits | None = None) -> SQLiteBackend:
    """``sqlite:///file.db``, opened read-only."""
    return SQLiteBackend(url, limits)
