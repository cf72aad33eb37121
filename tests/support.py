"""What the test modules share besides fixtures (those are in ``tests/conftest.py``).

Import it as ``from tests.support import ...`` (pytest runs from the checkout, as
``tests.privacy`` is imported too). It holds:

* **Availability of the optional backends**, checked once: PostgreSQL when
  ``DPSQL_TEST_POSTGRES_URL`` (dpsql's read-only role) and
  ``DPSQL_TEST_POSTGRES_ADMIN_URL`` (the owner, who loads data) are set, e.g. by
  ``eval "$(bash .ci/postgres.sh start)"``; Spark when pyspark and Java are installed.
  :data:`needs_postgres` and :data:`needs_spark` skip a test with the reason.
* **The backend matrix** :data:`BACKEND_MATRIX`, for ``@pytest.mark.parametrize("kind",
  BACKEND_MATRIX)``: DuckDB and SQLite always, PostgreSQL and Spark when present; Spark's
  cases are ``slow`` (a JVM, seconds per query), so ``pytest -m "not slow"`` leaves them.
* **The one Spark session** of the process (:func:`spark_session`), also used by the
  totality fuzzer outside pytest; the ``spark_session`` fixture stops it once at the
  end of the test session.
* **The golden-fixture file format** of ``tests/fixtures/`` (:func:`read_cases`,
  :func:`write_cases`).
* **Test-only hooks into a connection** (:func:`ledger_of`, :func:`backend_of`,
  :func:`duckdb_of`, :func:`prepare`, :func:`checked`): the one place where tests reach into
  :class:`dpsql.Connection`'s internals, so that a change there is mended here. They are
  deliberately not part of the ``dpsql`` package: a shipped, documented way to read
  statistics without noise or to get the backend connection would invite exactly what
  the trust boundary forbids (DESIGN.md).
"""

from __future__ import annotations

import datetime
import importlib.util
import logging
import os
import re
import shutil
from pathlib import Path

import pytest

# -- availability of the optional backends -----------------------------------------------

PG_URL_VAR = "DPSQL_TEST_POSTGRES_URL"
PG_ADMIN_VAR = "DPSQL_TEST_POSTGRES_ADMIN_URL"
#: dpsql's read-only role on the test server, or None.
PG_URL = os.environ.get(PG_URL_VAR)
#: The owner's role (creates and loads the test tables), or None.
PG_ADMIN_URL = os.environ.get(PG_ADMIN_VAR)
HAVE_POSTGRES = bool(PG_URL and PG_ADMIN_URL)
NO_POSTGRES = (f"no PostgreSQL server: set {PG_URL_VAR} and {PG_ADMIN_VAR} "
               "(eval \"$(bash .ci/postgres.sh start)\")")
HAVE_SPARK = bool(importlib.util.find_spec("pyspark") is not None and shutil.which("java"))
NO_SPARK = "pyspark or Java is not installed (pip install dpsql[spark])"

needs_postgres = pytest.mark.skipif(not HAVE_POSTGRES, reason=NO_POSTGRES)
needs_spark = pytest.mark.skipif(not HAVE_SPARK, reason=NO_SPARK)

#: Every backend kind, as ``parametrize`` values: absent engines skip with the reason.
BACKEND_MATRIX = [
    "duckdb",
    "sqlite",
    pytest.param("postgres", marks=needs_postgres),
    pytest.param("spark", marks=[needs_spark, pytest.mark.slow]),
]


def _have_tpch() -> bool:
    from dpsql.datasets import tpchgen

    try:
        tpchgen()
    except FileNotFoundError:
        return False
    return True


#: Whether ``tpchgen-cli`` is installed (the TPC-H cases of the matrix need it).
HAVE_TPCH = _have_tpch()

