"""Answers to the catalog probes of SQL tools, from the catalog alone.

psql's ``\\d``, JDBC's ``DatabaseMetaData``, SQLAlchemy's ``inspect()`` and the
drivers' connection-time queries read ``pg_catalog`` and ``information_schema``. They are
answered by an in-memory DuckDB that holds *only the catalog's tables, empty*: DuckDB
emulates much of ``pg_catalog`` with PostgreSQL's type OIDs, so the tools see the
catalog's tables and columns, and nothing there is derived from private data. Such
queries are free (no budget) and never reach the owner's database.

The probe database is locked down before any probe runs: no file or network access,
configuration locked, one thread, a memory cap, a time limit per probe. A probe may call
only the functions on an allow-list (those the recorded client probes use, the
service's stand-ins, and a few plain scalar ones): generators such as ``range``,
``repeat`` or ``lpad``, and anything that reads files, runs SQL from strings or sleeps,
are refused; ``generate_series`` (pgjdbc's index-column probes) only with bounds
taken from the catalog, not large literal ones. An answer is capped in rows and in
bytes, counted while it is fetched in chunks, so a probe can never make the service
hold more than a bounded answer.

Probe SQL is PostgreSQL's; before it runs, sqlglot rewrites the few things DuckDB lacks:
``'t'::regclass`` becomes the table's oid, ``OPERATOR(pg_catalog.~)`` a regular
expression match, ``COLLATE pg_catalog.default`` disappears, ``version()``,
``current_user`` and ``current_database()`` become the service's answers, and the
``pg_catalog`` tables DuckDB does not have (``pg_roles``, ``pg_inherits``...) come
from a small schema of empty stand-ins.

>>> from dpsql.datasets import pums_catalog
>>> db = ProbeDB(pums_catalog())
>>> is_probe("SELECT version()"), is_probe("SELECT COUNT(*) FROM pums")
(True, False)
>>> cols, rows = db.run("SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r'",
...                     login="alice")
>>> rows
[('pums',), ('pums_dup',)]
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

import dpsql
from dpsql.catalog import Catalog
from dpsql.errors import UnsupportedQueryError
from dpsql.text import escape

_log = logging.getLogger("dpsql.server")

#: ``server_version`` as reported to clients: PostgreSQL 15's protocol and catalog.
SERVER_VERSION = "15.0"
VERSION_TEXT = (f"PostgreSQL {SERVER_VERSION} (dpsql {dpsql.__version__}: differentially "
                "private answers; not a PostgreSQL server)")

_DUCK_TYPES = {"int": "BIGINT", "float": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN",
               "date": "DATE", "timestamp": "TIMESTAMP"}

_SYSTEM_SCHEMAS = {"pg_catalog", "information_schema"}

#: Functions a probe may not call: files, SQL from strings, sleeping, settings.
_DENIED_PREFIXES = ("read_", "parquet_", "iceberg", "delta_", "sniff_", "glob", "query",
                    "pg_sleep", "sleep", "duckdb_secrets", "which_secret", "getenv",
                    "load_", "install_", "copy", "export", "import", "attach", "detach",
                    "json_execute", "sqlite_", "postgres_", "mysql_", "http")

#: Functions a probe may call (sqlglot's name for a typed function, the name for any
#: other): those in the recorded client probes (tests/server/fixtures), the stand-ins
#: below, and plain scalar ones whose answer is no bigger than their arguments. Anything
#: else (generators like ``range``/``repeat``/``lpad``, table functions) is refused.
_ALLOWED_TEXT = """
and or xor not case if cast trycast collate nullif coalesce greatest least array
regexplike regexpilike regexp_like regexp_ilike row_number rank dense_rank
explode unnest exploding_generate_series generate_series group_concat string_agg
array_agg count min max sum avg bool_and bool_or logical_and logical_or
generate_subscripts
current_schema current_schemas current_user session_user current_database
current_catalog current_role current_version version
lower upper length char_length character_length octet_length substring substr
concat concat_ws trim ltrim rtrim btrim position strpos left right starts_with
abs round floor ceil sign mod
array_to_string array_upper array_lower array_length array_contains cardinality
format_type col_description obj_description shobj_description json_build_object
jsonb_build_object quote_ident pg_get_expr pg_get_serial_sequence
pg_get_statisticsobjdef_columns pg_get_userbyid pg_relation_is_publishable
pg_table_is_visible pg_type_is_visible pg_function_is_visible pg_collation_is_visible
pg_encoding_to_char pg_get_constraintdef pg_get_indexdef pg_get_triggerdef
pg_get_viewdef pg_get_partkeydef pg_get_function_result pg_get_function_arguments
pg_get_function_identity_arguments pg_relation_size pg_total_relation_size
pg_table_size pg_indexes_size pg_backend_pid pg_is_in_recovery txid_current
to_regtype to_regclass pg_get_keywords has_table_privilege has_schema_privilege
has_database_privilege current_setting
pg_database_size pg_tablespace_location pg_stat_get_numscans pg_get_ruledef
replace format _pg_expandarray has_any_column_privilege has_column_privilege
"""
_ALLOWED_FUNCS = frozenset(_ALLOWED_TEXT.split())

#: The largest literal bound ``generate_series`` may have in a probe (clients pass
#: array bounds from the catalog, or 0 and 1).
_SERIES_LITERAL_MAX = 64

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

#: PostgreSQL type names in casts → DuckDB's (``::pg_catalog.text``, ``::oid``...).
_CASTS = {"regproc": "BIGINT", "regprocedure": "BIGINT", "regnamespace": "BIGINT",
          "regrole": "BIGINT", "oid": "BIGINT", "xid": "BIGINT", "regconfig": "BIGINT",
          "name": "VARCHAR", "char": "VARCHAR", '"char"': "VARCHAR", "bpchar": "VARCHAR",
          "text": "VARCHAR", "varchar": "VARCHAR", "text[]": "VARCHAR[]",
          "name[]": "VARCHAR[]", "int2vector": "VARCHAR", "oidvector": "VARCHAR",
          "int2": "SMALLINT", "int4": "INTEGER", "int8": "BIGINT", "bool": "BOOLEAN",
          "float4": "FLOAT", "float8": "DOUBLE", "int": "INTEGER", "integer": "INTEGER",
          "bigint": "BIGINT", "smallint": "SMALLINT", "boolean": "BOOLEAN",
          "pg_node_tree": "VARCHAR", "int2[]": "SMALLINT[]", "oid[]": "BIGINT[]",
          "regoper": "BIGINT", "aclitem[]": "VARCHAR[]"}

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


#: ``AS select`` / ``AS update``...: PostgreSQL takes these keywords as column aliases
#: (Metabase's table-privileges probe), sqlglot does not; they are quoted first.
_KEYWORD_ALIAS = re.compile(
    r"\bas\s+(select|insert|update|delete|table|role|schema)\b(?=\s*(,|\)|\bfrom\b|$))",
    re.IGNORECASE)


def _quote_keyword_aliases(sql: str) -> str:
    return _KEYWORD_ALIAS.sub(lambda m: f'AS "{m.group(1).lower()}"', sql)


def is_probe(sql: str, catalog: Catalog | None = None) -> bool:
    """Whether a statement is a catalog probe: a SELECT (or UNION of them) that reads
    only ``pg_catalog`` / ``information_schema`` (or nothing at all).

    Anything that names a catalog table, or that sqlglot cannot parse as
    PostgreSQL, is not a probe and goes to dpsql's pipeline (which answers it with DP,
    answers a provable-empty schema probe free, or refuses it).
    """
    try:
        trees = sqlglot.parse(_quote_keyword_aliases(sql), read="postgres")
    except (sqlglot.errors.SqlglotError, RecursionError, ValueError):
        return False
    if len(trees) != 1 or trees[0] is None:
        return False
    tree = trees[0]
    if not isinstance(tree, exp.Query):
        return False
    if isinstance(tree, exp.Select) and tree.args.get("operation_modifiers"):
        return False
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    private = {t.lower() for t in (catalog.tables if catalog is not None else ())}
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        schema = table.db.lower()
        if not name and isinstance(table.this, exp.Func):
            continue  # a table function: checked by name when it runs
        if schema in _SYSTEM_SCHEMAS or (not schema and (name.startswith("pg_") or
                                                         name in ctes)):
            if name in private:
                return False
            continue
        return False
    return True


class ProbeDB:
    """The in-memory DuckDB that answers probes; one per server, a cursor per probe."""

    def __init__(self, catalog: Catalog, timeout: float = 5.0, max_rows: int = 10_000,
                 max_bytes: int = 8 << 20):
        self.catalog = catalog
        self.timeout = timeout
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self._db = duckdb.connect(":memory:", config={"threads": 1,
                                                      "memory_limit": "256MB"})
        self._db.execute("CREATE SCHEMA public")
        for name, table in catalog.tables.items():
            schema, _, bare = name.rpartition(".")
            if schema:
                self._db.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            cols = ", ".join(f'"{c.name}" {_DUCK_TYPES.get(c.type, "VARCHAR")}'
                             for c in table.columns.values())
            target = f'"{schema or "public"}"."{bare}"'
            self._db.execute(f"CREATE TABLE {target} ({cols})")
        for name, cols in _STANDINS.items():
            nulls = ", ".join(f"NULL::{c.split(' ', 1)[1]} AS {c.split(' ', 1)[0]}"
                              for c in (x.strip() for x in cols.split(", ")))
            self._db.execute(f"CREATE MACRO public.dpsql_{name}() AS TABLE SELECT {nulls} "
                             "WHERE false")
        # one database: the data set (DuckDB's own pg_database lacks columns psql reads)
        dataset = exp.Literal.string(catalog.dataset).sql()
        self._db.execute(
            f"CREATE MACRO public.dpsql_pg_database() AS TABLE SELECT 16384::BIGINT AS oid, "
            f"{dataset} AS datname, 10::BIGINT AS datdba, 6 AS encoding, 'c' AS "
            "datlocprovider, false AS datistemplate, true AS datallowconn, -1 AS "
            "datconnlimit, 'C' AS datcollate, 'C' AS datctype, NULL::VARCHAR AS "
            "daticulocale, NULL::VARCHAR[] AS datacl, 1663::BIGINT AS dattablespace")
        for table, spec in _WIDEN.items():
            have = {r[0]: str(r[1]) for r in self._db.execute(
                f"SELECT * FROM pg_catalog.{table} LIMIT 0").description}
            extra, replace = [], []
            for col in spec.split(", "):
                name, kind, default = col.split(" ", 2)
                if name not in have:
                    extra.append(f"{default}::{kind} AS {name}")
                elif kind.endswith("[]") != have[name].endswith("]") or name in _FORCE:
                    replace.append(f"{default}::{kind} AS {name}")  # arrays as arrays
            star = "*" + (f" REPLACE ({', '.join(replace)})" if replace else "")
            self._db.execute(f"CREATE MACRO public.dpsql_{table}() AS TABLE SELECT {star}"
                             + "".join(", " + e for e in extra)
                             + f" FROM pg_catalog.{table}")
        for macro in _MACROS:
            self._db.execute(f"CREATE MACRO public.{macro}")
        # information_schema.columns with PostgreSQL's type names (Metabase's sync reads
        # udt_name; DuckDB leaves it NULL) and identity 'NO'
        data_type = " ".join(f"WHEN '{d}' THEN '{n}'" for d, (n, _) in _PG_TYPE_NAMES.items())
        udt_name = " ".join(f"WHEN '{d}' THEN '{u}'" for d, (_, u) in _PG_TYPE_NAMES.items())
        self._db.execute(
            "CREATE MACRO public.dpsql_information_schema_columns() AS TABLE SELECT * "
            f"REPLACE (CASE data_type {data_type} ELSE lower(data_type) END AS data_type, "
            "'pg_catalog' AS udt_schema, table_catalog AS udt_catalog, "
            f"CASE data_type {udt_name} ELSE lower(data_type) END AS udt_name, "
            "'NO' AS is_identity) FROM information_schema.columns")
        self._db.execute("SET search_path = 'public'")
        self._db.execute("SET enable_external_access = false")
        self._db.execute("SET autoinstall_known_extensions = false")
        self._db.execute("SET autoload_known_extensions = false")
        self._db.execute("SET lock_configuration = true")

    def run(self, sql: str, login: str, params: list[Any] | None = None,
            dataset: str | None = None) -> tuple[list[tuple[str, str]], list[tuple]]:
        """Runs a probe; returns ([(name, DuckDB type)], rows).

        Raises:
            UnsupportedQueryError: the probe uses something refused here, or fails
                (the message is the service's own, never DuckDB's text).
        """
        text = rewrite_probe(sql, login, dataset or self.catalog.dataset)
        con = self._db.cursor()
        con.execute("SET search_path = 'public'")
        box: list = []
        done = threading.Event()

        def work() -> None:
            try:
                cur = con.execute(text, params or None)  # streams: fetched in chunks
                cols = [(d[0], str(d[1])) for d in cur.description or []]
                rows: list[tuple] = []
                size = 0
                while True:
                    chunk = cur.fetchmany(256)
                    if not chunk:
                        break
                    rows += chunk
                    size += sum(_size(row) for row in chunk)
                    if len(rows) > self.max_rows or size > self.max_bytes:
                        raise _TooBig()
                box.append((cols, rows))
            except BaseException as exc:  # noqa: BLE001 - reported below, not printed
                box.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=work, name="dpsql-probe", daemon=True)
        thread.start()
        deadline = time.monotonic() + self.timeout
        while not done.wait(0.05):
            if time.monotonic() > deadline:
                con.interrupt()
        con.close()
        out = box[0]
        if isinstance(out, _TooBig):
            raise UnsupportedQueryError(
                f"catalog query answer too large (over {self.max_rows} rows or "
                f"{self.max_bytes} bytes): catalog queries describe the catalog's tables "
                "and columns only")
        if isinstance(out, BaseException):
            # the owner's log: which probe fails, for the next catalog shim
            _log.info("probe failed: %s: %s", escape(text[:2000]), escape(out))
            if time.monotonic() > deadline:
                raise UnsupportedQueryError(
                    f"catalog query stopped after {self.timeout:g} s")
            raise UnsupportedQueryError(
                "this catalog query cannot be answered here: dpsql serves the catalog's "
                "tables and columns through pg_catalog and information_schema, and "
                "answers aggregate SELECTs over the catalog's tables with differential "
                "privacy")
        return out


class _TooBig(Exception):
    """A probe's answer passed the row or byte cap."""


