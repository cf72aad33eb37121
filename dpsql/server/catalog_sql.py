"""Answers to the catalog probes of SQL tools, from the catalog alone.

psql's ``\\d``, JDBC's ``DatabaseMetaData``, SQLAlchemy's ``inspect()`` and the
drivers' connection-time queries read ``pg_catalog`` and ``information_schema``. They are
answered by an in-memory DuckDB that holds *only the catalog's tables, empty*: DuckDB
emulates much of ``pg_catalog`` with PostgreSQL's type OIDs, so the tools see the
catalog's tables and columns, and nothing there is derived from private data. Such
queries are free (no budget) and never reach the owner's database.

The probe database is locked down before any probe runs: no file or network access,
configuration locked, one thread, a memory cap, a time limit per probe; a short list
of functions that read files, run SQL from strings or sleep is refused by name.

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

import threading
import time
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

import dpsql
from dpsql.catalog import Catalog
from dpsql.errors import UnsupportedQueryError

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
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT",
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_foreign_table": "ftrelid BIGINT, ftserver BIGINT, ftoptions VARCHAR[]",
    "pg_foreign_server": "oid BIGINT, srvname VARCHAR",
    "pg_partitioned_table": "partrelid BIGINT, partstrat VARCHAR",
    "pg_range": "rngtypid BIGINT, rngsubtype BIGINT",
    "pg_extension": "oid BIGINT, extname VARCHAR, extversion VARCHAR, extnamespace BIGINT",
    "pg_event_trigger": "oid BIGINT, evtname VARCHAR",
    "pg_operator": "oid BIGINT, oprname VARCHAR, oprleft BIGINT, oprright BIGINT, "
                   "oprresult BIGINT, oprnamespace BIGINT",
    "pg_language": "oid BIGINT, lanname VARCHAR",
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
    "pg_is_in_recovery() AS false",
    "txid_current() AS 0",
    "array_length(a, d) AS len(a)",
    "pg_get_keywords() AS TABLE SELECT NULL::VARCHAR AS word, NULL::VARCHAR AS catcode, "
    "NULL::VARCHAR AS catdesc WHERE false",
]


def is_probe(sql: str, catalog: Catalog | None = None) -> bool:
    """Whether a statement is a catalog probe: a SELECT (or UNION of them) that reads
    only ``pg_catalog`` / ``information_schema`` (or nothing at all).

    Anything that names a catalog table, or that sqlglot cannot parse as
    PostgreSQL, is not a probe and goes to dpsql's pipeline (which answers it with DP,
    answers a provable-empty schema probe free, or refuses it).
    """
    try:
        trees = sqlglot.parse(sql, read="postgres")
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

    def __init__(self, catalog: Catalog, timeout: float = 5.0):
        self.catalog = catalog
        self.timeout = timeout
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
        for macro in _MACROS:
            self._db.execute(f"CREATE MACRO public.{macro}")
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
                cur = con.execute(text, params or None)
                cols = [(d[0], str(d[1])) for d in cur.description or []]
                box.append((cols, cur.fetchmany(100_000)))
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
        if isinstance(out, BaseException):
            if time.monotonic() > deadline:
                raise UnsupportedQueryError(
                    f"catalog query stopped after {self.timeout:g} s")
            raise UnsupportedQueryError(
                "this catalog query cannot be answered here: dpsql serves the catalog's "
                "tables and columns through pg_catalog and information_schema, and "
                "answers aggregate SELECTs over the catalog's tables with differential "
                f"privacy ({type(out).__name__})")
        return out


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
    return to.sql("postgres").lower()


def rewrite_probe(sql: str, login: str, dataset: str) -> str:
    """The probe as DuckDB SQL (see the module docstring).

    Raises:
        UnsupportedQueryError: not one SELECT, or it calls a refused function.
    """
    try:
        trees = sqlglot.parse(sql, read="postgres")
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
                node.this.name.lower() == "pg_catalog" and isinstance(node.expression,
                                                                      exp.Func):
            return node.expression
        if isinstance(node, exp.Collate):
            return node.this
        if isinstance(node, exp.Operator):
            op = str(node.args.get("operator", "")).split(".")[-1].strip()
            left, right = node.this, node.expression
            ops = {"~": lambda: exp.RegexpLike(this=left, expression=right),
                   "!~": lambda: exp.not_(exp.RegexpLike(this=left, expression=right)),
                   "~*": lambda: exp.RegexpILike(this=left, expression=right),
                   "!~*": lambda: exp.not_(exp.RegexpILike(this=left, expression=right)),
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
                return inner
            if target in ("regtype",):
                return exp.func("format_type", node.this, exp.null())
            if target in ("regproc", "regprocedure", "regnamespace", "regrole", "oid",
                          "xid", "regconfig"):
                return exp.cast(node.this, "BIGINT")
            if target in ("name", "char", '"char"', "bpchar", "text[]", "name[]"):
                return exp.cast(node.this, "VARCHAR" if "[" not in target else "VARCHAR[]")
            if target in ("int2vector", "oidvector"):
                return exp.cast(node.this, "VARCHAR")
        if isinstance(node, exp.Table):
            if node.db.lower() in ("pg_catalog", "") and node.name.lower() in _STANDINS:
                return exp.Table(this=exp.Anonymous(this=f"dpsql_{node.name.lower()}"),
                                 alias=exp.TableAlias(this=exp.to_identifier(
                                     node.alias or node.name)))
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else
                    node.sql_name()).lower()
            if name.startswith(_DENIED_PREFIXES):
                raise UnsupportedQueryError(f"function {name}() in a catalog query")
        return node

    for select in tree.find_all(exp.Select):
        if select.parent is None or isinstance(select.parent, exp.SetOperation):
            select.set("expressions", [_pg_named(e) for e in select.expressions])
    tree = tree.transform(fix)
    return tree.sql(dialect="duckdb")


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
