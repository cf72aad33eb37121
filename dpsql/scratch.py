"""Private in-memory DuckDBs for work on released values and on the catalog alone.

Post-processing (the analyst's outer expressions over noisy statistics), its check
before charging, and the images of public key domains run SQL over small tables that
dpsql builds itself; none of it touches the analyst's data.

**Isolation by construction: one fresh database per use.** Every :func:`scratch` opens
a new in-memory DuckDB and closes it on exit, so nothing one query does there — a
table, a view, a macro, a type, an attached database, a loaded extension, a variable —
can be seen by any other query, thread or analyst: there is no shared state left to
poison. Cursors of one shared database are not enough: a cursor keeps only its
temporary objects to itself, while ``CREATE MACRO``, ``CREATE TABLE``,
``ATTACH ':memory:'`` and ``LOAD`` change the database every cursor shares (measured on
DuckDB 2.0: each of them was visible from a second cursor, even with external access
off and the configuration locked).

Each database is also closed to the outside: no files, network or extensions
(``enable_external_access``, no extension autoloading), no replacement scans of Python
variables, a memory limit and no spilling to disk, one thread, and
``lock_configuration`` so that no statement can change any of that.

**Opened ahead of use.** Opening a database costs about 10 ms (DuckDB 2.0 here, against
0.005 ms for a cursor of a shared one), almost all of it outside the GIL. So a
background thread keeps :data:`SPARES` fresh databases open, and :func:`scratch` hands
one out (the caller's query does not wait for it) and has another opened in its place;
the same thread closes used ones (about 4 ms each).
Every database is still handed out **once** and closed after that one use, so the
isolation above is unchanged: a spare has run nothing before its use. With no spare
ready (many uses at once, or ``DPSQL_SCRATCH_SPARES=0``) a use opens its own, as
before. A forked child never uses its parent's spares (:func:`os.register_at_fork`).
The background opening still costs CPU, about 10 ms per use, off the answer's path;
:func:`settle` waits for it (the benchmark does, so that it does not slow the plain
query it times next).

Every SQL text run here is written by sqlglot from a tree dpsql built and passes
:func:`dpsql.output_check.check_sql` first (:func:`run`).

>>> with scratch() as con:
...     _ = con.execute("CREATE MACRO round(x, y) AS 4242")
...     con.execute("SELECT round(2.5::DOUBLE, 0)").fetchall()
[(4242,)]
>>> with scratch() as con:  # a fresh database: the macro is gone
...     con.execute("SELECT round(2.5::DOUBLE, 0)").fetchall()
[(3.0,)]
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager

import duckdb
from sqlglot import exp

#: Configuration of every scratch database (see the module docstring).
CONFIG = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,
    "memory_limit": "512MB",
    "temp_directory": "",
    "threads": 1,
    "lock_configuration": True,
}


#: Fresh databases kept open ahead of use (``DPSQL_SCRATCH_SPARES``, default 2; 0 turns
#: the background opening off). Each idle one holds about 6 MiB.
SPARES_ENV = "DPSQL_SCRATCH_SPARES"


#: Used databases left for the background thread to close, at most.
_BACKLOG = 4


def _spares_wanted() -> int:
    try:
        return max(0, min(16, int(os.environ.get(SPARES_ENV, "2"))))
    except ValueError:
        return 2


def _open() -> duckdb.DuckDBPyConnection:
    return duckdb.connect(":memory:", config=CONFIG)


def _close(con: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(Exception):  # a used database is dropped either way
        con.close()


class _Spares:
    """Databases opened by a background thread, each handed out exactly once."""

    def __init__(self) -> None:
        self.ready: list[duckdb.DuckDBPyConnection] = []
        self.used: list[duckdb.DuckDBPyConnection] = []  # to be closed by the thread
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None
        self.closed = False

    def take(self) -> duckdb.DuckDBPyConnection | None:
        """A spare, removed from the pool (so no one else gets it), or None."""
        with self.lock:
            con = self.ready.pop() if self.ready else None
            self._wake()
        return con

    def discard(self, con: duckdb.DuckDBPyConnection) -> None:
        """Closes a used database, on the background thread when there is one."""
        with self.lock:
            # a backlog the thread has not closed yet stays bounded: past it, the user
            # closes its own (many uses at once would otherwise pile up memory)
            if self._alive() and len(self.used) < _BACKLOG:
                self.used.append(con)
                self.lock.notify_all()
                return
        _close(con)

    def _alive(self) -> bool:
        return self.thread is not None and not self.closed

    def _wake(self) -> None:
        if _spares_wanted() == 0 or self.closed:
            return
        if self.thread is None:
            # not a daemon: it ends by itself once the pool is full and nothing waits to
            # be closed, and at exit Python waits for that bounded work (a daemon thread
            # stopped by the interpreter's exit inside DuckDB's C++ aborts the process)
            thread = threading.Thread(target=self._fill, name="dpsql-scratch")
            try:
                thread.start()
            except RuntimeError:  # no thread to be had (a thread limit): uses open and
                return           # close their own, and the next use tries again
            self.thread = thread
        self.lock.notify_all()

    def _fill(self) -> None:
        try:
            self._work()
        finally:
            with self.lock:  # whatever ended it, no used database waits for this thread
                if self.thread is threading.current_thread():
                    self.thread = None
                self.lock.notify_all()

    def _work(self) -> None:
        while True:
            with self.lock:
                if self.closed or (len(self.ready) >= _spares_wanted() and not self.used):
                    # done: the thread ends here, under the lock, so a use that comes
                    # after sees no thread and closes its own or starts a new one
                    self.thread = None
                    return
                used, self.used = self.used, []
            for con in used:
                _close(con)
            with self.lock:
                if self.closed or len(self.ready) >= _spares_wanted():
                    continue
            try:
                con = _open()  # outside the lock: takers never wait for an opening
            except Exception:  # noqa: BLE001 - no spare then; uses open their own
                return
            with self.lock:
                if self.closed:
                    _close(con)
                    continue
                self.ready.append(con)

    def close(self) -> None:
        """Closes the spares and stops the thread's work (at interpreter exit)."""
        with self.lock:
            self.closed = True
            ready, self.ready = self.ready + self.used, []
            self.used = []
            self.lock.notify_all()
            # the thread (if any) finishes what it is doing and ends
            self.lock.wait_for(lambda: self.thread is None, 5.0)
        for con in ready:
            con.close()

    def settle(self, timeout: float) -> bool:
        """Waits until the pool is full and nothing is being opened."""
        with self.lock:
            if _spares_wanted() == 0 or self.closed:
                return True
            return self.lock.wait_for(lambda: self.thread is None, timeout)


