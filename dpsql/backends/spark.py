"""Spark SQL over a ``SparkSession`` (classic or Spark Connect): ``dpsql.connect(spark, ...)``.

The catalog's tables are whatever the session resolves by name: tables of its catalog
or (temporary) views registered in it. dpsql runs one ``spark.sql(...)`` per query and
collects only the aggregated rows (one per group) to the driver.

Error freedom: Spark with ANSI mode on (the default since Spark 4) raises on overflow,
division by zero and bad casts, so dpsql sets ``spark.sql.ansi.enabled = false`` for the
duration of each of its queries and restores the previous value afterwards; it also
writes overflow-prone arithmetic inside guarded expressions as ``try_*`` functions (see
:mod:`dpsql.backends.dialects`). Give dpsql a session (or a Spark Connect session) of its
own: another thread running queries on the same session at the same moment would see
ANSI mode off.

Spark enforces no PRIMARY KEY/UNIQUE constraints, so :meth:`SparkBackend.unique_columns`
is always empty and dpsql refuses joins that follow a foreign key to the user (a
duplicated key would attach a row to two users); joins on the user key itself and to
public tables work. Least privilege is the cluster's: run dpsql as a principal that may
only SELECT the catalog's tables (e.g. Unity Catalog or Hive grants, a Spark Connect
server with such a user); dpsql issues nothing but SELECT statements.

The SQL text dpsql checked is the text Spark runs: :data:`SAFE_CONF` switches off every
session feature that rewrites or reinterprets SQL text after dpsql — ``${...}``
variable substitution (which would put environment variables, Java properties and
Spark settings into string literals), SQL scripting (``BEGIN ... END`` blocks of
several statements), pipe syntax, regex column names, legacy parsing rules. Each
``spark.sql`` call gets exactly one statement: on a classic session it is first parsed
as a query by the session's own parser (``parseQuery``: one query, no command, no
second statement); Spark Connect sessions parse on the server, which takes one
statement. The pre-charge check only analyses the query (names and types) — it does not
optimise it, because Spark's optimiser evaluates expressions over local relations
(``ConvertToLocalRelation``), so a planning error could depend on the data. Spark has
no statement timeout. Engine error texts go to the owner's log only
(:mod:`dpsql.backends._boundary`).

Values: dpsql's queries run in the UTC session time zone (timestamp parts, truncation
and keys are UTC); every table is read with dates and timestamps outside years 1..9999
as NULL, and casts to dates give NULL outside them (:func:`~dpsql.backends.dialects.
spark_typed_tables` says why); a difference of dates is a number of days, as in DuckDB;
a text key that is not valid UTF-8 is NULL (:func:`~dpsql.backends.dialects.
spark_text_keys`). A view keeps the settings it
was created with (ANSI mode on by default in Spark 4): a view whose own expressions can
fail on some rows (a cast of text) fails dpsql's queries after the charge, so the owner
defines views with ``try_cast`` (SECURITY.md, Deploying).
"""

from __future__ import annotations

import contextlib
import re
import threading

from sqlglot import exp

from dpsql.backends import _boundary, dialects
from dpsql.backends.base import Backend
from dpsql.errors import BackendError
from dpsql.limits import Limits

#: Session settings for dpsql's queries, restored afterwards. ANSI mode off (errors
#: become NULLs, see the module docstring); and nothing may rewrite or reinterpret the
#: SQL text dpsql checked.
SAFE_CONF = {
    "spark.sql.ansi.enabled": "false",
    # ${env:X}, ${system:X}, ${spark.X} would be replaced everywhere, literals included
    "spark.sql.variable.substitute": "false",
    # BEGIN ... END would run several statements in one spark.sql call
    "spark.sql.scripting.enabled": "false",
    # |> (and a lone |) as pipe operators: a second grammar dpsql never writes
    "spark.sql.operatorPipeSyntaxEnabled": "false",
    "spark.sql.parser.singleCharacterPipeOperator.enabled": "false",
    # string literals and identifiers read as sqlglot writes them
    "spark.sql.parser.escapedStringLiterals": "false",
    "spark.sql.parser.quotedRegexColumnNames": "false",
    "spark.sql.ansi.doubleQuotedIdentifiers": "false",
    "spark.sql.legacy.exponentLiteralAsDecimal.enabled": "false",
    "spark.sql.legacy.bangEqualsNot": "false",
    "spark.sql.legacy.allowParameterlessCount": "false",
    # names and clauses resolve as written: inner CTEs shadow outer ones, HAVING stays
    # HAVING, set operations keep their standard precedence
    "spark.sql.legacy.ctePrecedencePolicy": "CORRECTED",
    "spark.sql.legacy.parser.havingWithoutGroupByAsWhere": "false",
    "spark.sql.legacy.setopsPrecedence.enabled": "false",
    # timestamps (Spark's TIMESTAMP is time-zone aware) read, written and cut into
    # parts in UTC: in a zone with daylight saving the repeated autumn hour is one local
    # text for two instants, so two groups would come back as one key
    "spark.sql.session.timeZone": "UTC",
}

