"""Answers to the catalog probes of SQL tools, from the catalog alone.

psql's ``\\d``, JDBC's ``DatabaseMetaData``, SQLAlchemy's ``inspect()`` and the
drivers' connection-time queries read ``pg_catalog`` and ``information_schema``. They are
answered by an in-memory DuckDB that holds *only the catalog's tables, empty*: DuckDB
emulates much of ``pg_catalog`` with PostgreSQL's type OIDs, so the tools see the
catalog's tables and columns, and nothing there is derived from private data. Such
queries are free (no budget) and never reach the owner's database.

The probe database is locked down before any probe runs: no file or network access,
configuration locked, one thread, a memory cap, a time limit per probe. A probe may call
only the functions on an allow-list (those the recorded client probes use, the
service's stand-ins, and a few plain scalar ones): generators such as ``range``,
``repeat`` or ``lpad``, and anything that reads files, runs SQL from strings or sleeps,
are refused; ``generate_series`` (pgjdbc's index-column probes) only with bounds
taken from the catalog, not large literal ones. An answer is capped in rows and in
bytes, counted while it is fetched in chunks, so a probe can never make the service
hold more than a bounded answer.

Probe SQL is PostgreSQL's; before it runs, sqlglot rewrites the few things DuckDB lacks:
``'t'::regclass`` becomes the table's oid, ``OPERATOR(pg_catalog.~)`` a regular
expression match, ``COLLATE pg_catalog.default`` disappears, ``version()``,
``current_user`` and ``current_database()`` become the service's answers, and the
``pg_catalog`` tables DuckDB does not have (``pg_roles``, ``pg_inherits``...) come
from a small schema of empty stand-ins.

>>> from dpsql.datasets import pums_catalog
>>> db = ProbeDB(pums_catalog())
>>> is_probe("SELECT version()"), is_probe("SELECT COUNT(*) FROM pums")
(True, False)
>>> cols, rows = db.run("SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r'",
...                     login="alice")
>>> rows
[('pums',), ('pums_dup',)]
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.errors import UnsupportedQueryError
from dpsql.server.catalog_db import SERVER_VERSION, VERSION_TEXT, open_probe_database
from dpsql.server.catalog_rewrite import quote_keyword_aliases, rewrite_probe
from dpsql.text import escape

_log = logging.getLogger("dpsql.server")

_SYSTEM_SCHEMAS = {"pg_catalog", "information_schema"}


def is_probe(sql: str, catalog: Catalog | None = None) -> bool:
    """Whether a statement is a catalog probe: a SELECT (or UNION of them) that reads
    only ``pg_catalog`` / ``information_schema`` (or nothing at all).

    Anything that names a catalog table, or that sqlglot cannot parse as
    PostgreSQL, is not a probe and goes to dpsql's pipeline (which answers it with DP,
    answers a provable-empty schema probe free, or refuses it).
    """
    try:
        trees = sqlglot.parse(quote_keyword_aliases(sql), read="postgres")
    except (sqlglot.errors.SqlglotError, RecursionError, ValueError):
        return False
    if len(trees) != 1 or trees[0] is None:
        return False
    tree = trees[0]
    if not isinstance(tree, exp.Query):
        return False
    if isinstance(tree, exp.Select) and tree.args.get("operation_modifiers"):
        return False
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    private = {t.lower() for t in (catalog.tables if catalog is not None else ())}
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        schema = table.db.lower()
        if not name and isinstance(table.this, exp.Func):
            continue  # a table function: checked by name when it runs
        if schema in _SYSTEM_SCHEMAS or (not schema and (name.startswith("pg_") or
                                                         name in ctes)):
            if name in private:
                return False
            continue
        return False
    return True


class ProbeDB:
    """The in-memory DuckDB that answers probes; one per server, a cursor per probe."""

    def __init__(self, catalog: Catalog, timeout: float = 5.0, max_rows: int = 10_000,
                 max_bytes: int = 8 << 20):
        self.catalog = catalog
        self.timeout = timeout
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self._db = open_probe_database(catalog)

    def run(self, sql: str, login: str, params: list[Any] | None = None,
            dataset: str | None = None) -> tuple[list[tuple[str, str]], list[tuple]]:
        """Runs a probe; returns ([(name, DuckDB type)], rows).

        Raises:
            UnsupportedQueryError: the probe uses something refused here, or fails
                (the message is the service's own, never DuckDB's text).
        """
        text = rewrite_probe(sql, login, dataset or self.catalog.dataset)
        con = self._db.cursor()
        con.execute("SET search_path = 'public'")
        out, deadline = self._run_timed(con, text, params)
        if isinstance(out, BaseException):
            raise self._refusal(text, out, deadline)
        return out

    def _run_timed(self, con: duckdb.DuckDBPyConnection, text: str,
                   params: list[Any] | None) -> tuple[Any, float]:
        """Runs ``text`` on a thread of its own, interrupted at the time limit; closes
        ``con``. Returns (the answer or the exception it raised, the deadline)."""
        box: list = []
        done = threading.Event()

        def work() -> None:
            try:
                box.append(self._fetch_capped(con, text, params))
            except BaseException as exc:  # noqa: BLE001 - reported by run, not printed
                box.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=work, name="dpsql-probe", daemon=True)
        thread.start()
        deadline = time.monotonic() + self.timeout
        while not done.wait(0.05):
            if time.monotonic() > deadline:
                con.interrupt()
        con.close()
        return box[0], deadline

    def _fetch_capped(self, con: duckdb.DuckDBPyConnection, text: str,
                      params: list[Any] | None) -> tuple[list[tuple[str, str]], list[tuple]]:
        """The answer, fetched in chunks and counted as it comes.

        Raises:
            _TooBig: past the row or byte cap (the rest is never fetched).
        """
        cur = con.execute(text, params or None)  # streams: fetched in chunks
        cols = [(d[0], str(d[1])) for d in cur.description or []]
        rows: list[tuple] = []
        size = 0
        while True:
            chunk = cur.fetchmany(256)
            if not chunk:
                break
            rows += chunk
            size += sum(_size(row) for row in chunk)
            if len(rows) > self.max_rows or size > self.max_bytes:
                raise _TooBig()
        return cols, rows

    def _refusal(self, text: str, exc: BaseException,
                 deadline: float) -> UnsupportedQueryError:
        """The service's own message for a probe that failed (never DuckDB's text,
        which goes to the owner's log only)."""
        if isinstance(exc, _TooBig):
            return UnsupportedQueryError(
                f"catalog query answer too large (over {self.max_rows} rows or "
                f"{self.max_bytes} bytes): catalog queries describe the catalog's tables "
                "and columns only")
        # the owner's log: which probe fails, for the next catalog shim
        _log.info("probe failed: %s: %s", escape(text[:2000]), escape(exc))
        if time.monotonic() > deadline:
            return UnsupportedQueryError(f"catalog query stopped after {self.timeout:g} s")
        return UnsupportedQueryError(
            "this catalog query cannot be answered here: dpsql serves the catalog's "
            "tables and columns through pg_catalog and information_schema, and "
            "answers aggregate SELECTs over the catalog's tables with differential "
            "privacy")


class _TooBig(Exception):
    """A probe's answer passed the row or byte cap."""


def _size(value: Any) -> int:
    """Bytes a value takes on the wire, roughly (text form), to cap an answer."""
    if isinstance(value, tuple | list):
        return 4 + sum(_size(v) for v in value)
    if isinstance(value, dict):
        return 4 + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, str | bytes):
        return 4 + len(value)
    return 12


__all__ = ["SERVER_VERSION", "VERSION_TEXT", "ProbeDB", "is_probe", "rewrite_probe"]
