"""A SQLAlchemy 2.x dialect, ``dpsql.duckdb``, over :mod:`dpsql.dbapi`.

URL::

    dpsql+duckdb:///path/to/file.duckdb?catalog=/path/catalog.yaml&epsilon=0.5&delta=1e-6
        &ledger=/path/ledger.sqlite&analyst=alice&budget_epsilon=1&budget_delta=1e-6

(three slashes and a relative path, four for an absolute one). Query keys: ``catalog``
(required unless the service pins it with ``DPSQL_CATALOG``), ``epsilon``, ``delta``,
``max_groups``, ``max_rows`` (the cursors' per-query defaults), ``ledger``,
``analyst``, ``alpha``, ``budget_epsilon`` / ``budget_delta`` (the ``budget=``
cap), and ``error_columns=true`` (each error bar as a column ``<name>_error`` and the
level as ``confidence``, see :mod:`dpsql.dbapi`; ``true``/``false``, ``1``/``0``), and
``intervals=true`` (also each interval's ends, ``<name>_low`` and ``<name>_high``).
Unknown keys are refused. Whoever writes the URL chooses these, so a service whose
analysts write URLs pins the catalog, the database, the ledger and the analyst (see
:mod:`dpsql.ledger`): a URL that names another (another database file is compared by
device and inode) is refused when it connects (``sqlalchemy.exc.OperationalError``
wrapping a :class:`dpsql.LedgerError`).

With two slashes, ``dpsql+duckdb://pums.duckdb``, SQLAlchemy reads ``pums.duckdb`` as a
host and no database: refused, never an empty in-memory database.

Every statement SQLAlchemy sends is a private, charged query, so ``pandas.read_sql``
and ``select(func.count()).select_from(table)`` work as usual. Table reflection
(``inspect(engine)``, ``Table(..., autoload_with=engine)``, jupysql's ``%sqlcmd
tables`` and ``%sqlcmd columns``) comes from the catalog, never from the database, and
is free: one schema, ``main``, the catalog's tables, their columns and types (bounds and
public values as column comments), no keys, no indexes, no views. The catalog is public
metadata, so none of it costs budget or reads a row. The probes SQLAlchemy makes when
it connects (server version, default schema, isolation level, ping) are answered here
without sending any SQL, and commit/rollback do nothing (a rollback never refunds
budget). The backend connection is never exposed: the DB-API connection SQLAlchemy
pools is a :class:`dpsql.dbapi.Connection`.

Registered by the entry point ``"dpsql.duckdb" =
"dpsql.sqlalchemy_dialect:DpsqlDuckDBDialect"``, or by hand:

>>> from sqlalchemy.dialects import registry
>>> registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")
>>> from sqlalchemy.engine import make_url
>>> url = make_url("dpsql+duckdb:///pums.duckdb?catalog=pums.yaml&epsilon=0.5&budget_epsilon=2")
>>> DpsqlDuckDBDialect().create_connect_args(url)
([], {'database': 'pums.duckdb', 'catalog': 'pums.yaml', 'epsilon': 0.5, 'budget': (2.0, 0.0)})
"""

from __future__ import annotations

import os
import re
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import types as sqltypes
from sqlalchemy.engine import default
from sqlalchemy.sql import compiler

import dpsql
from dpsql import dbapi as _dbapi
from dpsql.errors import DpsqlError
from dpsql.ledger import CATALOG_ENV

#: Catalog type → SQLAlchemy type reported by reflection.
CATALOG_TYPES: dict[str, type[sqltypes.TypeEngine]] = {
    "int": sqltypes.BigInteger,
    "float": sqltypes.Double,
    "string": sqltypes.String,
    "bool": sqltypes.Boolean,
    "date": sqltypes.Date,
    "timestamp": sqltypes.DateTime,
}

#: The one schema reflection reports (DuckDB's default); the catalog's tables live in it.
SCHEMA = "main"