#: The catalog of the ``edge`` table the ``backends`` fixture loads on every backend.
EDGE_CATALOG = {
    "dataset": "edge",
    "tables": {"edge": {"user_key": "uid", "max_groups": 2, "max_rows": 2, "columns": {
        "uid": {"type": "int"},
        "i": {"type": "int", "lower": -100, "upper": 100, "nullable": True},
        "f": {"type": "float", "lower": -100, "upper": 100, "nullable": True},
        "s": {"type": "string", "nullable": True},
        "d": {"type": "date", "nullable": True},
    }}},
}
_BIG, _SMALL = 9223372036854775807, -9223372036854775808
#: Values far outside the catalog's bounds (allowed: bounds are enforced by clamping)
#: that make naive SQL fail on one engine or another.
EDGE_ROWS = [
    (1, _BIG, 1e308, "abc", datetime.date(2020, 1, 1)),
    (2, _SMALL, -1e308, "12", datetime.date(1, 1, 1)),
    (3, 0, 0.0, "", datetime.date(9999, 12, 31)),
    (4, 3037000500, 1e-300, "1e999", datetime.date(2000, 2, 29)),
    (5, None, None, None, None),
    (6, -1, -0.5, "2020-02-30", datetime.date(1970, 1, 1)),
    (6, 7, 2.5, " 42 ", datetime.date(2024, 12, 31)),
    (7, 4611686018427387904, 5e-324, "9" * 400, datetime.date(1999, 12, 31)),
]


def database_for(kind: str, backends):
    """What a user hands to ``dpsql.connect`` for the ``backends`` fixture's ``kind``."""
    backend = backends(kind)[0]
    if kind == "duckdb":
        return backend.name
    if kind == "sqlite":
        return f"sqlite:///{backend.path}"
    if kind == "postgres":
        return PG_URL
    return backend._spark


class Unavailable(Exception):
    """A backend that cannot run here (no server, no pyspark or Java): skip with this."""


_SPARK = None


def spark_session():
    """The process's local SparkSession (two threads, no UI), created on first use.

    One configuration for every test, so that no test's outcome depends on which module
    happened to create the session first.

    Raises:
        Unavailable: pyspark or Java is not installed.
    """
    global _SPARK
    if _SPARK is not None:
        return _SPARK
    if not HAVE_SPARK:
        raise Unavailable(NO_SPARK)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    _SPARK = (SparkSession.builder.master("local[2]").appName("dpsql-tests")
              .config("spark.ui.enabled", "false")
              .config("spark.ui.showConsoleProgress", "false")
              .config("spark.driver.bindAddress", "127.0.0.1")
              .config("spark.driver.host", "127.0.0.1")
              .config("spark.sql.shuffle.partitions", "2")
              .config("spark.default.parallelism", "2")
              .config("spark.sql.adaptive.enabled", "false")
              .getOrCreate())
    _SPARK.sparkContext.setLogLevel("OFF")
    # pyspark logs every analysis error of a refused query as a JSON record on stderr
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return _SPARK


def stop_spark() -> None:
    """Stops the process's Spark session, if one was started."""
    global _SPARK
    if _SPARK is not None:
        _SPARK.stop()
        _SPARK = None


# -- golden fixture files ----------------------------------------------------------------

_OPTION = re.compile(r"#\s*([a-z_]+)\s*:\s*(.+?)\s*$")


def read_cases(path: Path, options: dict) -> tuple[list[str], list[dict]]:
    """Parses a golden fixture file into its header and cases.

    The format: comment lines (``#``) before the first statement are the header; then
    cases, each an input statement and its expected output, both ending in ``;``
    (either may span lines, joined by single spaces). A comment ``# name: value``
    whose name is a key of ``options`` sets that option of the next case, converted by
    ``options[name]``; other comments are ignored. A last case without its expected
    statement gets ``expected`` None.

    Returns:
        ``(header lines, [{"options": {...}, "sql": ..., "expected": ...}, ...])``.
    """
    header: list[str] = []
    cases: list[dict] = []
    pending: dict = {}
    buf: list[str] = []
    statements: list[str] = []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            match = _OPTION.match(stripped)
            if match and match.group(1) in options:
                pending[match.group(1)] = options[match.group(1)](match.group(2))
            elif not cases and not statements:
                header.append(line)
            continue
        if not stripped:
            continue
        buf.append(stripped)
        if stripped.endswith(";"):
            statements.append(" ".join(buf)[:-1])
            buf = []
            if len(statements) == 1:
                cases.append({"options": pending, "sql": statements[0], "expected": None})
                pending = {}
            else:
                cases[-1]["expected"] = statements[1]
                statements = []
    return header, cases