def _size(value: Any) -> int:
    """Bytes a value takes on the wire, roughly (text form), to cap an answer."""
    if isinstance(value, tuple | list):
        return 4 + sum(_size(v) for v in value)
    if isinstance(value, dict):
        return 4 + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, str | bytes):
        return 4 + len(value)
    return 12


def _name(node: exp.Expression) -> str:
    return node.name.lower() if hasattr(node, "name") else ""


def _cast_target(to: exp.DataType) -> str:
    if isinstance(to, exp.ObjectIdentifier):
        return to.name.lower()
    kind = to.args.get("kind")
    if isinstance(kind, exp.Dot):
        return kind.expression.name.lower()
    if to.this == exp.DataType.Type.USERDEFINED and kind is not None:
        return kind.name.lower() if hasattr(kind, "name") else str(kind).lower()
    return to.sql("postgres").lower().replace("pg_catalog.", "").replace('"', "")


def rewrite_probe(sql: str, login: str, dataset: str) -> str:
    """The probe as DuckDB SQL (see the module docstring).

    Raises:
        UnsupportedQueryError: not one SELECT, or it calls a refused function.
    """
    try:
        trees = sqlglot.parse(_quote_keyword_aliases(sql), read="postgres")
    except (sqlglot.errors.SqlglotError, RecursionError, ValueError):
        raise UnsupportedQueryError("cannot parse this catalog query") from None
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        raise UnsupportedQueryError("a catalog query must be one SELECT")
    tree = trees[0]

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.CurrentVersion) or (
                isinstance(node, exp.Anonymous) and _name(node) == "version"):
            return exp.Literal.string(VERSION_TEXT)
        if isinstance(node, exp.CurrentUser | exp.SessionUser) or (
                isinstance(node, exp.Column) and not node.table and
                _name(node) in ("current_user", "session_user", "current_role", "user")):
            return exp.Literal.string(login)
        if isinstance(node, exp.CurrentDatabase) or (
                isinstance(node, exp.Column) and not node.table and
                _name(node) == "current_catalog"):
            return exp.Literal.string(dataset)
        if isinstance(node, exp.CurrentSchema):
            return exp.Literal.string("public")
        if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and \
                node.this.name.lower() == "pg_catalog" and isinstance(
                    node.expression, exp.Func | exp.Literal):
            return node.expression
        if isinstance(node, exp.Collate):
            return node.this
        if isinstance(node, exp.Operator):
            op = str(node.args.get("operator", "")).split(".")[-1].strip()
            left, right = node.this, node.expression
            ops = {"~": lambda: exp.RegexpLike(this=left, expression=right),
                   "!~": lambda: exp.Not(this=exp.RegexpLike(this=left, expression=right)),
                   "~*": lambda: exp.RegexpILike(this=left, expression=right),
                   "!~*": lambda: exp.Not(this=exp.RegexpILike(this=left, expression=right)),
                   "=": lambda: exp.EQ(this=left, expression=right),
                   "<>": lambda: exp.NEQ(this=left, expression=right)}
            if op in ops:
                return ops[op]()
            raise UnsupportedQueryError(f"operator {op!r} in a catalog query")
        if isinstance(node, exp.Cast):
            target = _cast_target(node.to)
            if target == "regclass":
                inner = node.this
                if isinstance(inner, exp.Literal) and inner.is_string:
                    rel = inner.this.split(".")[-1].strip('"')
                    return exp.paren(sqlglot.parse_one(
                        "SELECT oid FROM pg_catalog.pg_class WHERE relname = "
                        f"{exp.Literal.string(rel).sql()} LIMIT 1", read="duckdb"))
                if isinstance(inner, exp.Anonymous | exp.DPipe | exp.Concat) or (
                        isinstance(inner, exp.Cast) and _cast_target(inner.to) in (
                            "text", "varchar")):
                    return exp.Anonymous(this="to_regclass", expressions=[inner])
                return inner
            if target in ("regtype",):
                return exp.func("format_type", node.this, exp.null())
            if target.startswith("reg") and isinstance(node.this, exp.Literal):
                return exp.Null()  # 'pg_catalog.array_in'::regproc: no functions here
            if target in _CASTS:  # not exp.cast, which copies (and so hides) the operand
                return exp.Cast(this=node.this, to=exp.DataType.build(_CASTS[target]))
        if isinstance(node, exp.Column) and node.args.get("db") is not None:
            # pg_catalog.pg_class.relname: DuckDB binds a column by its table's name only
            node.set("db", None)
            node.set("catalog", None)
            return node
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Func) and \
                node.db.lower() == "pg_catalog":
            node.set("db", None)  # pg_catalog.unnest(...) in FROM
            return node
        if isinstance(node, exp.Anonymous | exp.JSONObject) and (
                _name(node) in ("json_build_object", "jsonb_build_object") or
                isinstance(node, exp.JSONObject)):
            args = node.expressions
            if isinstance(node, exp.JSONObject):  # sqlglot's reading of it
                args = [x for kv in node.expressions for x in (
                    (kv.this, kv.expression) if isinstance(kv, exp.JSONKeyValue) else (kv,))]
            return exp.Anonymous(this="json_object", expressions=args)
        if isinstance(node, exp.Format):  # PostgreSQL's format(): DuckDB's printf
            fmt = node.this.this.replace("%I", "%s").replace("%L", "'%s'")
            return exp.Anonymous(this="printf",
                                 expressions=[exp.Literal.string(fmt), *node.expressions])
        if isinstance(node, exp.Dot) and isinstance(node.this, exp.Paren) and \
                _name(node.expression) in ("n", "x"):
            inner = node.this.this
            if isinstance(inner, exp.Dot):
                inner = inner.expression
            if isinstance(inner, exp.Anonymous) and _name(inner) == "_pg_expandarray":
                arr = inner.expressions[0]  # (_pg_expandarray(a)).n: a's subscripts
                if _name(node.expression) == "n":
                    return exp.Anonymous(this="generate_subscripts",
                                         expressions=[arr, exp.Literal.number(1)])
                return exp.Unnest(expressions=[arr])
        if isinstance(node, exp.Anonymous) and _name(node) == "current_setting":
            return exp.Anonymous(this="dpsql_current_setting",
                                 expressions=node.expressions[:1])
        if isinstance(node, exp.Anonymous) and _name(node) == "format_type":
            return exp.Anonymous(this="dpsql_format_type", expressions=node.expressions)
        if isinstance(node, exp.Anonymous) and _name(node) == "pg_get_expr" and \
                len(node.expressions) > 2:
            node.set("expressions", node.expressions[:2])  # the pretty flag: no effect
            return node
        if isinstance(node, exp.Table) and node.db.lower() == "information_schema" and \
                node.name.lower() == "columns":
            return exp.Table(this=exp.Anonymous(this="dpsql_information_schema_columns"),
                             alias=exp.TableAlias(this=exp.to_identifier(
                                 node.alias or node.name)))
        if isinstance(node, exp.Table) and node.db.lower() in ("pg_catalog", "") and (
                node.name.lower() in _STANDINS or node.name.lower() in _WIDEN or
                node.name.lower() == "pg_database"):
            return exp.Table(this=exp.Anonymous(this=f"dpsql_{node.name.lower()}"),
                             alias=exp.TableAlias(this=exp.to_identifier(
                                 node.alias or node.name)))
        return node

    def check(node: exp.Expression) -> None:
        """Only allow-listed functions, in the client's own SQL (before rewriting)."""
        if not isinstance(node, exp.Func):
            return
        name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
        if name.startswith(_DENIED_PREFIXES) or name not in _ALLOWED_FUNCS:
            raise UnsupportedQueryError(f"function {name}() in a catalog query: catalog "
                                        "queries may call only the functions SQL tools "
                                        "use to read the catalog")
        if name == "format" and not (isinstance(node.this, exp.Literal) and
                                     node.this.is_string):
            raise UnsupportedQueryError("format() in a catalog query takes a literal format")
        if name == "replace":
            # bounded: a short literal replacement, not nested (at most 16 times longer)
            args = node.expressions if isinstance(node, exp.Anonymous) else [
                node.this, node.expression, node.args.get("replacement")]
            new = args[-1] if len(args) == 3 else None
            if not (isinstance(new, exp.Literal) and new.is_string and len(new.this) <= 16
                    and not any(_name(f) == "replace" or type(f).__name__ == "Replace"
                                for f in args[0].find_all(exp.Func))):
                raise UnsupportedQueryError("replace() in a catalog query takes a short "
                                            "literal replacement")
        if name in ("exploding_generate_series", "generate_series"):
            for lit in node.find_all(exp.Literal):
                if not lit.is_string:
                    try:
                        big = abs(float(lit.this)) > _SERIES_LITERAL_MAX
                    except ValueError:
                        big = True
                    if big:
                        raise UnsupportedQueryError(
                            "generate_series() in a catalog query takes its bounds from "
                            "the catalog")

    for select in tree.find_all(exp.Select):
        if select.parent is None or isinstance(select.parent, exp.SetOperation):
            select.set("expressions", [_pg_named(e) for e in select.expressions])
    # children first (sqlglot's own transform does not visit the operands of a node
    # it replaced: a cast inside a cast, a collation inside an operator)
    def post(node: exp.Expression) -> exp.Expression:
        for child in list(node.iter_expressions()):
            post(child)
        check(node)
        new = fix(node)
        if new is not node and node.parent is not None:
            node.replace(new)
        return new

    return post(tree).sql(dialect="duckdb")


