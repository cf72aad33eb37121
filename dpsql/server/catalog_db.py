"""The probe database: an in-memory DuckDB with the catalog's tables, empty, and
PostgreSQL 15's ``pg_catalog`` as the SQL tools read it.

DuckDB emulates much of ``pg_catalog`` with PostgreSQL's type OIDs; what it lacks is
added here as table macros in the ``public`` schema (a table would show up in
``pg_class`` itself): empty stand-ins (``dpsql_pg_roles()``...), PostgreSQL 15's columns
of the tables clients read (``dpsql_pg_class()``...), one database (the data set), and
the functions clients call (``pg_get_userbyid``...). :mod:`~dpsql.server.catalog_rewrite`
points a probe at these names. Nothing here is derived from private data.

The database is locked down before any probe runs: no file or network access, no
extension loading, configuration locked, one thread, a memory cap.
"""

from __future__ import annotations

import duckdb
from sqlglot import exp

import dpsql
from dpsql.catalog import Catalog

#: ``server_version`` as reported to clients: PostgreSQL 15's protocol and catalog.
SERVER_VERSION = "15.0"
VERSION_TEXT = (f"PostgreSQL {SERVER_VERSION} (dpsql {dpsql.__version__}: differentially "
                "private answers; not a PostgreSQL server)")

_DUCK_TYPES = {"int": "BIGINT", "float": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN",
               "date": "DATE", "timestamp": "TIMESTAMP"}


#: Empty stand-ins for ``pg_catalog`` tables DuckDB lacks: table macros
#: ``dpsql_<name>()`` (a table would show up in ``pg_class`` itself).
_STANDINS = {
    "pg_roles": "rolname VARCHAR, rolsuper BOOLEAN, rolinherit BOOLEAN, "
                "rolcreaterole BOOLEAN, rolcreatedb BOOLEAN, rolcanlogin BOOLEAN, "
                "rolreplication BOOLEAN, rolconnlimit INTEGER, rolvaliduntil TIMESTAMP, "
                "rolbypassrls BOOLEAN, oid BIGINT, rolconfig VARCHAR[]",
    "pg_user": "usename VARCHAR, usesysid BIGINT, usecreatedb BOOLEAN, usesuper BOOLEAN",
    "pg_authid": "oid BIGINT, rolname VARCHAR",
    "pg_auth_members": "roleid BIGINT, member BIGINT, grantor BIGINT, admin_option BOOLEAN",
    "pg_inherits": "inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER, "
                   "inhdetachpending BOOLEAN",
    "pg_trigger": "oid BIGINT, tgrelid BIGINT, tgname VARCHAR, tgfoid BIGINT, "
                  "tgenabled VARCHAR, tgisinternal BOOLEAN, tgparentid BIGINT",
    "pg_rewrite": "oid BIGINT, rulename VARCHAR, ev_class BIGINT",
    "pg_policy": "oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR, "
                 "polpermissive BOOLEAN, polroles BIGINT[], polqual VARCHAR, "
                 "polwithcheck VARCHAR",
    "pg_statistic_ext": "oid BIGINT, stxrelid BIGINT, stxname VARCHAR, "
                        "stxnamespace BIGINT, stxowner BIGINT, stxkeys INTEGER[], "
                        "stxkind VARCHAR[], stxstattarget INTEGER",
    "pg_publication": "oid BIGINT, pubname VARCHAR, puballtables BOOLEAN",
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR, "
                          "prattrs SMALLINT[]",
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_foreign_table": "ftrelid BIGINT, ftserver BIGINT, ftoptions VARCHAR[]",
    "pg_foreign_server": "oid BIGINT, srvname VARCHAR",
    "pg_partitioned_table": "partrelid BIGINT, partstrat VARCHAR",
    "pg_range": "rngtypid BIGINT, rngsubtype BIGINT",
    "pg_extension": "oid BIGINT, extname VARCHAR, extowner BIGINT, extnamespace BIGINT, "
                    "extrelocatable BOOLEAN, extversion VARCHAR, extconfig BIGINT[], "
                    "extcondition VARCHAR[]",
    "pg_event_trigger": "oid BIGINT, evtname VARCHAR",
    "pg_stat_user_tables": "relid BIGINT, schemaname VARCHAR, relname VARCHAR, "
                           "seq_scan BIGINT, n_live_tup BIGINT, n_dead_tup BIGINT",
    "pg_stat_all_tables": "relid BIGINT, schemaname VARCHAR, relname VARCHAR, "
                          "seq_scan BIGINT, n_live_tup BIGINT, n_dead_tup BIGINT",
    "pg_operator": "oid BIGINT, oprname VARCHAR, oprleft BIGINT, oprright BIGINT, "
                   "oprresult BIGINT, oprnamespace BIGINT",
    "pg_language": "oid BIGINT, lanname VARCHAR",
    "pg_opclass": "oid BIGINT, opcmethod BIGINT, opcname VARCHAR, opcnamespace BIGINT, "
                  "opcowner BIGINT, opcfamily BIGINT, opcintype BIGINT, "
                  "opcdefault BOOLEAN, opckeytype BIGINT",
    "pg_stat_activity": "datname VARCHAR, pid INTEGER, usename VARCHAR, "
                        "application_name VARCHAR, state VARCHAR, query VARCHAR",
    "pg_locks": "locktype VARCHAR, pid INTEGER, mode VARCHAR, granted BOOLEAN",
    "pg_timezone_names": "name VARCHAR, abbrev VARCHAR, utc_offset VARCHAR, "
                         "is_dst BOOLEAN",
    "pg_matviews": "schemaname VARCHAR, matviewname VARCHAR, matviewowner VARCHAR, "
                   "definition VARCHAR",
    "pg_shdescription": "objoid BIGINT, classoid BIGINT, description VARCHAR",
    "pg_seclabel": "objoid BIGINT, classoid BIGINT, objsubid INTEGER, provider VARCHAR, "
                   "label VARCHAR",
    "pg_attribute_encodings": "attrelid BIGINT",
}