_SCALARS = {"bigint": "BIGINT", "int": "INTEGER", "integer": "INTEGER", "smallint": "SMALLINT",
            "tinyint": "TINYINT", "double": "DOUBLE", "float": "FLOAT", "boolean": "BOOLEAN",
            "date": "DATE", "timestamp": "TIMESTAMP", "timestamp_ntz": "TIMESTAMP",
            "timestamp_ltz": "TIMESTAMP", "string": "VARCHAR", "binary": "BLOB"}
_STRING = re.compile(r"(string|varchar\(\d+\)|char\(\d+\))(?: collate (\w+))?")
_DECIMAL = re.compile(r"decimal\(\d+,\d+\)")
_COLLATE = re.compile(r"\bcollate (\w+)", re.IGNORECASE)


def duckdb_type(spark_type: str) -> str:
    """A Spark type's ``simpleString`` → the DuckDB type name.

    Only scalar types get scalar names. A string under a collation other than
    ``UTF8_BINARY`` keeps it (``VARCHAR COLLATE UTF8_LCASE``: its equality is not
    byte-wise), and arrays, maps, structs, variants, intervals keep Spark's own name,
    so neither passes for a plain column type.

    >>> duckdb_type("string"), duckdb_type("decimal(10,2)"), duckdb_type("timestamp_ntz")
    ('VARCHAR', 'DECIMAL(10,2)', 'TIMESTAMP')
    >>> duckdb_type("string collate UTF8_LCASE"), duckdb_type("array<string>")
    ('VARCHAR COLLATE UTF8_LCASE', 'ARRAY<STRING>')
    """
    t = spark_type.lower().strip()
    if _DECIMAL.fullmatch(t):
        return t.upper()
    string = _STRING.fullmatch(t)
    if string:
        collation = string.group(2)
        if collation is None or collation == "utf8_binary":
            return "VARCHAR"
        return "VARCHAR COLLATE " + collation.upper()
    return _SCALARS.get(t, t.upper())


def nonbinary_collations(spark_type: str) -> bool:
    """Whether a Spark type string holds a string under a collation whose equality is
    not byte-wise (anything but ``UTF8_BINARY``), at any depth."""
    return any(c.upper() != "UTF8_BINARY" for c in _COLLATE.findall(spark_type))


def is_spark_session(obj) -> bool:
    """True for a pyspark SparkSession (classic or Connect), without importing pyspark."""
    cls = type(obj)
    return cls.__name__ == "SparkSession" and cls.__module__.startswith("pyspark.")


