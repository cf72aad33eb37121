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
"""

from __future__ import annotations

import contextlib
import threading

from sqlglot import exp

from dpsql.backends import dialects
from dpsql.backends.base import Backend
from dpsql.errors import BackendError

#: Session settings for dpsql's queries, restored afterwards.
SAFE_CONF = {"spark.sql.ansi.enabled": "false"}


def duckdb_type(spark_type: str) -> str:
    """A Spark type's ``simpleString`` → the DuckDB type name."""
    t = spark_type.lower().strip()
    if t.startswith("decimal"):
        return t.upper()
    if t.startswith(("varchar", "char", "string")):
        return "VARCHAR"
    if t.startswith("timestamp"):
        return "TIMESTAMP"
    return {"bigint": "BIGINT", "int": "INTEGER", "integer": "INTEGER", "smallint": "SMALLINT",
            "tinyint": "TINYINT", "double": "DOUBLE", "float": "FLOAT", "boolean": "BOOLEAN",
            "date": "DATE"}.get(t, t.upper())


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

    def __init__(self, session):
        if not is_spark_session(session):
            raise BackendError(f"not a SparkSession: {type(session).__name__}")
        self._spark = session
        self._lock = threading.RLock()
        self._columns: dict[str, dict[str, str] | None] = {}
        self.name = "spark session"

    @contextlib.contextmanager
    def _safe_session(self):
        conf = self._spark.conf
        with self._lock:
            old = {key: conf.get(key, None) for key in SAFE_CONF}
            for key, value in SAFE_CONF.items():
                conf.set(key, value)
            try:
                yield
            finally:
                for key, value in old.items():
                    if value is None:
                        conf.unset(key)
                    else:
                        conf.set(key, value)

    def columns(self, table: str) -> dict[str, str] | None:
        key = table.lower()
        if key not in self._columns:
            with self._lock:
                try:
                    if not self._spark.catalog.tableExists(key):
                        return None
                    fields = self._spark.table(key).schema.fields
                except Exception as exc:  # noqa: BLE001 - pyspark raises many kinds
                    raise BackendError(f"cannot read the schema of {table!r}: "
                                       f"{type(exc).__name__}") from None
            self._columns[key] = {f.name.lower(): duckdb_type(f.dataType.simpleString())
                                  for f in fields}
        return self._columns[key]

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        return set()  # Spark enforces no uniqueness: never trust a declared key

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        sql = self.to_sql(expression)
        with self._safe_session():
            try:  # analysis only: resolves names and types, reads no data
                fields = self._spark.sql(sql).schema.fields
            except Exception as exc:  # noqa: BLE001
                err = BackendError(
                    f"the backend cannot plan the rewritten query ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); nothing was "
                    "charged")
                err.charged = False
                raise err from None
        return [(f.name, duckdb_type(f.dataType.simpleString())) for f in fields]

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        sql = self.to_sql(expression)
        with self._safe_session():
            try:
                frame = self._spark.sql(sql)
                columns = list(frame.columns)
                rows = [tuple(r) for r in frame.collect()]  # one row per group
            except Exception as exc:  # noqa: BLE001
                raise BackendError(
                    f"the backend failed while running the query ({type(exc).__name__}); "
                    "the charge is kept because the failure may depend on the data") from None
        return columns, rows

    def close(self) -> None:
        """The session belongs to the caller: dpsql leaves it running."""