#: Functions DuckDB lacks, as macros in the search path (answers that hold here).
_MACROS = [
    "pg_get_userbyid(x) AS 'dpsql'",
    "pg_encoding_to_char(x) AS 'UTF8'",
    "pg_relation_size(x) AS 0",
    "pg_total_relation_size(x) AS 0",
    "pg_table_size(x) AS 0",
    "pg_indexes_size(x) AS 0",
    "pg_get_partkeydef(x) AS NULL",
    "pg_get_statisticsobjdef_columns(x) AS NULL",
    "pg_get_indexdef(a, b := 0, c := false) AS NULL",
    "pg_get_triggerdef(a, b := false) AS NULL",
    "pg_get_function_result(x) AS NULL",
    "pg_get_function_arguments(x) AS NULL",
    "pg_get_function_identity_arguments(x) AS NULL",
    "pg_get_serial_sequence(a, b) AS NULL",
    "pg_backend_pid() AS 0",
    "pg_database_size(x) AS 0",
    "pg_tablespace_location(x) AS ''",
    "pg_stat_get_numscans(x) AS 0",
    "pg_get_ruledef(a, b := false) AS NULL",
    "pg_relation_is_publishable(x) AS false",
    # PostgreSQL's names (SQLAlchemy and JDBC map types by them), not DuckDB's short ones
    "dpsql_format_type(t, m) AS CASE t WHEN 20 THEN 'bigint' WHEN 23 THEN 'integer' "
    "WHEN 21 THEN 'smallint' WHEN 701 THEN 'double precision' WHEN 700 THEN 'real' "
    "WHEN 25 THEN 'text' WHEN 1043 THEN 'character varying' WHEN 16 THEN 'boolean' "
    "WHEN 1082 THEN 'date' WHEN 1114 THEN 'timestamp without time zone' "
    "WHEN 1184 THEN 'timestamp with time zone' WHEN 1083 THEN 'time without time zone' "
    "WHEN 1700 THEN 'numeric' WHEN 17 THEN 'bytea' ELSE format_type(t, m) END",
    "to_regtype(x) AS (SELECT t.oid FROM pg_catalog.pg_type t WHERE t.typname = "
    "regexp_replace(lower(x::VARCHAR), '^pg_catalog\\.', '') LIMIT 1)",
    "to_regclass(x) AS (SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = "
    "trim(regexp_replace(x::VARCHAR, '^.*\\.', ''), '\"') LIMIT 1)",
    "has_any_column_privilege(u, t, p := NULL) AS true",
    "has_column_privilege(u, t, c := NULL, p := NULL) AS true",
    "array_upper(a, d) AS len(a)",
    "array_lower(a, d) AS 1",
    "pg_is_in_recovery() AS false",
    # the settings clients read (DuckDB's own current_setting knows none of them)
    "dpsql_current_setting(x) AS CASE lower(x::VARCHAR) "
    "WHEN 'default_table_access_method' THEN 'heap' "
    f"WHEN 'server_version' THEN '{SERVER_VERSION}' "
    "WHEN 'server_version_num' THEN '150000' WHEN 'server_encoding' THEN 'UTF8' "
    "WHEN 'client_encoding' THEN 'UTF8' WHEN 'standard_conforming_strings' THEN 'on' "
    "WHEN 'search_path' THEN '\"$user\", public' WHEN 'max_identifier_length' THEN '63' "
    "WHEN 'datestyle' THEN 'ISO, MDY' WHEN 'timezone' THEN 'UTC' "
    "WHEN 'integer_datetimes' THEN 'on' WHEN 'lc_collate' THEN 'C' "
    "WHEN 'lc_ctype' THEN 'C' WHEN 'transaction_isolation' THEN 'read committed' "
    "WHEN 'transaction_read_only' THEN 'on' WHEN 'is_superuser' THEN 'off' "
    "ELSE NULL END",
    "txid_current() AS 0",
    "array_length(a, d) AS len(a)",
    "pg_get_keywords() AS TABLE SELECT NULL::VARCHAR AS word, NULL::VARCHAR AS catcode, "
    "NULL::VARCHAR AS catdesc WHERE false",
]


