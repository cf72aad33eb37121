"""What the SQLAlchemy backends (PostgreSQL, SQLite) share: one engine, error hygiene.

Every call that reaches the database — metadata, the pre-charge check, the query —
turns any failure into one of the fixed messages of :mod:`dpsql.backends._boundary`
(the same on every backend) and writes the driver's own text to the owner's log.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable

import sqlalchemy as sa
from sqlglot import exp

from dpsql.backends import _boundary, dialects
from dpsql.backends.base import Backend
from dpsql.limits import Limits
from dpsql.types import DUCKDB_TYPE


class SQLAlchemyBackend(Backend):
    """A backend reached through a SQLAlchemy engine that dpsql creates and owns."""

    name = "database"
    #: Exceptions of a failed statement: SQLAlchemy's, the driver's own, and what a
    #: driver raises for text it cannot send (a NUL character, a lone surrogate).
    _errors: tuple = (sa.exc.SQLAlchemyError, ValueError, TypeError)

    def __init__(self, engine: sa.Engine, name: str, limits: Limits | None = None):
        self._engine = engine
        self.name = name
        self.limits = limits or Limits()
        self._lock = threading.RLock()
        self._columns: dict[str, dict[str, str] | None] = {}
        self._collations: dict[str, set[str]] = {}
        self._schema_version: str | None = None

    def _call(self, fn: Callable, on_error: Callable[[BaseException], Exception]):
        """``fn(conn)`` on a connection of the pool; a failure (connecting included)
        becomes ``on_error(driver exception)``, raised outside the ``except`` block so
        the driver's exception is not kept as its context."""
        failure = None
        with self._lock:
            try:
                with self._engine.connect() as conn:
                    return fn(conn)
            except self._errors as exc:
                failure = getattr(exc, "orig", None) or exc
        raise on_error(failure)

    # -- metadata -----------------------------------------------------------------------

    #: One metadata query (no parameters) whose rows change whenever anything a checked
    #: plan depends on changes: columns with their types, nullability and collations,
    #: keys and indexes, views' definitions, domains, the search path. None: the
    #: engine cannot tell, and the plan cache is off.
    schema_sql: str | None = None

    def schema_version(self) -> Hashable | None:
        """SHA-256 of :attr:`schema_sql`'s rows, read each time (one round trip); the
        column and collation metadata this backend remembers is dropped when it
        changes. None when it cannot be read (then nothing is cached, as before)."""
        if self.schema_sql is None:
            return None
        try:
            rows = self._call(
                lambda conn: [tuple(r) for r in conn.exec_driver_sql(self.schema_sql)],
                lambda exc: _Unknown())
        except _Unknown:
            return None
        version = hashlib.sha256(repr(rows).encode()).hexdigest()
        if version != self._schema_version:
            self._columns.clear()
            self._collations.clear()
            self._schema_version = version
        return version

    def _metadata(self, table: str, sql: str, **params) -> list[tuple]:
        """Rows of a metadata query dpsql wrote (bound parameters, never query text)."""
        return self._call(
            lambda conn: [tuple(r) for r in conn.execute(sa.text(sql), params).fetchall()],
            lambda exc: _boundary.schema_failed(self.name, table, exc))

    def columns(self, table: str) -> dict[str, str] | None:
        key = table.lower()
        if key not in self._columns:
            self._columns[key] = self._read_columns(key)
        return self._columns[key]

    def _read_columns(self, table: str) -> dict[str, str] | None:  # pragma: no cover
        raise NotImplementedError

    def nonbinary_collation_columns(self, table: str) -> set[str]:
        """String columns of ``table`` whose equality and grouping are not byte-exact."""
        key = table.lower()
        if key not in self._collations:
            self._collations[key] = self._read_collations(key)
        return set(self._collations[key])

    def _read_collations(self, table: str) -> set[str]:  # pragma: no cover
        raise NotImplementedError

    # -- queries ------------------------------------------------------------------------

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        sql = self.to_sql(expression)  # may refuse a construct (not charged)
        return self._call(lambda conn: self._describe(conn, sql, expression),
                          lambda exc: _boundary.plan_failed(self.name, exc, sql))

    def _describe(self, conn, sql: str, expression: exp.Expression) -> list[tuple[str, str]]:
        """Binds ``sql`` (one statement) without running it; returns its columns."""
        raise NotImplementedError  # pragma: no cover

    def _run(self, conn, sql: str):
        """Runs one statement; returns (cursor description, rows)."""
        raise NotImplementedError  # pragma: no cover

    def _inferred_types(self, expression: exp.Expression) -> list[tuple[str, str]]:
        """(name, DuckDB type) of the query's columns, from the dialect layer's inference."""
        ctx = dialects.context(expression, self.columns, self.dialect)
        out = []
        for item in expression.expressions:
            name = item.alias_or_name
            family = ctx.families.get(name.lower()) or ctx.family(item)
            out.append((name, DUCKDB_TYPE.get(family, "VARCHAR")))
        return out

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        sql = self.to_sql(expression)
        description, rows = self._call(lambda conn: self._run(conn, sql),
                                       lambda exc: _boundary.run_failed(self.name, exc, sql))
        if description is None:  # not a row-returning statement (nothing to read)
            raise _boundary.not_one_select(self.name, "execute", "it returned no rows", sql)
        return [d[0] for d in description], [tuple(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._engine.dispose()


class _Unknown(Exception):
    """The schema version could not be read (the plan cache stays off)."""
