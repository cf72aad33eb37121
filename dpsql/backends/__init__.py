"""Backends: the engines rewritten queries run on."""

from __future__ import annotations

from pathlib import Path

import duckdb as _duckdb

from dpsql.backends.base import Backend
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import BackendError


def open_backend(database) -> Backend:
    """Chooses the backend for ``database`` (a DuckDB path, ``":memory:"`` or connection)."""
    if isinstance(database, Backend):
        return database
    if isinstance(database, _duckdb.DuckDBPyConnection | str | Path):
        if isinstance(database, str) and "://" in database:
            raise BackendError(
                f"database URL scheme {database.split('://')[0]!r} is not supported yet; "
                "give a DuckDB file path, ':memory:' or a duckdb connection"
            )
        return DuckDBBackend(database)
    raise BackendError(
        f"cannot use {type(database).__name__} as a database; give a DuckDB file path, "
        "':memory:' or a duckdb connection"
    )


__all__ = ["Backend", "DuckDBBackend", "open_backend"]