def write_cases(path: Path, header: list[str], cases: list[dict]) -> None:
    """Writes ``cases`` back in the format :func:`read_cases` reads."""
    lines = [*header, ""] if header else []
    for case in cases:
        lines += [f"# {k}: {v}" for k, v in case["options"].items()]
        lines += [case["sql"] + ";", case["expected"] + ";", ""]
    path.write_text("\n".join(lines))


# -- test-only hooks into a connection ---------------------------------------------------

def _engine_connection(conn):
    """The :class:`dpsql.Connection` behind ``conn`` (itself, or a DB-API connection's)."""
    from dpsql import dbapi

    return conn._open() if isinstance(conn, dbapi.Connection) else conn


def ledger_of(conn):
    """The :class:`~dpsql.ledger.Ledger` ``conn`` charges (a :class:`dpsql.Connection` or
    a DB-API connection), also when it is in memory: read it with its public methods
    (``log()``, ``spent()``, ``verify()``)."""
    return _engine_connection(conn)._ledger


def backend_of(conn):
    """The :class:`~dpsql.backends.base.Backend` ``conn`` runs its SQL on, to spy on it
    or make it fail in a test."""
    return _engine_connection(conn)._backend


def duckdb_of(conn):
    """The DuckDB connection a DuckDB-backed ``conn`` holds (to check its settings)."""
    return backend_of(conn)._con


def prepare(conn, sql, epsilon=1.0, delta=1e-6, max_groups=None, max_rows=None,
            mechanism=None):
    """``(plan, rewritten expression, backend)`` of ``sql`` on ``conn``: everything the
    engine does before the schema check, with nothing run and nothing charged."""
    return _engine_connection(conn)._prepare(sql, epsilon, delta, max_groups, max_rows,
                                             mechanism)


def checked(conn, plan, expression, backend):
    """The engine's schema and uniqueness checks of a prepared query:
    ``(expression to run, function reading its rows back)``."""
    return _engine_connection(conn)._check(plan, expression, backend)


def to_run(conn, plan, expression, backend):
    """What the engine runs of a prepared query and what it shows: ``(expression to
    run, function reading its rows back, SQL shown)``; the checks, and the steps left
    out where the data proves them needless (dpsql.proven_run)."""
    from dpsql.proven_run import run_proven

    engine = _engine_connection(conn)
    return run_proven(plan, backend, engine._check,
                            *engine._check(plan, expression, backend))


def plan_cache_of(conn):
    """The :class:`~dpsql.plan_cache.PlanCache` of ``conn`` (its ``hits`` and entries)."""
    return _engine_connection(conn)._plans


# -- the command line, in process ---------------------------------------------------------

class CliRun:
    """What one command-line call left: ``returncode``, ``stdout``, ``stderr``, as a
    :class:`subprocess.CompletedProcess` would have it."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def cli(*args, input: str | None = None, check: bool = True) -> CliRun:
    """``dpsql ARGS`` run in this process through click's test runner.

    About a second faster per call than a subprocess (no interpreter start, no import
    of dpsql and its dependencies), which is most of the CLI tests' time. What only a
    real process shows (the installed entry point, a terminal, signals, environment
    given whole) is tested through :mod:`subprocess` in ``tests/test_cli.py``. An
    exception the CLI does not turn into a message fails the test with its traceback,
    where a real process would print it and exit 1.
    """
    from click.testing import CliRunner

    from dpsql.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args], input=input,
                                catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    run = CliRun(result.exit_code, result.stdout, result.stderr)
    if check:
        assert run.returncode == 0, run.stderr
    return run