_FLOAT_KEYS = ("epsilon", "delta", "alpha")
_INT_KEYS = ("max_groups", "max_rows")
_STR_KEYS = ("catalog", "ledger", "analyst")
_BUDGET_KEYS = ("budget_epsilon", "budget_delta")
_BOOL_KEYS = ("error_columns", "intervals")
_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _writes_refused(what: str) -> sa_exc.CompileError:
    return sa_exc.CompileError(
        f"writes are not allowed: dpsql answers aggregate SELECT queries privately and "
        f"never changes the database ({what} refused before anything was sent; nothing "
        "was charged)")


class DpsqlCompiler(compiler.SQLCompiler):
    """SQLAlchemy's SQL compiler, refusing INSERT, UPDATE and DELETE as it compiles them.

    So ``DataFrame.to_sql`` (one row or many, ``method="multi"`` included) and ORM
    flushes fail with "writes are not allowed" before any SQL is sent, not with a
    message about epsilon, budgets or ``executemany``.
    """

    def visit_insert(self, insert_stmt, *args, **kw):
        raise _writes_refused(f"INSERT INTO {getattr(insert_stmt.table, 'name', 'a table')}")

    def visit_update(self, update_stmt, *args, **kw):
        raise _writes_refused(f"UPDATE {getattr(update_stmt.table, 'name', 'a table')}")

    def visit_delete(self, delete_stmt, *args, **kw):
        raise _writes_refused(f"DELETE FROM {getattr(delete_stmt.table, 'name', 'a table')}")


class DpsqlDDLCompiler(compiler.DDLCompiler):
    """Refuses every DDL statement (CREATE/DROP TABLE, indexes, ...) as it compiles."""

    def process(self, obj, **kwargs):
        words = re.sub(r"(?<!^)(?=[A-Z])", " ", type(obj).__name__).upper()  # CREATE TABLE
        target = getattr(getattr(obj, "element", None), "name", None)
        raise _writes_refused(f"{words} {target}" if isinstance(target, str) else words)