#: DuckDB's type name → PostgreSQL's (information_schema ``data_type``, ``udt_name``).
_PG_TYPE_NAMES = {"BIGINT": ("bigint", "int8"), "INTEGER": ("integer", "int4"),
                  "SMALLINT": ("smallint", "int2"), "DOUBLE": ("double precision", "float8"),
                  "FLOAT": ("real", "float4"), "VARCHAR": ("text", "text"),
                  "BOOLEAN": ("boolean", "bool"), "DATE": ("date", "date"),
                  "TIMESTAMP": ("timestamp without time zone", "timestamp"),
                  "TIMESTAMP WITH TIME ZONE": ("timestamp with time zone", "timestamptz")}

#: PostgreSQL 15's columns of the catalog tables clients read, with the value the
#: service reports where DuckDB's emulation lacks the column: DuckDB's view, widened
#: by a table macro ``dpsql_<table>()``.
_WIDEN = {
    "pg_class": "oid BIGINT 0, relname VARCHAR '', relnamespace BIGINT 0, reltype BIGINT 0, "
                "reloftype BIGINT 0, relowner BIGINT 10, relam BIGINT 0, "
                "relfilenode BIGINT 0, reltablespace BIGINT 0, relpages INTEGER 0, "
                "reltuples FLOAT -1, relallvisible INTEGER 0, reltoastrelid BIGINT 0, "
                "relhasindex BOOLEAN false, relisshared BOOLEAN false, "
                "relpersistence VARCHAR 'p', relkind VARCHAR 'r', relnatts SMALLINT 0, "
                "relchecks SMALLINT 0, relhasrules BOOLEAN false, "
                "relhastriggers BOOLEAN false, relhassubclass BOOLEAN false, "
                "relrowsecurity BOOLEAN false, relforcerowsecurity BOOLEAN false, "
                "relispopulated BOOLEAN true, relreplident VARCHAR 'd', "
                "relispartition BOOLEAN false, relrewrite BIGINT 0, "
                "relfrozenxid BIGINT 0, relminmxid BIGINT 0, relacl VARCHAR[] NULL, "
                "reloptions VARCHAR[] NULL, relpartbound VARCHAR NULL",
    "pg_attribute": "attrelid BIGINT 0, attname VARCHAR '', atttypid BIGINT 0, "
                    "attstattarget INTEGER -1, attlen SMALLINT -1, attnum SMALLINT 0, "
                    "attndims INTEGER 0, attcacheoff INTEGER -1, atttypmod INTEGER -1, "
                    "attbyval BOOLEAN false, attalign VARCHAR 'd', attstorage VARCHAR 'p', "
                    "attcompression VARCHAR '', attnotnull BOOLEAN false, "
                    "atthasdef BOOLEAN false, atthasmissing BOOLEAN false, "
                    "attidentity VARCHAR '', attgenerated VARCHAR '', "
                    "attisdropped BOOLEAN false, attislocal BOOLEAN true, "
                    "attinhcount INTEGER 0, attcollation BIGINT 0, attacl VARCHAR[] NULL, "
                    "attoptions VARCHAR[] NULL, attfdwoptions VARCHAR[] NULL, "
                    "attmissingval VARCHAR NULL",
    "pg_type": "oid BIGINT 0, typname VARCHAR '', typnamespace BIGINT 0, "
               "typowner BIGINT 10, typlen SMALLINT -1, typbyval BOOLEAN false, "
               "typtype VARCHAR 'b', typcategory VARCHAR 'U', typispreferred BOOLEAN false, "
               "typisdefined BOOLEAN true, typdelim VARCHAR ',', typrelid BIGINT 0, "
               "typsubscript BIGINT 0, typelem BIGINT 0, typarray BIGINT 0, "
               "typinput VARCHAR '', typoutput VARCHAR '', typreceive VARCHAR '', "
               "typsend VARCHAR '', typmodin VARCHAR '', typmodout VARCHAR '', "
               "typanalyze VARCHAR '', typalign VARCHAR 'i', typstorage VARCHAR 'p', "
               "typnotnull BOOLEAN false, typbasetype BIGINT 0, typtypmod INTEGER -1, "
               "typndims INTEGER 0, typcollation BIGINT 0, typdefaultbin VARCHAR NULL, "
               "typdefault VARCHAR NULL, typacl VARCHAR[] NULL",
    # DuckDB's built-in types and functions live in its "main": PostgreSQL's pg_catalog
    "pg_namespace": "oid BIGINT 0, nspname VARCHAR (CASE WHEN nspname = 'main' THEN "
                    "'pg_catalog' ELSE nspname END), nspowner BIGINT 10, "
                    "nspacl VARCHAR[] NULL",
    "pg_index": "indexrelid BIGINT 0, indrelid BIGINT 0, indnatts SMALLINT 0, "
                "indnkeyatts SMALLINT 0, indisunique BOOLEAN false, "
                "indnullsnotdistinct BOOLEAN false, indisprimary BOOLEAN false, "
                "indisexclusion BOOLEAN false, indimmediate BOOLEAN true, "
                "indisclustered BOOLEAN false, indisvalid BOOLEAN true, "
                "indcheckxmin BOOLEAN false, indisready BOOLEAN true, "
                "indislive BOOLEAN true, indisreplident BOOLEAN false, "
                "indkey SMALLINT[] NULL, indcollation BIGINT[] NULL, "
                "indclass BIGINT[] NULL, indoption SMALLINT[] NULL, "
                "indexprs VARCHAR NULL, indpred VARCHAR NULL",
    "pg_constraint": "oid BIGINT 0, conname VARCHAR '', connamespace BIGINT 0, "
                     "contype VARCHAR '', condeferrable BOOLEAN false, "
                     "condeferred BOOLEAN false, convalidated BOOLEAN true, "
                     "conrelid BIGINT 0, contypid BIGINT 0, conindid BIGINT 0, "
                     "conparentid BIGINT 0, confrelid BIGINT 0, confupdtype VARCHAR ' ', "
                     "confdeltype VARCHAR ' ', confmatchtype VARCHAR ' ', "
                     "conislocal BOOLEAN true, coninhcount INTEGER 0, "
                     "connoinherit BOOLEAN false, conkey SMALLINT[] NULL, "
                     "confkey SMALLINT[] NULL, conbin VARCHAR NULL",
    "pg_description": "objoid BIGINT 0, classoid BIGINT 0, objsubid INTEGER 0, "
                      "description VARCHAR NULL",
    "pg_proc": "oid BIGINT 0, proname VARCHAR '', pronamespace BIGINT 0, "
               "proowner BIGINT 10, prolang BIGINT 0, prokind VARCHAR 'f', "
               "prorettype BIGINT 0, proargtypes VARCHAR '', proretset BOOLEAN false",
    "pg_collation": "oid BIGINT 0, collname VARCHAR '', collnamespace BIGINT 0, "
                    "collowner BIGINT 10, collprovider VARCHAR 'c', "
                    "collisdeterministic BOOLEAN true, collencoding INTEGER -1, "
                    "collcollate VARCHAR 'C', collctype VARCHAR 'C'",
    "pg_attrdef": "oid BIGINT 0, adrelid BIGINT 0, adnum SMALLINT 0, adbin VARCHAR NULL",
}

