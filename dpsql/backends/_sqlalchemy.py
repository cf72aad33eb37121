"""What the SQLAlchemy backends (PostgreSQL, SQLite) share: one engine, error hygiene."""

from __future__ import annotations

import threading

import sqlalchemy as sa
from sqlglot import exp

from dpsql.backends import dialects
from dpsql.backends.base import Backend
from dpsql.errors import BackendError


class SQLAlchemyBackend(Backend):
    """A backend reached through a SQLAlchemy engine that dpsql creates and owns."""

    name = "database"
    #: Exceptions of a failed statement (SQLAlchemy's, and the driver's own cursor's).
    _errors: tuple = (sa.exc.DBAPIError,)

    def __init__(self, engine: sa.Engine, name: str):
        self._engine = engine
        self.name = name
        self._lock = threading.RLock()
        self._columns: dict[str, dict[str, str] | None] = {}

    # -- metadata -----------------------------------------------------------------------

    def _metadata(self, sql: str, **params) -> list[tuple]:
        with self._lock, self._engine.connect() as conn:
            try:
                return [tuple(r) for r in conn.execute(sa.text(sql), params).fetchall()]
            except sa.exc.DBAPIError as exc:
                raise BackendError(f"cannot read the schema of {self.name}: "
                                   f"{type(exc.orig).__name__}") from None

    def columns(self, table: str) -> dict[str, str] | None:
        key = table.lower()
        if key not in self._columns:
            self._columns[key] = self._read_columns(key)
        return self._columns[key]

    def _read_columns(self, table: str) -> dict[str, str] | None:  # pragma: no cover
        raise NotImplementedError

    # -- queries ------------------------------------------------------------------------

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        sql = self.to_sql(expression)  # may refuse a construct (uncharged BackendError)
        with self._lock, self._engine.connect() as conn:
            try:
                return self._describe(conn, sql, expression)
            except self._errors as exc:
                exc = getattr(exc, "orig", None) or exc
                err = BackendError(
                    f"the backend cannot plan the rewritten query ({type(exc).__name__}: "
                    f"{(str(exc).splitlines() or [''])[0][:200]}); nothing was charged")
                err.charged = False
                raise err from None

    def _describe(self, conn, sql: str, expression: exp.Expression) -> list[tuple[str, str]]:
        raise NotImplementedError  # pragma: no cover

    def _run(self, conn, sql: str):
        """Runs one statement; returns (cursor description, rows)."""
        result = conn.exec_driver_sql(sql)
        return result.cursor.description, result.fetchall()

    def _inferred_types(self, expression: exp.Expression) -> list[tuple[str, str]]:
        """(name, DuckDB type) of the query's columns, from the dialect layer's inference."""
        ctx = dialects.context(expression, self.columns, self.dialect)
        out = []
        for item in expression.expressions:
            name = item.alias_or_name
            family = ctx.families.get(name.lower()) or ctx.family(item)
            out.append((name, dialects.DUCKDB_TYPE.get(family, "VARCHAR")))
        return out

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        sql = self.to_sql(expression)
        with self._lock, self._engine.connect() as conn:
            try:
                description, rows = self._run(conn, sql)
                return [d[0] for d in description], [tuple(r) for r in rows]
            except self._errors as exc:
                exc = getattr(exc, "orig", None) or exc
                # The message may quote data values; keep only the error class.
                raise BackendError(
                    f"the backend failed while running the query "
                    f"({type(exc).__name__}); the charge is kept because the failure "
                    "may depend on the data") from None

    def close(self) -> None:
        with self._lock:
            self._engine.dispose()
