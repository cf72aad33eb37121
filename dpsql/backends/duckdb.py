"""DuckDB, embedded: the default backend.

dpsql opens its own connection with the least rights DuckDB offers: read-only, with
``enable_external_access = false`` (no files, no network, no extensions), no Python
replacement scans, and the configuration locked so the rewritten SQL cannot change it.
When handed an open ``DuckDBPyConnection`` it works on a cursor of it (same database, its
own state) and cannot lock that connection's settings; prefer a path for deployments.

One statement, bound not executed: every SQL text is first split by DuckDB's own parser
(``extract_statements``) and must be exactly one SELECT. The pre-charge check binds that
one statement into a lazy relation (names and types, nothing runs) and plans it
(``EXPLAIN`` of the bound relation: constant folding, nothing runs); only ``execute``
runs it. DuckDB has no per-statement timeout, so none is set. Engine error texts go to
the owner's log (:mod:`dpsql.backends._boundary`), never to the analyst.
"""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
from sqlglot import exp

from dpsql.backends import _boundary
from dpsql.backends.base import Backend
from dpsql.errors import BackendError
from dpsql.limits import Limits

_LOCKED = {"enable_external_access": False, "python_enable_replacements": False,
           "lock_configuration": True}

def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DuckDBBackend(Backend):
    dialect = "duckdb"
    supports_hash = True
    supports_no_external_access = True

    def __init__(self, database: str | Path | duckdb.DuckDBPyConnection,
                 limits: Limits | None = None):
        self.limits = limits or Limits()
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
            failure = None
            try:
                self._con = duckdb.connect(str(path), read_only=True, config=dict(_LOCKED))
            except duckdb.Error as exc:
                failure = exc
            if failure is not None:
                raise _boundary.open_failed(f"DuckDB database {str(path)!r}", failure)
            self.name = str(path)
        self._lock = threading.Lock()
        self._collations: dict[str, set[str]] = {}

    # -- metadata ---------------------------------------------------------------------------

    def _metadata(self, table: str, sql: str, params: list) -> list[tuple]:
        failure = None
        with self._lock:
            try:
                return self._con.execute(sql, params).fetchall()
            except duckdb.Error as exc:
                failure = exc
        raise _boundary.schema_failed(self.name, table, failure)

    def columns(self, table: str) -> dict[str, str] | None:
        rows = self._metadata(
            table,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND lower(table_name) = ? "
            "ORDER BY ordinal_position",
            [table.lower()],
        )
        return {name.lower(): dtype for name, dtype in rows} or None

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        """PRIMARY KEY and UNIQUE column sets whose columns are all NOT NULL.

        A UNIQUE constraint lets any number of rows hold NULL, so it proves one row per
        key only on NOT NULL columns (a PRIMARY KEY's columns are NOT NULL implicitly).
        """
        keys = self._metadata(
            table,
            "SELECT constraint_column_names FROM duckdb_constraints() "
            "WHERE database_name = current_database() AND schema_name = current_schema() "
            "AND lower(table_name) = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
            [table.lower()])
        not_null = {name.lower() for (name,) in self._metadata(
            table,
            "SELECT column_name FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = current_schema() "
            "AND lower(table_name) = ? AND NOT is_nullable", [table.lower()])}
        out = set()
        for (cols,) in keys:
            cols = tuple(c.lower() for c in cols)
            if cols and all(c in not_null for c in cols):
                out.add(cols)
        return out

    def nonbinary_collation_columns(self, table: str) -> set[str]:
        """String columns of ``table`` whose equality and grouping are not byte-exact.

        DuckDB keeps a column's collation in its type but shows it in no metadata view,
        so it is measured: each string column's values (none: ``WHERE false``) are
        unioned with the probes of :data:`~dpsql.backends._boundary.COLLATION_PROBES`
        (pairwise different bytes); a column under which fewer of them stay distinct
        compares some different strings as equal. The union takes the column's
        collation (and a ``default_collation`` setting applies to every column). Reads
        no rows.
        """
        key = table.lower()
        if key in self._collations:
            return set(self._collations[key])
        names = self._metadata(
            table,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND lower(table_name) = ? "
            "ORDER BY ordinal_position", [key])
        strings = [(t, c) for t, c, dtype in names if dtype.upper() == "VARCHAR"]
        out: set[str] = set()
        if strings:
            actual = strings[0][0]
            columns = ", ".join(_quote(c) for _, c in strings)
            probes = ", ".join("(" + ", ".join([_literal(p)] * len(strings)) + ")"
                               for p in _boundary.COLLATION_PROBES)
            counts = ", ".join(f"count(DISTINCT {_quote(c)})" for _, c in strings)
            rows = self._metadata(
                table,
                f"SELECT {counts} FROM (SELECT {columns} FROM {_quote(actual)} WHERE false "
                f"UNION ALL SELECT * FROM (VALUES {probes}))", [])
            out = {c.lower() for (_, c), n in zip(strings, rows[0], strict=True)
                   if n != len(_boundary.COLLATION_PROBES)}
        self._collations[key] = out
        return set(out)

    # -- queries -----------------------------------------------------------------------------

    def _one_select(self, sql: str, stage: str):
        """The single SELECT statement of ``sql``, as split by DuckDB's own parser."""
        failure = None
        try:
            statements = self._con.extract_statements(sql)
        except duckdb.Error as exc:
            failure = exc
        if failure is not None:
            if stage == "check":
                raise _boundary.plan_failed(self.name, failure, sql)
            raise _boundary.run_failed(self.name, failure, sql)
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            kinds = ", ".join(s.type.name for s in statements) or "none"
            raise _boundary.not_one_select(self.name, stage, f"statements: {kinds}", sql)
        return statements[0]

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        sql = self.to_sql(expression)  # may refuse a construct (not charged)
        failure = None
        with self._lock:
            statement = self._one_select(sql, "check")
            try:
                # a relation over one SELECT statement is bound (names, types), not run
                relation = self._con.sql(statement)
                schema = [(name, str(dtype))
                          for name, dtype in zip(relation.columns, relation.types, strict=True)]
                # planning folds constants (a literal the type cannot hold fails here,
                # free); EXPLAIN of the bound relation runs nothing
                relation.explain()
                return schema
            except duckdb.Error as exc:
                failure = exc
        raise _boundary.plan_failed(self.name, failure, sql)

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        sql = self.to_sql(expression)
        failure = None
        with self._lock:
            statement = self._one_select(sql, "execute")
            try:
                cur = self._con.execute(statement)
                columns = [d[0] for d in cur.description]
                return columns, cur.fetchall()
            except duckdb.Error as exc:
                failure = exc
        raise _boundary.run_failed(self.name, failure, sql)

    def close(self) -> None:
        with self._lock:
            self._con.close()