#: Columns DuckDB has but fills with values PostgreSQL clients cannot read.
_FORCE = {"attstorage", "relreplident", "relam", "attstattarget", "typrelid", "nspname"}

#: The ``pg_catalog`` tables a probe reads as the table macro ``dpsql_<name>()``.
EMULATED_TABLES = frozenset(_STANDINS) | frozenset(_WIDEN) | {"pg_database"}


def open_probe_database(catalog: Catalog) -> duckdb.DuckDBPyConnection:
    """A new probe database for ``catalog``, locked down (see the module docstring)."""
    db = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": "256MB"})
    db.execute("CREATE SCHEMA public")
    _create_catalog_tables(db, catalog)
    _create_standins(db)
    _create_database_row(db, catalog.dataset)
    _widen_catalog_tables(db)
    for macro in _MACROS:
        db.execute(f"CREATE MACRO public.{macro}")
    _create_information_schema_columns(db)
    _lock_down(db)
    return db


def _create_catalog_tables(db: duckdb.DuckDBPyConnection, catalog: Catalog) -> None:
    """The catalog's tables, empty, with DuckDB's types for the catalog's types."""
    for name, table in catalog.tables.items():
        schema, _, bare = name.rpartition(".")
        if schema:
            db.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        cols = ", ".join(f'"{c.name}" {_DUCK_TYPES.get(c.type, "VARCHAR")}'
                         for c in table.columns.values())
        target = f'"{schema or "public"}"."{bare}"'
        db.execute(f"CREATE TABLE {target} ({cols})")