_SPARES = _Spares()
#: A forked child's inherited pools, kept referenced and untouched.
_ORPHANED: list[_Spares] = []


def _forget_parents_spares() -> None:
    # the child must not share a database with its parent; the parent's are left alone
    # (closing them here could touch state the parent's other threads hold)
    global _SPARES
    _ORPHANED.append(_SPARES)  # never closed here: freeing DuckDB's handles after a fork
    _SPARES = _Spares()        # crashes the child (seen: a segfault)


atexit.register(lambda: _SPARES.close())
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_spares)


def settle(timeout: float = 5.0) -> bool:
    """Waits until the background thread has opened its spares; True when it has.

    Nothing needs this for correctness; a benchmark calls it so that the opening does not
    run during the next query it times.
    """
    return _SPARES.settle(timeout)


@contextmanager
def scratch() -> Iterator[duckdb.DuckDBPyConnection]:
    """A fresh, private in-memory DuckDB, closed (and gone) on exit.

    Fresh means it has run nothing before: an unused spare (see the module docstring) or
    one opened here.
    """
    spares = _SPARES
    con = spares.take() or _open()
    try:
        yield con
    finally:
        spares.discard(con)


def checked_sql(query: exp.Expression, names: Collection[str] = ()) -> str:
    """The DuckDB text of ``query``, proven by the output check to be that one SELECT.

    Args:
        query: a SELECT tree built by dpsql; it may read only tables dpsql registered
            (names starting with ``__``).
        names: names besides plain ones the query may use (the analyst's output names).

    Raises:
        UnsupportedQueryError: the text is not exactly the tree's single SELECT.
    """
    from dpsql.output_check import check_sql

    sql = query.sql(dialect="duckdb")
    check_sql(sql, query, "duckdb", tables=(), names=names)
    return sql


def run(con: duckdb.DuckDBPyConnection, query: exp.Expression,
        names: Collection[str] = ()) -> list[tuple]:
    """Runs dpsql's ``query`` tree on a scratch database after the output check."""
    return con.execute(checked_sql(query, names)).fetchall()