def _pg_named(e: exp.Expression) -> exp.Expression:
    """An unnamed output column gets PostgreSQL's name for it (``version``, ``count``,
    ``?column?``), not DuckDB's (clients read the names)."""
    if isinstance(e, exp.Alias | exp.Star) or (isinstance(e, exp.Column) and
                                               isinstance(e.this, exp.Star)):
        return e
    inner = e
    while isinstance(inner, exp.Cast):
        inner = inner.this
    if isinstance(inner, exp.Column):
        return e
    if isinstance(inner, exp.Dot) and isinstance(inner.expression, exp.Func):
        inner = inner.expression
    if isinstance(inner, exp.CurrentUser):
        name = "current_user"
    elif isinstance(inner, exp.SessionUser):
        name = "session_user"
    elif isinstance(inner, exp.CurrentVersion):
        name = "version"
    elif isinstance(inner, exp.CurrentDatabase):
        name = "current_database"
    elif isinstance(inner, exp.CurrentSchema):
        name = "current_schema"
    elif isinstance(inner, exp.Anonymous):
        name = inner.name.lower()
    elif isinstance(inner, exp.Func):
        name = inner.sql_name().lower()
    elif isinstance(e, exp.Cast) and isinstance(inner, exp.Literal):
        name = _cast_target(e.to).split(".")[-1]
    else:
        name = "?column?"
    return exp.alias_(e, name, quoted=True)