def _create_standins(db: duckdb.DuckDBPyConnection) -> None:
    """An empty table macro ``dpsql_<name>()`` for each table in :data:`_STANDINS`."""
    for name, cols in _STANDINS.items():
        nulls = ", ".join(f"NULL::{c.split(' ', 1)[1]} AS {c.split(' ', 1)[0]}"
                          for c in (x.strip() for x in cols.split(", ")))
        db.execute(f"CREATE MACRO public.dpsql_{name}() AS TABLE SELECT {nulls} "
                   "WHERE false")


def _create_database_row(db: duckdb.DuckDBPyConnection, dataset: str) -> None:
    """``dpsql_pg_database()``: one database, the data set (DuckDB's own
    ``pg_database`` lacks columns psql reads)."""
    name = exp.Literal.string(dataset).sql()
    db.execute(
        f"CREATE MACRO public.dpsql_pg_database() AS TABLE SELECT 16384::BIGINT AS oid, "
        f"{name} AS datname, 10::BIGINT AS datdba, 6 AS encoding, 'c' AS "
        "datlocprovider, false AS datistemplate, true AS datallowconn, -1 AS "
        "datconnlimit, 'C' AS datcollate, 'C' AS datctype, NULL::VARCHAR AS "
        "daticulocale, NULL::VARCHAR[] AS datacl, 1663::BIGINT AS dattablespace")


def _widen_catalog_tables(db: duckdb.DuckDBPyConnection) -> None:
    """``dpsql_<table>()`` for each table in :data:`_WIDEN`: DuckDB's view with the
    columns it lacks added, and those in :data:`_FORCE` (or arrays that are not
    arrays there) replaced by the value the service reports."""
    for table, spec in _WIDEN.items():
        have = {r[0]: str(r[1]) for r in db.execute(
            f"SELECT * FROM pg_catalog.{table} LIMIT 0").description}
        extra, replace = [], []
        for col in spec.split(", "):
            name, kind, default = col.split(" ", 2)
            if name not in have:
                extra.append(f"{default}::{kind} AS {name}")
            elif kind.endswith("[]") != have[name].endswith("]") or name in _FORCE:
                replace.append(f"{default}::{kind} AS {name}")  # arrays as arrays
        star = "*" + (f" REPLACE ({', '.join(replace)})" if replace else "")
        db.execute(f"CREATE MACRO public.dpsql_{table}() AS TABLE SELECT {star}"
                   + "".join(", " + e for e in extra)
                   + f" FROM pg_catalog.{table}")


def _create_information_schema_columns(db: duckdb.DuckDBPyConnection) -> None:
    """``information_schema.columns`` with PostgreSQL's type names (Metabase's sync
    reads ``udt_name``; DuckDB leaves it NULL) and identity 'NO'."""
    data_type = " ".join(f"WHEN '{d}' THEN '{n}'" for d, (n, _) in _PG_TYPE_NAMES.items())
    udt_name = " ".join(f"WHEN '{d}' THEN '{u}'" for d, (_, u) in _PG_TYPE_NAMES.items())
    db.execute(
        "CREATE MACRO public.dpsql_information_schema_columns() AS TABLE SELECT * "
        f"REPLACE (CASE data_type {data_type} ELSE lower(data_type) END AS data_type, "
        "'pg_catalog' AS udt_schema, table_catalog AS udt_catalog, "
        f"CASE data_type {udt_name} ELSE lower(data_type) END AS udt_name, "
        "'NO' AS is_identity) FROM information_schema.columns")


def _lock_down(db: duckdb.DuckDBPyConnection) -> None:
    """No file or network access and no extension loading, then the configuration
    locked so that no probe can change it back."""
    db.execute("SET search_path = 'public'")
    db.execute("SET enable_external_access = false")
    db.execute("SET autoinstall_known_extensions = false")
    db.execute("SET autoload_known_extensions = false")
    db.execute("SET lock_configuration = true")
