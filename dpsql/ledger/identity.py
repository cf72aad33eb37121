"""Which database a data set belongs to: a file's real path, device and inode, or a
server's normalised URL (the binding a ledger keeps per data set, and what pins compare)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


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

def _same_database(old: dict, new: dict) -> bool:
    if old.get("kind") != new.get("kind"):
        return False
    if old["kind"] == "server":
        return old.get("url") == new.get("url")
    # the same file (a hard link or a moved file), or the owner's file rebuilt in place
    return (old.get("dev"), old.get("ino")) == (new.get("dev"), new.get("ino")) \
        or old.get("path") == new.get("path")
