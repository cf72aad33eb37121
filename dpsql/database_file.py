"""Database files: where a database's default ledger lives, and refusing a database file
that does not exist before anything is created."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import duckdb

from dpsql.errors import (
    BackendError,
    LedgerError,
)


def default_ledger_path(database: Any) -> Path:
    """Where a database's ledger lives by default: ``<database file>.ledger.sqlite``
    beside the database's real path (symlinks resolved), so every name of one database
    file reaches one ledger.

    Raises:
        LedgerError: the database has no file (memory, server, Spark), or its file has
            a second hard link (two names, no single place for one ledger).
    """
    path = None
    if isinstance(database, duckdb.DuckDBPyConnection):
        row = database.execute("SELECT path FROM duckdb_databases() "
                               "WHERE database_name = current_database()").fetchone()
        path = row[0] if row and row[0] else None
    else:
        from dpsql.backends import ledger_home

        path = ledger_home(database)  # a DuckDB/SQLite file; None for servers and Spark
    if path is None:
        raise LedgerError(
            "a database in memory, a server URL or a SparkSession has no place for a "
            "ledger: pass ledger=PATH, or ledger=':memory:' for a budget that lasts only "
            "as long as this connection"
        )
    path = Path(os.path.realpath(path))
    with contextlib.suppress(OSError):
        links = os.stat(path).st_nlink
        if links > 1:
            raise LedgerError(
                f"database file {str(path)!r} has {links} hard links, so it has no single "
                "place for its default ledger (each name would get a fresh budget): pass "
                "ledger=PATH, or have the owner pin it (see dpsql.ledger)")
    return path.with_name(path.name + ".ledger.sqlite")


def check_database_file(database: Any) -> None:
    """Refuses a DuckDB or SQLite file that does not exist, before any ledger is created.

    Raises:
        BackendError: (nothing charged, nothing written) the file does not exist.
    """
    from dpsql.backends import ledger_home

    if isinstance(database, str) and database.startswith(("duckdb://", "sqlite://")):
        scheme, _, rest = database.partition("://")
        if rest and not rest.startswith("/"):  # duckdb://pums.duckdb reads as a host
            raise BackendError(
                f"{scheme}://{rest.split('?')[0]} names a host, not a file: a database "
                f"file comes after three slashes, {scheme}:///{rest.split('?')[0]}")
    path = ledger_home(database)
    if path is not None and not path.exists():
        raise BackendError(f"database file {str(path)!r} does not exist (nothing was "
                           "created, no ledger either); check the path, or create the "
                           "database first (e.g. dpsql.datasets.load_pums(path))")
