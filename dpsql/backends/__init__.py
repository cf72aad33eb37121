"""Backends: the engines rewritten queries run on.

``open_backend`` picks one from what ``dpsql.connect`` was given:

* a DuckDB file path, ``":memory:"`` or a ``duckdb.DuckDBPyConnection`` → DuckDB;
* a SQLAlchemy URL: ``sqlite:///file.db`` → SQLite (read-only),
  ``postgresql+psycopg://user:pw@host/db`` → PostgreSQL (read-only transactions),
  ``duckdb:///file.duckdb`` → DuckDB;
* a ``pyspark.sql.SparkSession`` (classic or Spark Connect) → Spark SQL;
* a :class:`Backend` instance, used as is.

``limits`` (the catalog's :class:`~dpsql.limits.Limits`) gives the owner's statement
timeout to the backends that can enforce one (PostgreSQL, SQLite).
"""

from __future__ import annotations

from pathlib import Path

import duckdb as _duckdb

from dpsql.backends.base import Backend
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import BackendError
from dpsql.limits import Limits

_SUPPORTED = ("a DuckDB file path, ':memory:', a duckdb connection, a URL "
              "(sqlite:///file.db, postgresql+psycopg://user@host/db) or a SparkSession")


def _url_backend(url: str, limits: Limits | None = None) -> Backend:
    import sqlalchemy as sa

    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise BackendError(f"not a database URL: give {_SUPPORTED}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        from dpsql.backends.sqlite import SQLiteBackend

        return SQLiteBackend(parsed, limits)
    if backend == "postgresql":
        if parsed.get_driver_name() not in ("psycopg", "psycopg2", ""):
            raise BackendError("PostgreSQL URLs use psycopg 3: postgresql+psycopg://...")
        from dpsql.backends.postgres import PostgresBackend

        if parsed.get_driver_name() != "psycopg":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return PostgresBackend(parsed, limits)
    if backend == "duckdb":
        return DuckDBBackend(parsed.database or ":memory:", limits)
    raise BackendError(f"database URL scheme {parsed.drivername!r} is not supported; "
                       "supported: sqlite:///, postgresql+psycopg://, duckdb:///")


def open_backend(database, limits: Limits | None = None) -> Backend:
    """Chooses the backend for ``database`` (see the module docstring)."""
    if isinstance(database, Backend):
        return database
    if isinstance(database, str) and "://" in database:
        return _url_backend(database, limits)
    if isinstance(database, _duckdb.DuckDBPyConnection | str | Path):
        return DuckDBBackend(database, limits)
    if type(database).__name__ == "URL" and type(database).__module__.startswith("sqlalchemy"):
        return _url_backend(database.render_as_string(hide_password=False), limits)
    from dpsql.backends.spark import SparkBackend, is_spark_session

    if is_spark_session(database):
        return SparkBackend(database, limits)
    raise BackendError(f"cannot use {type(database).__name__} as a database; give {_SUPPORTED}")


def ledger_home(database) -> Path | None:
    """The database file beside which its ledger lives by default, or None.

    A DuckDB or SQLite file has one; a server (PostgreSQL URL), a SparkSession or an
    in-memory database has none, and needs an explicit ``ledger=``.
    """
    if isinstance(database, str) and "://" in database:
        import sqlalchemy as sa

        try:
            url = sa.make_url(database)
        except sa.exc.ArgumentError:
            return None
        if url.get_backend_name() in ("sqlite", "duckdb") and url.database \
                and url.database != ":memory:":
            return Path(url.database).expanduser()
        return None
    if isinstance(database, str | Path) and str(database) != ":memory:":
        return Path(database)
    return None


__all__ = ["Backend", "DuckDBBackend", "ledger_home", "open_backend"]
