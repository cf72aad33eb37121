"""A private in-memory DuckDB for work on released values and on the catalog alone.

Post-processing (the analyst's outer expressions over noisy statistics), its check
before charging, and the images of public key domains run SQL over small tables that
dpsql builds itself; none of it touches the analyst's data. Opening a new in-memory
database costs about 25 ms, so one database per process is kept, with external access
off, and every use gets its own cursor: a cursor is a separate connection (about 1 ms),
so the tables and views one use registers are invisible to any other and vanish when
it closes, and threads never share a connection.

>>> with scratch() as con:
...     _ = con.execute("CREATE TEMP TABLE t AS SELECT 41 + 1 AS x")
...     con.execute("SELECT x FROM t").fetchall()
[(42,)]
>>> with scratch() as con:  # a fresh cursor: the temporary table is gone
...     con.execute("SELECT COUNT(*) FROM duckdb_tables() WHERE table_name = 't'").fetchall()
[(0,)]
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

_lock = threading.Lock()
_database: tuple[int, duckdb.DuckDBPyConnection] | None = None


def _cursor() -> duckdb.DuckDBPyConnection:
    global _database
    with _lock:  # the parent connection is shared: one thread at a time opens cursors
        # a child process made by fork() must not use its parent's DuckDB instance
        if _database is None or _database[0] != os.getpid():
            config = {"enable_external_access": False, "threads": 1}
            _database = (os.getpid(), duckdb.connect(":memory:", config=config))
        return _database[1].cursor()


@contextmanager
def scratch() -> Iterator[duckdb.DuckDBPyConnection]:
    """A fresh connection to the process's private in-memory DuckDB, closed on exit."""
    con = _cursor()
    try:
        yield con
    finally:
        con.close()
