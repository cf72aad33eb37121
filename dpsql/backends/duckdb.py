"""DuckDB, embedded: the default backend.

dpsql opens its own connection with the least rights DuckDB offers: read-only, with
``enable_external_access = false`` (no files, no network, no extensions) and the
configuration locked so the rewritten SQL cannot change it. When handed an open
``DuckDBPyConnection`` it works on a cursor of it (same database, its own state) and
cannot lock that connection's settings; prefer a path for deployments.
"""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
from sqlglot import exp

from dpsql.backends.base import Backend
from dpsql.errors import BackendError

_LOCKED = {"enable_external_access": False, "lock_configuration": True}


class DuckDBBackend(Backend):
    dialect = "duckdb"
    supports_hash = True
    supports_no_external_access = True

    def __init__(self, database: str | Path | duckdb.DuckDBPyConnection):
        if isinstance(database, duckdb.DuckDBPyConnection):
            self._con = database.cursor()
            self.name = "duckdb connection"
        elif str(database) == ":memory:":
            self._con = duckdb.connect(":memory:", config=dict(_LOCKED))
            self.name = ":memory:"
        else:
            path = Path(database)
            if not path.exists():
                raise BackendError(f"DuckDB database file {str(path)!r} does not exist")
            try:
                self._con = duckdb.connect(str(path), read_only=True, config=dict(_LOCKED))
            except duckdb.Error as exc:
                raise BackendError(f"cannot open DuckDB database {str(path)!r}: {exc}") from None
            self.name = str(path)
        self._lock = threading.Lock()

    def columns(self, table: str) -> dict[str, str] | None:
        with self._lock:
            rows = self._con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND lower(table_name) = ? "
                "ORDER BY ordinal_position",
                [table.lower()],
            ).fetchall()
        return {name.lower(): dtype for name, dtype in rows} or None

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        with self._lock:
            rows = self._con.execute(
                "SELECT constraint_column_names FROM duckdb_constraints() "
                "WHERE schema_name = current_schema() AND lower(table_name) = ? "
                "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')", [table.lower()],
            ).fetchall()
        return {tuple(c.lower() for c in cols) for (cols,) in rows}

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        with self._lock:
            try:
                sql = self.to_sql(expression)
                rows = self._con.execute("DESCRIBE " + sql).fetchall()
                # EXPLAIN plans it too (constant folding): what fails there is refused free
                self._con.execute("EXPLAIN " + sql).fetchall()
                return [(r[0], r[1]) for r in rows]
            except duckdb.Error as exc:
                err = BackendError(
                    f"the backend cannot plan the rewritten query ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:200]}); nothing was charged"
                )
                err.charged = False
                raise err from None

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        sql = self.to_sql(expression)
        with self._lock:
            try:
                cur = self._con.execute(sql)
                columns = [d[0] for d in cur.description]
                return columns, cur.fetchall()
            except duckdb.Error as exc:
                # The message may quote data values; keep only the error class.
                raise BackendError(
                    f"the backend failed while running the query ({type(exc).__name__}); "
                    "the charge is kept because the failure may depend on the data"
                ) from None

    def close(self) -> None:
        with self._lock:
            self._con.close()
