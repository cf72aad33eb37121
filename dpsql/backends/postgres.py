"""PostgreSQL through SQLAlchemy and psycopg 3: ``postgresql+psycopg://user@host/db``.

Least privilege: every session dpsql opens has ``default_transaction_read_only = on``
(set in the connection's startup options, so every transaction is READ ONLY), and dpsql
refuses to connect as a superuser. Give it a role of its own that can only read the
tables in the catalog::

    CREATE ROLE dpsql_reader LOGIN PASSWORD '...' NOSUPERUSER NOCREATEDB NOCREATEROLE
        NOINHERIT NOREPLICATION NOBYPASSRLS;
    ALTER ROLE dpsql_reader SET default_transaction_read_only = on;
    GRANT CONNECT ON DATABASE mydb TO dpsql_reader;
    GRANT USAGE ON SCHEMA public TO dpsql_reader;
    GRANT SELECT ON pums, pums_dup TO dpsql_reader;

Tables are looked up on the role's ``search_path`` (pick another schema with
``?options=-csearch_path%3Dmyschema`` in the URL). PostgreSQL 14 or newer is needed
(NUMERIC infinities); TRY_CAST of text to dates needs 16 (``pg_input_is_valid``).
Integer sums are exact (NUMERIC accumulators); how guarded expressions are made
error-free is described in :mod:`dpsql.backends.dialects`.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlglot import exp

from dpsql.backends import dialects
from dpsql.backends._sqlalchemy import SQLAlchemyBackend
from dpsql.errors import BackendError

#: psycopg type OIDs → DuckDB type names (the engine's vocabulary).
_OIDS = {16: "BOOLEAN", 20: "BIGINT", 21: "SMALLINT", 23: "INTEGER", 700: "FLOAT",
         701: "DOUBLE", 1700: "DECIMAL(38,10)", 25: "VARCHAR", 1043: "VARCHAR",
         1042: "VARCHAR", 18: "VARCHAR", 19: "VARCHAR", 1082: "DATE", 1114: "TIMESTAMP",
         1184: "TIMESTAMP WITH TIME ZONE", 1186: "INTERVAL"}


def duckdb_type(pg_type: str) -> str:
    """A PostgreSQL type as ``format_type`` writes it → the DuckDB type name."""
    t = pg_type.lower().strip()
    if t.startswith("numeric"):
        return "DECIMAL" + t[len("numeric"):].replace(" ", "")
    if t.startswith(("character", "text", "name", '"char"', "citext")):
        return "VARCHAR"
    if t.startswith("timestamp"):
        return "TIMESTAMP WITH TIME ZONE" if "with time zone" in t else "TIMESTAMP"
    return {"bigint": "BIGINT", "integer": "INTEGER", "smallint": "SMALLINT",
            "double precision": "DOUBLE", "real": "FLOAT", "boolean": "BOOLEAN",
            "date": "DATE", "interval": "INTERVAL"}.get(t, t.upper())


class PostgresBackend(SQLAlchemyBackend):
    dialect = "postgres"
    supports_hash = True            # hashtextextended(text, seed)
    supports_no_external_access = True  # a non-superuser role reads no server files
    supports_greatest_least = True
    supports_try = False            # the dialect layer guards each operation instead
    supports_exact_integer_sums = True
    supports_unique_constraints = True
    transforms = dialects.POSTGRES

    def __init__(self, url: str | sa.URL):
        url = sa.make_url(url)
        name = url.render_as_string(hide_password=True)
        try:
            engine = sa.create_engine(
                url, pool_pre_ping=True, pool_size=2, max_overflow=2,
                connect_args={"options": "-c default_transaction_read_only=on"})
            with engine.connect() as conn:
                ro, version, superuser = conn.execute(sa.text(
                    "SELECT current_setting('transaction_read_only'), "
                    "current_setting('server_version_num')::int, "
                    "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)")).one()
        except (sa.exc.SQLAlchemyError, ImportError) as exc:
            raise BackendError(f"cannot open PostgreSQL database {name!r}: "
                               f"{str(exc).splitlines()[0][:200]}") from None
        if ro != "on":  # pragma: no cover - the startup option guarantees it
            engine.dispose()
            raise BackendError(f"{name}: the session is not read-only")
        if superuser:
            engine.dispose()
            raise BackendError(
                f"{name}: refusing to connect as a superuser; connect as a role that can only "
                "read the catalog's tables (see the README: PostgreSQL)")
        if version < 140000:
            engine.dispose()
            raise BackendError(f"{name}: PostgreSQL 14 or newer is needed (server is "
                               f"{version // 10000})")
        self.server_version = version
        super().__init__(engine, name)
        import psycopg

        self._errors = (sa.exc.DBAPIError, psycopg.Error)

    def dialect_options(self) -> dict:
        return {"server_version": self.server_version}

    def _read_columns(self, table: str) -> dict[str, str] | None:
        rows = self._metadata(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(:t) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum", t=table)
        return {name.lower(): duckdb_type(t) for name, t in rows} or None

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        rows = self._metadata(
            "SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(:t) AND i.indisunique AND i.indpred IS NULL "
            "AND i.indexprs IS NULL GROUP BY i.indexrelid", t=table.lower())
        return {tuple(c.lower() for c in cols) for (cols,) in rows}

    def _describe(self, conn, sql: str, expression: exp.Expression) -> list[tuple[str, str]]:
        # LIMIT 0 plans (and so binds and constant-folds) the query without reading rows
        probe = exp.select(exp.Star()).from_(expression.subquery("__dpsql_check")).limit(0)
        description, _ = self._run(conn, self.to_sql(probe))
        return [(d[0], _OIDS.get(d[1], "VARCHAR")) for d in description]

    def _run(self, conn, sql: str):
        # the driver's own cursor, without parameters: '%' in the SQL stays a '%'
        with conn.connection.driver_connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.description, cursor.fetchall()