class DpsqlDuckDBDialect(default.DefaultDialect):
    """SQLAlchemy dialect ``dpsql+duckdb``: private aggregate queries over DuckDB."""

    name = "dpsql"
    driver = "duckdb"
    statement_compiler = DpsqlCompiler
    ddl_compiler = DpsqlDDLCompiler
    # Statements compile with SQLAlchemy's generic compiler and no per-dialect state, so
    # caching compiled forms is safe.
    supports_statement_cache = True
    default_paramstyle = "qmark"
    supports_native_boolean = True
    supports_native_decimal = True
    div_is_floordiv = False
    supports_alter = False
    supports_sequences = False
    supports_default_values = False
    supports_empty_insert = False
    supports_multivalues_insert = False
    supports_server_side_cursors = False
    supports_comments = True
    postfetch_lastrowid = False
    implicit_returning = False
    insert_returning = update_returning = delete_returning = False
    max_identifier_length = 255

    @classmethod
    def engine_created(cls, engine) -> None:
        """Gives SQLAlchemy's wrapper of a dpsql error the error's one-line display.

        SQLAlchemy re-raises a driver error as ``sqlalchemy.exc.ProgrammingError`` (and
        kin) with the statement appended; IPython shows such an error from a client that
        does not catch it (jupysql's ``%sqlcmd profile``, ``%sqlplot``) as a traceback of
        a few hundred lines. The wrapper keeps its class, message and chain; it only gets
        the ``_render_traceback_`` of the dpsql error it wraps
        (:meth:`dpsql.errors.DpsqlError._render_traceback_`).
        """
        from sqlalchemy import event

        @event.listens_for(engine, "handle_error")
        def _one_line(context) -> None:
            original = context.original_exception
            wrapper = context.sqlalchemy_exception
            if isinstance(original, DpsqlError) and wrapper is not None:
                wrapper._render_traceback_ = original._render_traceback_

    @classmethod
    def import_dbapi(cls):
        """The DB-API module: :mod:`dpsql.dbapi`."""
        return _dbapi

    def create_connect_args(self, url) -> tuple[list, dict[str, Any]]:
        """Turns the URL into :func:`dpsql.dbapi.connect` arguments.

        Raises:
            sqlalchemy.exc.ArgumentError: an unknown query key, a missing catalog, or a
                value that is not a number where one is needed.
        """
        query = dict(url.query)
        known = {*_FLOAT_KEYS, *_INT_KEYS, *_STR_KEYS, *_BUDGET_KEYS, *_BOOL_KEYS}
        unknown = sorted(set(query) - known)
        if unknown:
            raise sa_exc.ArgumentError(
                f"unknown dpsql URL parameter(s) {', '.join(unknown)}; known: "
                + ", ".join(sorted(known))
            )
        if url.host or url.port or url.username or url.password:
            # dpsql+duckdb://pums.duckdb: SQLAlchemy reads pums.duckdb as a host and no
            # database at all, which must not become an empty in-memory database
            raise sa_exc.ArgumentError(
                f"{url.drivername}://{url.host or ''} names a host "
                f"({url.host!r}), not a file: a DuckDB file comes after three slashes, "
                f"{url.drivername}:///{url.host or 'file.duckdb'} (relative) or "
                f"{url.drivername}:////absolute/path.duckdb")
        if "catalog" not in query and not os.environ.get(CATALOG_ENV):
            raise sa_exc.ArgumentError("a dpsql URL needs ?catalog=/path/to/catalog.yaml")
        args: dict[str, Any] = {"database": url.database or ":memory:"}
        for key, value in query.items():
            if isinstance(value, tuple):
                raise sa_exc.ArgumentError(f"dpsql URL parameter {key} is given twice")
            if key in _STR_KEYS:
                args[key] = value
            elif key in _FLOAT_KEYS:
                args[key] = _number(key, value, float)
            elif key in _INT_KEYS:
                args[key] = _number(key, value, int)
            elif key in _BOOL_KEYS:
                if value.lower() not in _BOOLS:
                    raise sa_exc.ArgumentError(
                        f"dpsql URL parameter {key}={value[:40]!r} is not true or false")
                args[key] = _BOOLS[value.lower()]
        if any(k in query for k in _BUDGET_KEYS):
            args["budget"] = (_number("budget_epsilon", query.get("budget_epsilon", "0"), float),
                              _number("budget_delta", query.get("budget_delta", "0"), float))
        return [], args

    # -- probes on connect: answered without SQL --------------------------------------

    def initialize(self, connection) -> None:
        """First-connect set-up; every hook it calls is answered here without SQL."""
        super().initialize(connection)

    def _get_server_version_info(self, connection) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", dpsql.__version__)[:3])

    def _get_default_schema_name(self, connection) -> str:
        return SCHEMA

    def get_isolation_level(self, dbapi_connection) -> str:
        return "AUTOCOMMIT"

    def get_default_isolation_level(self, dbapi_connection) -> str:
        return "AUTOCOMMIT"

    def get_isolation_level_values(self, dbapi_connection) -> list[str]:
        return ["AUTOCOMMIT"]

    def set_isolation_level(self, dbapi_connection, level) -> None:
        """Nothing to set: every query is final once answered (``AUTOCOMMIT``)."""

    def detect_autocommit_setting(self, dbapi_connection) -> bool:
        return True

    def do_ping(self, dbapi_connection) -> bool:
        """Whether the DB-API connection is open; sends no query."""
        return not dbapi_connection.closed

    def is_disconnect(self, e, connection, cursor) -> bool:
        return isinstance(e, _dbapi.InterfaceError) and str(e) == "connection is closed"

    def do_begin(self, dbapi_connection) -> None:
        """No transactions."""

    def do_commit(self, dbapi_connection) -> None:
        """Nothing to commit: the ledger records each charge when the query runs."""

    def do_rollback(self, dbapi_connection) -> None:
        """Nothing to roll back, and no budget is refunded."""

    def do_executemany(self, cursor, statement, parameters, context=None) -> None:
        cursor.executemany(statement, parameters)  # refused with NotSupportedError

    # -- reflection: from the catalog only --------------------------------------------

    @staticmethod
    def _catalog(connection):
        return connection.connection.dbapi_connection.catalog

    def _table(self, connection, table_name: str, schema: str | None):
        catalog = self._catalog(connection)
        if not _our_schema(schema) or not catalog.has_table(table_name):
            raise sa_exc.NoSuchTableError(table_name)
        return catalog.table(table_name)

    def get_schema_names(self, connection, **kw) -> list[str]:
        """One schema, ``main`` (DuckDB's default), holding the catalog's tables."""
        return [SCHEMA]

    def has_schema(self, connection, schema_name, **kw) -> bool:
        return _our_schema(schema_name)

    def get_table_names(self, connection, schema=None, **kw) -> list[str]:
        if not _our_schema(schema):
            return []
        return sorted(self._catalog(connection).tables)

    def has_table(self, connection, table_name, schema=None, **kw) -> bool:
        return _our_schema(schema) and self._catalog(connection).has_table(table_name)

    def get_columns(self, connection, table_name, schema=None, **kw) -> list[dict]:
        table = self._table(connection, table_name, schema)
        return [{
            "name": col.name,
            "type": CATALOG_TYPES[col.type](),
            "nullable": col.nullable,
            "default": None,
            "autoincrement": False,
            "comment": _column_comment(col),
        } for col in table.columns.values()]

    def get_pk_constraint(self, connection, table_name, schema=None, **kw) -> dict:
        self._table(connection, table_name, schema)
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(self, connection, table_name, schema=None, **kw) -> list:
        self._table(connection, table_name, schema)
        return []

    def get_indexes(self, connection, table_name, schema=None, **kw) -> list:
        self._table(connection, table_name, schema)
        return []

    def get_unique_constraints(self, connection, table_name, schema=None, **kw) -> list:
        self._table(connection, table_name, schema)
        return []

    def get_check_constraints(self, connection, table_name, schema=None, **kw) -> list:
        self._table(connection, table_name, schema)
        return []

    def get_table_comment(self, connection, table_name, schema=None, **kw) -> dict:
        table = self._table(connection, table_name, schema)
        if table.public:
            unit = "public table"
        elif table.row_privacy:
            unit = "each row is one person"
        else:
            unit = f"user key {table.user_key}"
        return {"text": f"dpsql: {unit}; max_groups={table.max_groups}, "
                        f"max_rows={table.max_rows}"}

    def get_view_names(self, connection, schema=None, **kw) -> list[str]:
        return []

    def get_materialized_view_names(self, connection, schema=None, **kw) -> list[str]:
        return []

    def get_temp_table_names(self, connection, schema=None, **kw) -> list[str]:
        return []

    def get_temp_view_names(self, connection, schema=None, **kw) -> list[str]:
        return []

    def get_sequence_names(self, connection, schema=None, **kw) -> list[str]:
        return []

    def has_sequence(self, connection, sequence_name, schema=None, **kw) -> bool:
        return False

    def get_view_definition(self, connection, view_name, schema=None, **kw):
        raise sa_exc.NoSuchTableError(view_name)


def _our_schema(schema: str | None) -> bool:
    """Whether ``schema`` names the catalog's tables: none given, or ``main``."""
    return schema is None or (isinstance(schema, str) and schema.lower() == SCHEMA)


def _number(key: str, text: str, kind: type) -> Any:
    try:
        return kind(text)
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        raise sa_exc.ArgumentError(f"dpsql URL parameter {key}={text!r} is not {what}") from None


def _column_comment(col) -> str | None:
    parts = []
    if col.lower is not None or col.upper is not None:
        parts.append(f"bounds [{col.lower}, {col.upper}]")
    if col.values is not None:
        shown = ", ".join(map(str, col.values[:10])) + (", ..." if len(col.values) > 10 else "")
        parts.append(f"public values [{shown}]")
    return "; ".join(parts) or None


dialect = DpsqlDuckDBDialect

__all__ = ["CATALOG_TYPES", "DpsqlDuckDBDialect", "dialect"]