class SparkBackend(Backend):
    dialect = "spark"
    supports_hash = True                 # xxhash64(..., seed)
    supports_no_external_access = False  # the cluster's grants decide
    supports_greatest_least = True
    supports_try = False                 # ANSI off plus try_* arithmetic instead
    supports_exact_integer_sums = False  # try_sum: NULL (read as 0) beyond 2^63
    supports_unique_constraints = False
    supports_materialized_ctes = False   # CTEs are inlined: one window, not three scans
    transforms = dialects.SPARK

    def __init__(self, session, limits: Limits | None = None):
        if not is_spark_session(session):
            raise BackendError(f"not a SparkSession: {type(session).__name__}")
        self._spark = session
        #: Kept for the owner's settings; Spark has no statement timeout to give them to.
        self.limits = limits or Limits()
        self._lock = threading.RLock()
        self._types: dict[str, dict[str, str] | None] = {}
        self.name = "spark session"

    @contextlib.contextmanager
    def _safe_session(self, stage: str):
        """Applies :data:`SAFE_CONF` for one query (``stage``: check or execute) and
        restores the session's own values afterwards; a session that refuses a setting
        runs nothing."""
        conf = self._spark.conf
        with self._lock:
            old = {key: conf.get(key, None) for key in SAFE_CONF}
            failure = None
            try:
                try:
                    for key, value in SAFE_CONF.items():
                        conf.set(key, value)
                except Exception as exc:  # noqa: BLE001 - py4j or Connect errors
                    failure = exc
                if failure is not None:
                    detail = f"cannot apply the safe settings: {type(failure).__name__}: {failure}"
                    raise (_boundary.plan_failed if stage == "check" else
                           _boundary.run_failed)(self.name, detail, None)
                yield
            finally:
                for key, value in old.items():
                    if value is None:
                        conf.unset(key)
                    else:
                        conf.set(key, value)

    def _spark_types(self, table: str) -> dict[str, str] | None:
        """Column name (lower-case) → Spark type string of ``table``, or None if absent."""
        key = table.lower()
        if key not in self._types:
            failure = None
            with self._lock:
                try:
                    if not self._spark.catalog.tableExists(key):
                        return None
                    fields = self._spark.table(key).schema.fields
                except Exception as exc:  # noqa: BLE001 - pyspark raises many kinds
                    failure = exc
            if failure is not None:
                raise _boundary.schema_failed(self.name, table, failure)
            self._types[key] = {f.name.lower(): f.dataType.simpleString() for f in fields}
        return self._types[key]

    def columns(self, table: str) -> dict[str, str] | None:
        types = self._spark_types(table)
        return None if types is None else {n: duckdb_type(t) for n, t in types.items()}

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        return set()  # Spark enforces no uniqueness: never trust a declared key

    def nonbinary_collation_columns(self, table: str) -> set[str]:
        """Columns whose type holds a string collated other than ``UTF8_BINARY``
        (``UTF8_LCASE``, ``UNICODE_CI``, ``..._RTRIM``...): equality is not byte-wise."""
        types = self._spark_types(table) or {}
        return {name for name, t in types.items() if nonbinary_collations(t)}

    def _one_query(self, sql: str, stage: str) -> None:
        """Refuses ``sql`` unless the session's own parser reads it as one query.

        Classic sessions only (Spark Connect parses on the server, where one
        ``spark.sql`` call takes one statement). Runs inside :meth:`_safe_session`, so
        the parser sees the text exactly as ``spark.sql`` will.
        """
        session = getattr(self._spark, "_jsparkSession", None)
        if session is None:
            return
        failure = None
        try:
            session.sessionState().sqlParser().parseQuery(sql)
        except Exception as exc:  # noqa: BLE001 - py4j and Spark parse errors
            failure = exc
        if failure is not None:
            raise _boundary.not_one_select(
                self.name, stage, f"{type(failure).__name__}: {failure}", sql)

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        sql = self.to_sql(expression)
        failure = None
        with self._safe_session("check"):
            self._one_query(sql, "check")
            try:  # analysis only: resolves names and types, reads and optimises nothing
                fields = self._spark.sql(sql).schema.fields
            except Exception as exc:  # noqa: BLE001
                failure = exc
        if failure is not None:
            raise _boundary.plan_failed(self.name, failure, sql)
        return [(f.name, duckdb_type(f.dataType.simpleString())) for f in fields]

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        sql = self.to_sql(expression)
        failure = None
        with self._safe_session("execute"):
            self._one_query(sql, "execute")
            try:
                frame = self._spark.sql(sql)
                columns = list(frame.columns)
                rows = [tuple(r) for r in frame.collect()]  # one row per group
            except Exception as exc:  # noqa: BLE001
                failure = exc
        if failure is not None:
            raise _boundary.run_failed(self.name, failure, sql)
        return columns, rows

    def close(self) -> None:
        """The session belongs to the caller: dpsql leaves it running."""
