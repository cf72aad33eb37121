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

Cost (measured on DuckDB 2.0 here): about 15 ms to open and close one database, against
0.2 ms for a cursor of a shared one. A query pays it once to post-process (its
pre-charge check is cached per query shape, :func:`dpsql.postprocess._bind`) and once
per group key whose image is evaluated.

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


@contextmanager
def scratch() -> Iterator[duckdb.DuckDBPyConnection]:
    """A fresh, private in-memory DuckDB, closed (and gone) on exit."""
    con = duckdb.connect(":memory:", config=CONFIG)
    try:
        yield con
    finally:
        con.close()


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
