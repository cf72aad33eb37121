"""Backends: the engines rewritten queries run on, chosen from a registry.

``open_backend`` picks one from what ``dpsql.connect`` was given:

* a DuckDB file path, ``":memory:"`` or a ``duckdb.DuckDBPyConnection`` → DuckDB;
* a SQLAlchemy URL: ``sqlite:///file.db`` → SQLite (read-only),
  ``postgresql+psycopg://user:pw@host/db`` → PostgreSQL (read-only transactions),
  ``duckdb:///file.duckdb`` → DuckDB;
* a ``pyspark.sql.SparkSession`` (classic or Spark Connect) → Spark SQL;
* a :class:`Backend` instance, used as is.

Each engine is one specification in its own modules: its :class:`Backend` subclass,
its allow-list of total operations and its dialect transforms (``<engine>.py``, and
``<engine>_dialect.py`` / ``<engine>_total.py`` where they are long), and the two
functions the registry calls: ``from_url(url, limits)`` for the URL schemes it serves
and ``from_object(database, limits)`` (None: not this engine's) for the connection
objects it takes. Adding an engine is those modules and one line of :data:`ENGINES`.

``limits`` (the catalog's :class:`~dpsql.limits.Limits`) gives the owner's statement
timeout to the backends that can enforce one (PostgreSQL, SQLite).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from dpsql.backends.base import Backend
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import BackendError
from dpsql.limits import Limits


@dataclass(frozen=True)
class Engine:
    """One registry line: where an engine's module is and what it is chosen by.

    Attributes:
        module: the module with ``from_url``/``from_object`` (imported when first
            needed, so that an engine's driver is loaded only for its own databases).
        schemes: SQLAlchemy backend names of its URLs (``postgresql`` for
            ``postgresql+psycopg://``); empty: no URLs.
        url_prefix: how its URLs start, for the refusal of an unknown scheme.
        url_example: a URL for the message listing what ``connect`` takes (None: its
            URLs are not advertised there).
        objects: what it takes besides URLs, for that message (None: URLs only); the
            engines with objects are asked in this registry's order.
        file_urls: its URLs name a database file, beside which the ledger lives.
    """

    module: str
    schemes: tuple[str, ...] = ()
    url_prefix: str | None = None
    url_example: str | None = None
    objects: str | None = None
    file_urls: bool = False

    def load(self):
        return importlib.import_module(self.module)


#: The engines dpsql runs on. Adding one is its module(s) and one line here.
ENGINES = (
    Engine("dpsql.backends.sqlite", ("sqlite",), "sqlite:///", "sqlite:///file.db",
           file_urls=True),
    Engine("dpsql.backends.postgres", ("postgresql",), "postgresql+psycopg://",
           "postgresql+psycopg://user@host/db"),
    Engine("dpsql.backends.duckdb", ("duckdb",), "duckdb:///",
           objects="a DuckDB file path, ':memory:', a duckdb connection", file_urls=True),
    Engine("dpsql.backends.spark", objects="a SparkSession"),
)
_BY_SCHEME = {scheme: engine for engine in ENGINES for scheme in engine.schemes}


def _supported() -> str:
    """What ``connect`` takes, in words, from the registry."""
    objects = [e.objects for e in ENGINES if e.objects]
    urls = ", ".join(e.url_example for e in ENGINES if e.url_example)
    return f"{objects[0]}, a URL ({urls}) or {' or '.join(objects[1:])}"


def _url_backend(url: str, limits: Limits | None = None) -> Backend:
    import sqlalchemy as sa

    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise BackendError(f"not a database URL: give {_supported()}") from None
    engine = _BY_SCHEME.get(parsed.get_backend_name())
    if engine is None:
        prefixes = ", ".join(e.url_prefix for e in ENGINES if e.url_prefix)
        raise BackendError(f"database URL scheme {parsed.drivername!r} is not supported; "
                           f"supported: {prefixes}")
    return engine.load().from_url(parsed, limits)


def _is_sqlalchemy_url(database) -> bool:
    return type(database).__name__ == "URL" and type(database).__module__.startswith(
        "sqlalchemy")


def open_backend(database, limits: Limits | None = None) -> Backend:
    """Chooses the backend for ``database`` (see the module docstring)."""
    if isinstance(database, Backend):
        return database
    if isinstance(database, str) and "://" in database:
        return _url_backend(database, limits)
    if _is_sqlalchemy_url(database):
        return _url_backend(database.render_as_string(hide_password=False), limits)
    for engine in ENGINES:
        if engine.objects:
            backend = engine.load().from_object(database, limits)
            if backend is not None:
                return backend
    raise BackendError(f"cannot use {type(database).__name__} as a database; "
                       f"give {_supported()}")


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
        engine = _BY_SCHEME.get(url.get_backend_name())
        if engine is not None and engine.file_urls and url.database \
                and url.database != ":memory:":
            return Path(url.database).expanduser()
        return None
    if isinstance(database, str | Path) and str(database) != ":memory:":
        return Path(database)
    return None


__all__ = ["ENGINES", "Backend", "DuckDBBackend", "Engine", "ledger_home", "open_backend"]
