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
error-free is described in :mod:`dpsql.backends.postgres_dialect`.

One statement, bound not executed: every query goes through the extended protocol
(Parse/Bind/Execute), which carries exactly one statement — text holding a second is
refused by the server before anything runs ("cannot insert multiple commands into a
prepared statement") — and runs as a cursor (``DECLARE ... CURSOR FOR``), which takes
a query and nothing else. The pre-charge check only *parses and describes* the query (an
unnamed prepared statement: names resolved, types known, nothing planned or run). It
does not plan it either: the planner evaluates operators on the column statistics
(most common values, histogram bounds), so a planning error can depend on the data —
``name ILIKE 'abc\\'`` fails while planning exactly when a frequent name starts with
``abc`` — and a free refusal must not. Every session has the owner's
``statement_timeout`` (:class:`~dpsql.limits.Limits`); engine error texts go to the
owner's log only (:mod:`dpsql.backends._boundary`).
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlglot import exp

from dpsql.backends import _boundary, postgres_dialect
from dpsql.backends._sqlalchemy import SQLAlchemyBackend
from dpsql.backends.postgres_total import PG_TYPES, TOTAL
from dpsql.errors import BackendError
from dpsql.limits import Limits

#: psycopg type OIDs → DuckDB type names (the engine's vocabulary).
_OIDS = {16: "BOOLEAN", 20: "BIGINT", 21: "SMALLINT", 23: "INTEGER", 700: "FLOAT",
         701: "DOUBLE", 1700: "DECIMAL(38,10)", 25: "VARCHAR", 1043: "VARCHAR",
         1042: "VARCHAR", 18: "VARCHAR", 19: "VARCHAR", 1082: "DATE", 1114: "TIMESTAMP",
         1184: "TIMESTAMP WITH TIME ZONE", 1186: "INTERVAL"}


def duckdb_type(pg_type: str) -> str:
    """A PostgreSQL type as ``format_type`` writes it → the DuckDB type name."""
    t = pg_type.lower().strip()
    if t.endswith("]"):  # an array (``text[]``) stays one: the schema check refuses it
        return t.upper()
    if re.fullmatch(r"numeric(\(\d+(, ?-?\d+)?\))?", t):
        return "DECIMAL" + t[len("numeric"):].replace(" ", "")
    # whole names only: an owner's type or domain whose name starts with one (a domain
    # text_tsv over tsvector) is not text (attack review)
    if re.fullmatch(r'(character( varying)?|varchar|char|bpchar)(\(\d+\))?|text|name|"char"'
                    r'|citext', t):
        return "VARCHAR"
    if re.fullmatch(r"timestamp(\(\d\))? with(out)? time zone|timestamp(\(\d\))?", t):
        return "TIMESTAMP WITH TIME ZONE" if "with time zone" in t else "TIMESTAMP"
    return {"bigint": "BIGINT", "integer": "INTEGER", "smallint": "SMALLINT",
            "double precision": "DOUBLE", "real": "FLOAT", "boolean": "BOOLEAN",
            "date": "DATE", "interval": "INTERVAL"}.get(t, t.upper())


class PreparationError(Exception):
    """The server refused to parse or describe a statement (the text is for the owner's
    log only)."""


def session_options(owner_options: str | tuple | None, limits: Limits) -> str:
    """The libpq ``options`` of dpsql's sessions: the statement timeout, the owner's own
    options from the URL (they may change it), and read-only transactions last, so that
    nothing before can turn them off."""
    parts = []
    seconds = limits.statement_timeout_seconds
    if seconds > 0:
        parts.append(f"-c statement_timeout={max(1, round(seconds * 1000))}")
    if isinstance(owner_options, tuple):
        owner_options = " ".join(owner_options)
    if owner_options:
        parts.append(owner_options)
    # dpsql reads every row of its cursors: plan them as plain queries, not for the
    # first rows (the default fraction, 0.1, favours fast-start plans)
    parts.append("-c cursor_tuple_fraction=1")
    parts.append("-c default_transaction_read_only=on")
    return " ".join(parts)


def _refuse_nul(sql: str) -> None:
    # libpq sends C strings: a NUL would silently end the statement early, so the text
    # run would not be the text checked
    if "\x00" in sql:
        raise PreparationError("the SQL text holds a NUL character")


def _prepared_fields(raw, sql: str, typmods: bool = False) -> list[tuple]:
    """Parses and describes ``sql`` as the unnamed prepared statement of the psycopg
    connection ``raw``: one statement (the protocol carries no more), bound, not
    planned, not run. Returns its (column name, type OID)s."""
    from psycopg import pq

    _refuse_nul(sql)
    encoding = raw.info.encoding
    pgconn = raw.pgconn
    for result in (pgconn.prepare(b"", sql.encode(encoding)),
                   pgconn.describe_prepared(b"")):
        if result.status != pq.ExecStatus.COMMAND_OK:
            raise PreparationError(result.error_message.decode(encoding, "replace").strip())
    if typmods:
        return [(result.fname(i).decode(encoding), result.ftype(i), result.fmod(i))
                for i in range(result.nfields)]
    return [(result.fname(i).decode(encoding), result.ftype(i))
            for i in range(result.nfields)]


class PostgresBackend(SQLAlchemyBackend):
    dialect = "postgres"
    supports_hash = True            # hash_record_extended((uid, keys), seed)
    supports_no_external_access = True  # a non-superuser role reads no server files
    supports_greatest_least = True
    supports_try = False            # the dialect layer guards each operation instead
    supports_exact_integer_sums = True
    supports_exact_summands = False  # NUMERIC sums of floats (postgres_sums)
    supports_unique_constraints = True
    transforms = postgres_dialect.POSTGRES
    functions = postgres_dialect.FUNCTIONS
    pre_transforms = (postgres_dialect.postgres_hash,)

    def __init__(self, url: str | sa.URL, limits: Limits | None = None):
        url = sa.make_url(url)
        limits = limits or Limits()
        name = url.render_as_string(hide_password=True)
        # the owner's URL options (e.g. a search_path) are kept: connect_args would
        # otherwise replace them
        options = session_options(url.query.get("options"), limits)
        url = url.difference_update_query(["options"])
        failure = None
        try:
            engine = sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2,
                                      connect_args={"options": options})
            with engine.connect() as conn:
                ro, version, superuser = conn.execute(sa.text(
                    "SELECT current_setting('transaction_read_only'), "
                    "current_setting('server_version_num')::int, "
                    "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)")).one()
        except (sa.exc.SQLAlchemyError, ImportError) as exc:
            failure = exc
        if failure is not None:
            raise _boundary.open_failed(f"PostgreSQL database {name!r}", failure)
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
        super().__init__(engine, name, limits)
        import psycopg

        self._errors = SQLAlchemyBackend._errors + (psycopg.Error, PreparationError)

    #: The relations, columns (type, NOT NULL, collation), indexes, inheritance, views'
    #: definitions and domains of the schemas on the search path, the search path itself
    #: and the settings that change how constants are read (dates, intervals, numbers),
    #: hashed on the server (one row). No '%' in the text: psycopg would read it.
    schema_sql = (
        "WITH s AS (SELECT n.oid FROM pg_namespace n "
        "WHERE n.nspname = ANY (current_schemas(false))), "
        "r AS (SELECT c.oid, c.relname, c.relkind FROM pg_class c "
        "WHERE c.relnamespace IN (SELECT oid FROM s)), "
        "parts AS ("
        "SELECT concat_ws('|', 'c', r.oid, r.relname, r.relkind, a.attnum, a.attname, "
        "format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attcollation) AS x "
        "FROM r JOIN pg_attribute a ON a.attrelid = r.oid "
        "WHERE a.attnum > 0 AND NOT a.attisdropped "
        "UNION ALL SELECT concat_ws('|', 'i', i.indexrelid, i.indrelid, i.indisunique, "
        "i.indkey, i.indpred IS NULL, i.indexprs IS NULL) FROM pg_index i "
        "WHERE i.indrelid IN (SELECT oid FROM r) "
        "UNION ALL SELECT concat_ws('|', 'h', h.inhrelid, h.inhparent) FROM pg_inherits h "
        "WHERE h.inhrelid IN (SELECT oid FROM r) OR h.inhparent IN (SELECT oid FROM r) "
        "UNION ALL SELECT concat_ws('|', 'v', r.oid, pg_get_viewdef(r.oid)) FROM r "
        "WHERE r.relkind IN ('v', 'm') "
        "UNION ALL SELECT concat_ws('|', 'd', t.oid, t.typname, t.typbasetype, t.typtypmod, "
        "t.typcollation, t.typnotnull) FROM pg_type t WHERE t.typtype = 'd' "
        "UNION ALL SELECT concat_ws('|', 'k', k.oid, k.contypid, pg_get_constraintdef(k.oid)) "
        "FROM pg_constraint k WHERE k.contypid <> 0 "
        "UNION ALL SELECT concat_ws('|', 'p', current_setting('search_path'), "
        "current_setting('DateStyle'), current_setting('IntervalStyle'), "
        "current_setting('TimeZone'), current_setting('lc_numeric'), "
        "current_setting('lc_time'), current_setting('standard_conforming_strings'))) "
        "SELECT md5(string_agg(x, ',' ORDER BY x)) FROM parts")

    def dialect_options(self) -> dict:
        return {"server_version": self.server_version}

    def _read_columns(self, table: str) -> dict[str, str] | None:
        rows = self._metadata(
            table,
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(:t) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum", t=table)
        return {name.lower(): duckdb_type(t) for name, t in rows} or None

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        """Column sets of valid, total, plain unique indexes (PRIMARY KEY, UNIQUE) whose
        columns are all NOT NULL.

        A UNIQUE index lets any number of rows hold NULL; an invalid one (a failed
        ``CREATE INDEX CONCURRENTLY``) may sit over duplicates; a partial or expression
        index says nothing about the column. A table with inheritance children reads
        their rows too, which its own indexes do not cover (a partitioned table's unique
        index covers every partition, and is kept).
        """
        rows = self._metadata(
            table,
            "SELECT array_agg(a.attname::text ORDER BY k.ord), bool_and(a.attnotnull) "
            "FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "JOIN pg_class c ON c.oid = i.indrelid "
            "WHERE i.indrelid = to_regclass(:t) AND i.indisunique AND i.indisvalid "
            "AND i.indislive AND i.indpred IS NULL AND i.indexprs IS NULL "
            "AND (c.relkind = 'p' OR NOT EXISTS "
            "     (SELECT 1 FROM pg_inherits h WHERE h.inhparent = i.indrelid)) "
            "GROUP BY i.indexrelid", t=table.lower())
        return {tuple(c.lower() for c in cols) for cols, not_null in rows if not_null}

    def _read_collations(self, table: str) -> set[str]:
        """Columns with a nondeterministic collation (``pg_collation.collisdeterministic``
        false: equal strings need not be equal bytes) or of type ``citext`` (or a domain
        over it), whose equality ignores case whatever the collation."""
        rows = self._metadata(
            table,
            "WITH RECURSIVE types(attname, typ) AS ("
            "  SELECT a.attname, a.atttypid FROM pg_attribute a "
            "  WHERE a.attrelid = to_regclass(:t) AND a.attnum > 0 AND NOT a.attisdropped "
            "  UNION ALL SELECT types.attname, t.typbasetype FROM types "
            "  JOIN pg_type t ON t.oid = types.typ WHERE t.typtype = 'd') "
            "SELECT a.attname FROM pg_attribute a JOIN pg_collation c "
            "  ON c.oid = a.attcollation "
            "WHERE a.attrelid = to_regclass(:t) AND a.attnum > 0 AND NOT a.attisdropped "
            "  AND NOT c.collisdeterministic "
            "UNION SELECT types.attname FROM types JOIN pg_type t ON t.oid = types.typ "
            "WHERE t.typname = 'citext'", t=table.lower())
        return {name.lower() for (name,) in rows}

    def _describe(self, conn, sql: str, expression: exp.Expression) -> list[tuple[str, str]]:
        # Parse + Describe: one statement, bound, neither planned nor run (see the module
        # docstring for why it is not planned)
        fields = _prepared_fields(conn.connection.driver_connection, sql)
        if not fields:
            raise PreparationError("the statement returns no rows")
        return [(name, _OIDS.get(oid, "VARCHAR")) for name, oid in fields]

    def _run(self, conn, sql: str):
        # A server-side cursor: psycopg sends DECLARE ... CURSOR FOR <sql> through the
        # extended protocol (one statement: a second is refused by the server), and
        # DECLARE takes nothing but a query (no SET, no utility statement, no
        # data-modifying WITH), then FETCH ALL reads it. No parameters: '%' stays '%'.
        _refuse_nul(sql)
        with conn.connection.driver_connection.cursor(name="dpsql_query") as cursor:
            cursor.execute(sql)
            return cursor.description, cursor.fetchall()


def _pg_bind_types(raw, sql: str) -> list[str | None]:
    out = []
    for _, oid, typmod in _prepared_fields(raw, sql, typmods=True):
        name = PG_TYPES.get(oid)
        if name == "NUMERIC" and typmod >= 4:  # ((precision << 16) | scale) + 4
            name = f"NUMERIC({(typmod - 4) >> 16},{(typmod - 4) & 0xFFFF})"
        out.append(name)
    return out


PostgresBackend.allow = TOTAL
PostgresBackend.bind_types = lambda self, sql: self._call(
    lambda conn: _pg_bind_types(conn.connection.driver_connection, sql),
    lambda exc: ValueError("the probe did not bind"))  # no type: the node is guarded


# -- how ``dpsql.connect`` reaches this engine (the registry: :mod:`dpsql.backends`) --------


def from_url(url: sa.URL, limits: Limits | None = None) -> PostgresBackend:
    """``postgresql+psycopg://user@host/db`` (psycopg 3; ``postgresql://`` means it too)."""
    if url.get_driver_name() not in ("psycopg", "psycopg2", ""):
        raise BackendError("PostgreSQL URLs use psycopg 3: postgresql+psycopg://...")
    if url.get_driver_name() != "psycopg":
        url = url.set(drivername="postgresql+psycopg")
    return PostgresBackend(url, limits)
