"""The backends' side of the trust boundary (issue 13 items 2 and 7; issue 14 items 5, 8).

Every backend method is called directly, with the backend's ``to_sql`` replaced by a
fixed text, so that these tests hold whatever the rewriter and the output check do in
front of them (defence in depth):

* **One statement, bound not executed.** A text carrying a second statement is refused
  by ``check`` and by ``execute`` and nothing of the second statement runs: that
  statement fails *with the secret row's values in the engine's message* if it ever
  runs, so the secret must appear neither in the error nor in the owner's log. A single
  statement that is not a query (``SET``, ``PRAGMA``) is refused and changes nothing. A
  query whose execution fails on the data passes ``check`` (binding runs nothing) and
  fails in ``execute`` (after the charge).
* **No engine text to the analyst.** Every error is one of the fixed messages of
  :mod:`dpsql.backends._boundary`, identical on every backend, without a chained
  driver exception; the engine's text goes to the ``dpsql.owner`` log, one line each.
* **Backend settings.** Spark's ``${...}`` substitution is off for dpsql's queries;
  PostgreSQL and SQLite enforce the owner's statement timeout.
* **Metadata.** ``unique_columns`` returns only keys that cannot hold NULL (checked
  against the database itself: a row with NULL keys is inserted on a writable copy);
  ``nonbinary_collation_columns`` lists exactly the columns under which different
  strings compare equal (checked against the engine's own comparisons).

DuckDB and SQLite always run; PostgreSQL when ``DPSQL_TEST_POSTGRES_URL`` and
``DPSQL_TEST_POSTGRES_ADMIN_URL`` are set (``eval "$(bash .ci/postgres.sh start)"``);
Spark when pyspark and Java are installed.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import sqlite3
import time

import duckdb
import pytest
from sqlglot import exp

from dpsql.backends import _boundary, open_backend
from dpsql.backends.duckdb import _LOCKED as DUCKDB_CONFIG
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.sqlite import SQLiteBackend
from dpsql.errors import BackendError
from dpsql.limits import Limits
from tests.support import BACKEND_MATRIX, PG_ADMIN_URL, PG_URL, needs_postgres, needs_spark

KINDS = BACKEND_MATRIX

#: The secret row: whatever leaks it fails the test.
SECRET = (42, "Zebulon Quixote", 77)
PEOPLE = [SECRET, (1, "Ann", 30), (2, "Bob", 40)]
#: A tree to hand the backends; its SQL comes from the patched ``to_sql``.
TREE = exp.select(exp.alias_(exp.Literal.number(1), "y"))

#: A statement that fails with the secret row's values in the engine's own message if
#: it runs (SQLite has no such function: there the single-statement API is the proof).
LEAK = {
    "duckdb": "SELECT error(name || '|' || CAST(age AS VARCHAR)) AS y FROM bb_people "
              "WHERE pid = 42",
    "postgres": "SELECT CAST(name || '|' || age AS INT) AS y FROM bb_people WHERE pid = 42",
    "sqlite": "SELECT CAST(name AS INT) AS y FROM bb_people WHERE pid = 42",
    "spark": "SELECT assert_true(pid <> 42, concat(name, '|', age)) AS y FROM bb_people",
}
#: One query that binds and plans fine but fails when it runs on the secret row.
RUNTIME_FAILURE = {
    "duckdb": "SELECT error(name) AS y FROM bb_people WHERE pid = 42",
    "postgres": "SELECT CAST(name AS INT) AS y FROM bb_people",
    "sqlite": "SELECT json(name) AS y FROM bb_people",
    "spark": "SELECT assert_true(pid <> 42, name) AS y FROM bb_people",
}

# -- the databases ---------------------------------------------------------------------

#: Keys declared on bb_keys (every backend but Spark): which ones may hold NULL.
KEYS_DDL = ("CREATE TABLE bb_keys (pk INTEGER PRIMARY KEY, u INTEGER UNIQUE, "
            "un INTEGER NOT NULL UNIQUE, a INTEGER, b INTEGER NOT NULL, c INTEGER NOT NULL, "
            "UNIQUE (a, b), UNIQUE (b, c))")
KEYS_DECLARED = {("pk",), ("u",), ("un",), ("a", "b"), ("b", "c")}
KEYS_COLUMNS = ["pk", "u", "un", "a", "b", "c"]


def _build_duckdb(path):
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE bb_people (pid INTEGER PRIMARY KEY, name VARCHAR, age INTEGER)")
    con.executemany("INSERT INTO bb_people VALUES (?, ?, ?)", PEOPLE)
    con.execute(KEYS_DDL)
    con.execute("INSERT INTO bb_keys VALUES (1, 1, 1, 1, 1, 1)")
    icu = con.execute("SELECT count(*) FROM pragma_collations() WHERE collname = 'de'").fetchone()
    con.execute("CREATE TABLE bb_coll (plain VARCHAR, ci VARCHAR COLLATE NOCASE, "
                "na VARCHAR COLLATE NOACCENT, nfc VARCHAR COLLATE NFC, "
                "cana VARCHAR COLLATE NOCASE.NOACCENT, n INTEGER"
                + (", de VARCHAR COLLATE de" if icu[0] else "") + ")")
    con.execute("CREATE VIEW bb_vcoll AS SELECT plain, plain COLLATE NOCASE AS pci, ci "
                "FROM bb_coll")
    con.close()
    return {"bb_coll": {"ci", "na", "nfc", "cana"} | ({"de"} if icu[0] else set()),
            "bb_vcoll": {"pci", "ci"}}


def _build_sqlite(path):
    con = sqlite3.connect(path)
    con.executescript(f"""
        CREATE TABLE bb_people (pid INTEGER PRIMARY KEY, name TEXT, age INTEGER);
        {KEYS_DDL};
        INSERT INTO bb_keys VALUES (1, 1, 1, 1, 1, 1);
        CREATE UNIQUE INDEX bb_keys_partial ON bb_keys (c) WHERE c > 0;
        CREATE UNIQUE INDEX bb_keys_expr ON bb_keys (b + c);
        CREATE TABLE bb_pk_bigint (id BIGINT PRIMARY KEY);
        CREATE TABLE bb_pk_desc (id INTEGER PRIMARY KEY DESC);
        CREATE TABLE bb_pk_text (id TEXT NOT NULL PRIMARY KEY);
        CREATE TABLE bb_pk_norowid (id INT PRIMARY KEY, v INT) WITHOUT ROWID;
        CREATE TABLE bb_coll (plain TEXT, bin TEXT COLLATE BINARY, ci TEXT COLLATE NOCASE,
                              rt TEXT COLLATE RTRIM, n INTEGER);
        CREATE VIEW bb_vcoll AS SELECT plain, plain COLLATE NOCASE AS pci, ci FROM bb_coll;
    """)
    con.executemany("INSERT INTO bb_people VALUES (?, ?, ?)", PEOPLE)
    con.commit()
    con.close()
    return {"bb_coll": {"ci", "rt"}, "bb_vcoll": {"pci", "ci"}}


def _pg_admin():
    import sqlalchemy as sa

    return sa.create_engine(PG_ADMIN_URL)


def _build_postgres():
    engine = _pg_admin()
    with engine.begin() as conn:
        run = conn.exec_driver_sql
        for table in ("bb_vcoll",):
            run(f"DROP VIEW IF EXISTS {table}")
        for table in ("bb_people", "bb_keys", "bb_child", "bb_parent", "bb_part", "bb_dups",
                      "bb_coll", "bb_likes"):
            run(f"DROP TABLE IF EXISTS {table} CASCADE")
        run("DROP DOMAIN IF EXISTS bb_citext_domain")
        run("CREATE TABLE bb_people (pid integer PRIMARY KEY, name text, age integer)")
        run("INSERT INTO bb_people VALUES (42, 'Zebulon Quixote', 77), (1, 'Ann', 30), "
            "(2, 'Bob', 40)")
        run(KEYS_DDL)
        run("INSERT INTO bb_keys VALUES (1, 1, 1, 1, 1, 1)")
        run("CREATE UNIQUE INDEX bb_keys_partial ON bb_keys (c) WHERE c > 0")
        run("CREATE UNIQUE INDEX bb_keys_expr ON bb_keys ((b + c))")
        # a parent's unique index does not cover its inheritance children
        run("CREATE TABLE bb_parent (id integer PRIMARY KEY)")
        run("CREATE TABLE bb_child () INHERITS (bb_parent)")
        run("INSERT INTO bb_parent VALUES (1)")
        run("INSERT INTO bb_child VALUES (1)")
        # a partitioned table's unique index covers every partition
        run("CREATE TABLE bb_part (id integer NOT NULL, PRIMARY KEY (id)) "
            "PARTITION BY RANGE (id)")
        run("CREATE TABLE bb_part_1 PARTITION OF bb_part FOR VALUES FROM (0) TO (1000)")
        run("CREATE TABLE bb_dups (k integer NOT NULL)")
        run("INSERT INTO bb_dups VALUES (1), (1)")
        run("CREATE COLLATION IF NOT EXISTS bb_ci "
            "(provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
        run("CREATE EXTENSION IF NOT EXISTS citext")
        run("CREATE DOMAIN bb_citext_domain AS citext")
        run('CREATE TABLE bb_coll (plain text, c text COLLATE "C", ci text COLLATE bb_ci, '
            "ct citext, dct bb_citext_domain, n integer)")
        run("CREATE VIEW bb_vcoll AS SELECT plain, plain COLLATE bb_ci AS pci, ci FROM bb_coll")
        # names whose statistics make a planning-time error depend on the data
        run("CREATE TABLE bb_likes AS SELECT CASE WHEN i %% 3 = 0 THEN 'abcdef' "
            "ELSE 'zz' || i END AS name FROM generate_series(1, 3000) i")
        run("ANALYZE bb_likes")
        # the reader may read them all (default privileges may not exist elsewhere)
        run("GRANT SELECT ON bb_people, bb_keys, bb_parent, bb_child, bb_part, bb_dups, "
            "bb_coll, bb_vcoll, bb_likes TO PUBLIC")
    # an invalid unique index: CREATE INDEX CONCURRENTLY failed over duplicates
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn, \
            pytest.raises(Exception, match="could not create unique index"):
        conn.exec_driver_sql("CREATE UNIQUE INDEX CONCURRENTLY bb_dups_k ON bb_dups (k)")
    engine.dispose()
    return {"bb_coll": {"ci", "ct", "dct"}, "bb_vcoll": {"pci", "ci"}}


def _build_spark(session):
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    session.createDataFrame(PEOPLE, "pid INT, name STRING, age INT") \
        .createOrReplaceTempView("bb_people")
    schema = StructType([StructField("plain", StringType()),
                         StructField("bin", StringType("UTF8_BINARY")),
                         StructField("lcase", StringType("UTF8_LCASE")),
                         StructField("uni", StringType("UNICODE")),
                         StructField("uci", StringType("UNICODE_CI")),
                         StructField("rtrim", StringType("UTF8_BINARY_RTRIM")),
                         StructField("n", IntegerType())])
    session.createDataFrame([("a", "b", "c", "d", "e", "f", 1)], schema) \
        .createOrReplaceTempView("bb_coll")
    return {"bb_coll": {"lcase", "uni", "uci", "rtrim"}}


class Built:
    """One backend of a kind over the test tables, and what its tables should report."""

    def __init__(self, kind, backend, collations, source=None):
        self.kind = kind
        self.backend = backend
        self.collations = collations
        self.source = source   # the file (DuckDB, SQLite) or the session (Spark)


@pytest.fixture(scope="module")
def built(tmp_path_factory, request):
    opened: dict[str, Built] = {}

    def get(kind) -> Built:
        if kind in opened:
            return opened[kind]
        if kind == "duckdb":
            path = tmp_path_factory.mktemp("boundary") / "db.duckdb"
            collations = _build_duckdb(path)
            made = Built(kind, DuckDBBackend(path), collations, path)
        elif kind == "sqlite":
            path = tmp_path_factory.mktemp("boundary") / "db.sqlite"
            collations = _build_sqlite(path)
            made = Built(kind, SQLiteBackend(f"sqlite:///{path}"), collations, path)
        elif kind == "postgres":
            collations = _build_postgres()
            made = Built(kind, open_backend(PG_URL), collations)
        else:
            from dpsql.backends.spark import SparkBackend

            session = request.getfixturevalue("spark_session")
            collations = _build_spark(session)
            made = Built(kind, SparkBackend(session), collations, session)
        opened[kind] = made
        return made

    yield get
    for made in opened.values():
        made.backend.close()


def owner_records(caplog) -> list[str]:
    records = [r for r in caplog.records if r.name == "dpsql.owner"]
    assert all(r.levelno == logging.WARNING for r in records)
    messages = [r.getMessage() for r in records]
    # one line each: control characters in engine text are escaped
    assert not any("\n" in m or "\r" in m or "\x1b" in m for m in messages), messages
    return messages


def assert_stable(err: BackendError, message: str, charged: bool) -> None:
    """The analyst's error: a fixed message, the right charge, no driver exception."""
    assert str(err) == message
    assert err.charged is charged
    assert err.__context__ is None and err.__cause__ is None
    for value in ("Zebulon", "Quixote", "|77"):
        assert value not in str(err)


def patch_sql(monkeypatch, backend, sql):
    monkeypatch.setattr(backend, "to_sql", lambda expression: sql)


# -- one statement, bound not executed -------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_statement_never_runs(kind, built, monkeypatch, caplog):
    backend = built(kind).backend
    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    texts = ["SELECT 1 AS x; " + LEAK[kind],                  # a second statement
             "SELECT 1 AS x;\n" + LEAK[kind] + ";",
             LEAK[kind] + "; SELECT 1 AS x"]                   # the leaking one first
    if kind == "spark":                                       # a SQL script block
        texts.append(f"BEGIN SELECT 1 AS x; {LEAK[kind]}; END")
    for sql in texts:
        patch_sql(monkeypatch, backend, sql)
        with pytest.raises(BackendError) as info:
            backend.check(TREE)
        assert_stable(info.value, _boundary.PLAN_FAILED, charged=False)
        with pytest.raises(BackendError) as info:
            backend.execute(TREE)
        assert_stable(info.value, _boundary.RUN_FAILED, charged=True)
    log = owner_records(caplog)
    assert len(log) == 2 * len(texts)
    assert all(backend.name in m for m in log)
    # had the leaking statement run, the engine's message would quote the secret row
    assert not any("Zebulon" in m for m in log), log
    if kind == "sqlite":  # refused by the single-statement API before anything ran
        assert all("one statement at a time" in m for m in log), log


#: A single statement that is not a query, and how to see that it did not run.
NOT_A_QUERY = {
    "duckdb": ("SET threads = 1", "SELECT current_setting('threads')"),
    "sqlite": ("PRAGMA table_info(bb_people)", None),  # harmless, yet not a query
    "postgres": ("SET statement_timeout = 0", "SHOW statement_timeout"),
    "spark": ("SET spark.sql.shuffle.partitions = 7", "spark.sql.shuffle.partitions"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_statement_that_is_not_a_query_is_refused(kind, built, monkeypatch, caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    made = built(kind)
    backend = made.backend
    statement, probe = NOT_A_QUERY[kind]
    if kind == "duckdb":  # an owner's open connection: its settings are not locked
        con = duckdb.connect()
        con.execute("SET threads = 3")
        backend = DuckDBBackend(con)

        def setting():
            return con.execute(probe).fetchone()[0]
    elif kind == "sqlite":  # the authorizer compiles nothing but reading for a query
        def setting():
            return None
    elif kind == "postgres":
        def setting():
            with backend._engine.connect() as conn:
                return conn.exec_driver_sql(probe).scalar()
    else:
        def setting():
            return made.source.conf.get(probe)
    before = setting()
    patch_sql(monkeypatch, backend, statement)
    with pytest.raises(BackendError) as info:
        backend.check(TREE)
    assert_stable(info.value, _boundary.PLAN_FAILED, charged=False)
    assert setting() == before
    with pytest.raises(BackendError) as info:
        backend.execute(TREE)
    assert_stable(info.value, _boundary.RUN_FAILED, charged=True)
    assert setting() == before
    assert len(owner_records(caplog)) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_check_binds_without_running(kind, built, monkeypatch, caplog):
    """A query that fails only when it runs on the secret row passes the pre-charge check
    (binding reads no data) and fails in execute, after the charge."""
    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    backend = built(kind).backend
    patch_sql(monkeypatch, backend, RUNTIME_FAILURE[kind])
    schema = backend.check(TREE)
    assert [name.lower() for name, _ in schema] == ["y"]
    assert owner_records(caplog) == []
    with pytest.raises(BackendError) as info:
        backend.execute(TREE)
    assert_stable(info.value, _boundary.RUN_FAILED, charged=True)
    log = owner_records(caplog)
    assert len(log) == 1 and "execute failed" in log[0]
    if kind != "sqlite":  # the engine's own words, with the value, are the owner's
        assert "Zebulon" in log[0]


def test_duckdb_planning_errors_are_refused_before_the_charge(built, monkeypatch, caplog):
    """What DuckDB refuses while binding is refused by check, for free: here a function
    over a type it does not take. (DuckDB 2.0.1 plans a 5000-digit literal compared with
    a BIGINT, and a LIMIT past 2**63, without complaint and fails only when running: the
    first is total under the allow-list, the second dpsql refuses itself.)"""
    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    backend = built("duckdb").backend
    patch_sql(monkeypatch, backend, "SELECT COUNT(*) AS n FROM bb_people "
                                    "WHERE lower(age) = 'a'")
    with pytest.raises(BackendError) as info:
        backend.check(TREE)
    assert_stable(info.value, _boundary.PLAN_FAILED, charged=False)
    assert "Binder" in owner_records(caplog)[0]


@needs_postgres
def test_postgres_check_does_not_plan(built, monkeypatch):
    """PostgreSQL's planner applies operators to the column statistics (most common
    values, histogram): ``ILIKE 'abc\\'`` fails while *planning* exactly when a frequent
    name starts with ``abc``. A check that planned would refuse it for free: an oracle on
    the data. check only parses and describes; the failure comes with execute, charged."""
    made = built("postgres")
    backend = made.backend
    admin = _pg_admin()
    try:
        with admin.connect() as conn:  # the oracle exists: planning fails on data only
            with pytest.raises(Exception, match="escape character"):
                conn.exec_driver_sql(
                    "EXPLAIN SELECT count(*) FROM bb_likes WHERE name ILIKE 'abc\\'")
            conn.rollback()
            conn.exec_driver_sql("EXPLAIN SELECT count(*) FROM bb_likes WHERE name ILIKE 'xyz\\'")
    finally:
        admin.dispose()
    for prefix in ("abc", "xyz"):
        patch_sql(monkeypatch, backend,
                  f"SELECT count(*) AS n FROM bb_likes WHERE name ILIKE '{prefix}\\'")
        assert backend.check(TREE) == [("n", "BIGINT")]
    assert backend.execute(TREE) == (["n"], [(0,)])  # 'xyz\': no name starts with it


@needs_postgres
def test_postgres_runs_queries_as_cursors_of_one_statement(built, monkeypatch):
    backend = built("postgres").backend
    patch_sql(monkeypatch, backend, "SELECT 'a%' AS x, 5 % 3 AS y")  # '%' is not a marker
    assert backend.execute(TREE) == (["x", "y"], [("a%", 2)])
    patch_sql(monkeypatch, backend, "SELECT count(*) AS n FROM bb_likes WHERE name ILIKE 'abc\\'")
    with pytest.raises(BackendError) as info:
        backend.execute(TREE)
    assert_stable(info.value, _boundary.RUN_FAILED, charged=True)
    patch_sql(monkeypatch, backend, "SELECT 'a\x00' AS x")  # libpq would cut it short
    with pytest.raises(BackendError) as info:
        backend.check(TREE)
    assert_stable(info.value, _boundary.PLAN_FAILED, charged=False)


# -- settings --------------------------------------------------------------------------


@pytest.mark.slow
@needs_spark
def test_spark_does_not_substitute_variables(built, monkeypatch, caplog):
    """``${env:...}``, ``${system:...}`` and ``${spark....}`` stay text in dpsql's queries
    (Spark substitutes them by default, string literals included)."""
    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    made = built("spark")
    session, backend = made.source, made.backend
    texts = ("${env:HOME}", "${system:user.name}", "${spark.app.name}", "${hivevar:x}")
    home = session.sql("SELECT '${env:HOME}' AS h").collect()[0][0]
    assert home != "${env:HOME}", "this session does not substitute: the test proves nothing"
    before = session.conf.get("spark.sql.variable.substitute")
    sql = "SELECT " + ", ".join(f"'{t}' AS v{i}" for i, t in enumerate(texts))
    patch_sql(monkeypatch, backend, sql)
    assert [name for name, _ in backend.check(TREE)] == [f"v{i}" for i in range(len(texts))]
    assert backend.execute(TREE)[1] == [texts]
    assert session.conf.get("spark.sql.variable.substitute") == before
    # a planning error would have quoted the substituted value
    patch_sql(monkeypatch, backend, "SELECT CAST(CONCAT(name, '${env:HOME}') AS ARRAY<INT>) "
                                    "AS y FROM bb_people")
    with pytest.raises(BackendError) as info:
        backend.check(TREE)
    assert_stable(info.value, _boundary.PLAN_FAILED, charged=False)
    assert home not in str(info.value)
    assert not any(home in m for m in owner_records(caplog))


@pytest.mark.slow
@needs_spark
def test_spark_session_settings_are_restored(built, monkeypatch):
    from dpsql.backends.spark import SAFE_CONF

    made = built("spark")
    session, backend = made.source, made.backend
    session.conf.set("spark.sql.ansi.enabled", "true")
    session.conf.set("spark.sql.scripting.enabled", "true")
    before = {key: session.conf.get(key, None) for key in SAFE_CONF}
    patch_sql(monkeypatch, backend, "SELECT COUNT(*) AS n FROM bb_people")
    assert backend.execute(TREE) == (["n"], [(3,)])
    patch_sql(monkeypatch, backend, "SELECT 1 AS x; SELECT 2 AS y")
    with pytest.raises(BackendError):
        backend.check(TREE)
    assert {key: session.conf.get(key, None) for key in SAFE_CONF} == before


@needs_postgres
def test_postgres_sessions_get_the_owners_timeout(monkeypatch):
    import sqlalchemy as sa

    url = sa.make_url(PG_URL)
    # the owner's URL options are kept, and cannot turn read-only transactions off
    url = url.update_query_dict(
        {"options": "-csearch_path=pg_catalog,public -cdefault_transaction_read_only=off"})
    backend = open_backend(url.render_as_string(hide_password=False),
                           limits=Limits(statement_timeout_seconds=0.5))
    try:
        with backend._engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "500ms"
            assert conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
            path = conn.exec_driver_sql("SHOW search_path").scalar()
            assert path.replace(" ", "") == "pg_catalog,public"
        patch_sql(monkeypatch, backend, "SELECT pg_sleep(5) AS x")
        started = time.monotonic()
        with pytest.raises(BackendError) as info:
            backend.execute(TREE)
        assert time.monotonic() - started < 4
        assert_stable(info.value, _boundary.RUN_FAILED, charged=True)
    finally:
        backend.close()
    default = open_backend(PG_URL)
    try:
        with default._engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "10min"
    finally:
        default.close()


def test_sqlite_interrupts_a_statement_after_the_timeout(built, monkeypatch, sec):
    path = built("sqlite").source
    backend = SQLiteBackend(f"sqlite:///{path}", limits=Limits(statement_timeout_seconds=0.3))
    try:
        patch_sql(monkeypatch, backend, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
                                        "SELECT n + 1 FROM r) SELECT count(*) AS n FROM r")
        assert backend.check(TREE)  # compiling is quick
        started = time.monotonic()
        finished, _, error = sec.call_with_timeout(lambda: backend.execute(TREE), 10)
        assert finished, "the endless query was not interrupted"
        assert time.monotonic() - started < 3
        assert isinstance(error, BackendError)
        assert_stable(error, _boundary.RUN_FAILED, charged=True)
        patch_sql(monkeypatch, backend, "SELECT count(*) AS n FROM bb_people")
        assert backend.execute(TREE) == (["n"], [(3,)])  # the next statement runs
    finally:
        backend.close()


def test_sqlite_text_that_is_not_utf8_is_returned(tmp_path, monkeypatch):
    """SQLite keeps any bytes as TEXT; reading them never fails (after the charge)."""
    path = tmp_path / "bytes.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (k TEXT)")
    con.execute("INSERT INTO t VALUES (CAST(X'FF61' AS TEXT)), (CAST(X'FE61' AS TEXT)), ('é')")
    con.commit()
    con.close()
    backend = SQLiteBackend(f"sqlite:///{path}")
    try:
        patch_sql(monkeypatch, backend, "SELECT k AS y, COUNT(*) AS n FROM t GROUP BY k")
        backend.check(TREE)
        _, rows = backend.execute(TREE)
        assert sorted(rows) == [("\\xfea", 1), ("\\xffa", 1), ("é", 1)]
    finally:
        backend.close()


# -- errors outside queries ------------------------------------------------------------


def test_open_errors_carry_no_driver_text(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database file, Zebulon Quixote\n" * 200)
    with pytest.raises(BackendError) as info:
        DuckDBBackend(junk)
    assert str(info.value) == _boundary.OPEN_FAILED.format(what=f"DuckDB database {str(junk)!r}")
    assert info.value.__context__ is None and info.value.charged is False
    with pytest.raises(BackendError) as info:
        SQLiteBackend(f"sqlite:///{junk}")
    assert str(info.value) == _boundary.OPEN_FAILED.format(what=f"SQLite database {str(junk)!r}")
    assert info.value.__context__ is None
    log = owner_records(caplog)
    assert len(log) == 2


@needs_postgres
def test_postgres_open_errors_carry_no_driver_text(caplog):
    import sqlalchemy as sa

    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    url = sa.make_url(PG_URL).set(password="wrong-secret-password")
    with pytest.raises(BackendError) as info:
        open_backend(url.render_as_string(hide_password=False))
    message = str(info.value)
    assert message.startswith("cannot open PostgreSQL database ")
    assert "authentication" not in message and "wrong-secret-password" not in message
    assert info.value.__context__ is None
    log = owner_records(caplog)
    assert "authentication" in log[0] and "wrong-secret-password" not in log[0]


def test_metadata_errors_are_stable(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="dpsql.owner")
    backend = DuckDBBackend(":memory:")
    backend.close()
    for method in (backend.columns, backend.unique_columns, backend.nonbinary_collation_columns):
        with pytest.raises(BackendError) as info:
            method("bb_people")
        assert str(info.value) == _boundary.SCHEMA_FAILED.format(table="bb_people")
        assert info.value.charged is False and info.value.__context__ is None
    assert len(owner_records(caplog)) == 3


# -- metadata: keys that cannot hold NULL, collations --------------------------------------


_FRESH = itertools.count(7000)


def _null_key_possible(run, table, columns, key) -> bool:
    """Whether the database stores a row with NULL in one of the ``key`` columns (the
    other columns get fresh values), on a writable connection (``run(sql)``)."""
    for null in key:
        values = ", ".join("NULL" if c == null else str(next(_FRESH)) for c in columns)
        try:
            run(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})")
        except Exception:  # noqa: BLE001, S112 - a constraint refused the NULL
            continue
        if run(f"SELECT count(*) FROM {table} WHERE {null} IS NULL")[0][0] > 0:
            return True
    return False


@pytest.mark.parametrize("kind", KINDS)
def test_unique_columns_need_not_null(kind, built, tmp_path):
    made = built(kind)
    backend = made.backend
    if kind == "spark":  # Spark enforces no key at all
        assert backend.unique_columns("bb_people") == set()
        return
    expected = {("pk",), ("un",), ("b", "c")}  # u and (a, b) may hold NULLs
    assert backend.unique_columns("bb_keys") == expected
    assert backend.unique_columns("BB_KEYS") == expected
    # the database agrees: exactly the declared keys it keeps free of NULLs
    if kind == "duckdb":
        copy = tmp_path / "copy.duckdb"
        shutil.copy(made.source, copy)
        con = duckdb.connect(str(copy))

        def run(sql):
            return con.execute(sql).fetchall()
    elif kind == "sqlite":
        copy = tmp_path / "copy.sqlite"
        shutil.copy(made.source, copy)
        con = sqlite3.connect(copy, isolation_level=None)

        def run(sql):
            return con.execute(sql).fetchall()
    else:
        engine = _pg_admin()
        con = engine.connect()

        def run(sql):
            con.exec_driver_sql("SAVEPOINT s")
            try:
                result = con.exec_driver_sql(sql)
                rows = result.fetchall() if result.returns_rows else []
            except Exception:
                con.exec_driver_sql("ROLLBACK TO SAVEPOINT s")
                raise
            con.exec_driver_sql("RELEASE SAVEPOINT s")
            return rows
    try:
        proven = {key for key in KEYS_DECLARED
                  if not _null_key_possible(run, "bb_keys", KEYS_COLUMNS, key)}
        assert proven == expected
        if kind == "sqlite":
            assert backend.unique_columns("bb_pk_bigint") == set()
            assert _null_key_possible(run, "bb_pk_bigint", ["id"], ("id",))
            assert backend.unique_columns("bb_pk_desc") == set()  # not the rowid
            assert _null_key_possible(run, "bb_pk_desc", ["id"], ("id",))
            assert backend.unique_columns("bb_people") == {("pid",)}  # the rowid
            assert not _null_key_possible(run, "bb_people", ["pid"], ("pid",))
            assert backend.unique_columns("bb_pk_text") == {("id",)}
            assert backend.unique_columns("bb_pk_norowid") == {("id",)}
            assert not _null_key_possible(run, "bb_pk_norowid", ["id", "v"], ("id",))
        if kind == "postgres":
            assert backend.unique_columns("bb_parent") == set()  # its child's rows too
            assert backend.unique_columns("bb_part") == {("id",)}
            assert backend.unique_columns("bb_dups") == set()    # the index is invalid
            assert backend.unique_columns("bb_people") == {("pid",)}
    finally:
        if kind == "postgres":
            con.rollback()
            con.close()
            engine.dispose()
        else:
            con.close()
    assert backend.unique_columns("bb_nowhere") == set()


def _engine_merges(made, table, column) -> bool:
    """The engine's own answer: does ``column`` compare some different strings as equal?
    (Its values, none, unioned with probes of different bytes; the union takes the
    column's collation.)"""
    probes = _boundary.COLLATION_PROBES
    values = " UNION ALL ".join(f"SELECT '{p}'" for p in probes)
    sql = (f"SELECT count(DISTINCT x) FROM (SELECT {column} AS x FROM {table} WHERE 1 = 0 "
           f"UNION ALL {values}) AS u")
    if made.kind == "duckdb":  # the backend's own configuration, to share its instance
        con = duckdb.connect(str(made.source), read_only=True, config=dict(DUCKDB_CONFIG))
        try:
            return con.execute(sql).fetchone()[0] < len(probes)
        finally:
            con.close()
    if made.kind == "sqlite":
        con = sqlite3.connect(made.source)
        try:
            return con.execute(sql).fetchone()[0] < len(probes)
        finally:
            con.close()
    if made.kind == "spark":  # UNION refuses mixed collations: cast to the column's type
        dtype = made.source.table(table).schema[column].dataType.simpleString()
        rows = ", ".join(f"('{p}')" for p in probes)
        sql = f"SELECT count(DISTINCT CAST(x AS {dtype})) FROM VALUES {rows} AS v(x)"
        return made.source.sql(sql).collect()[0][0] < len(probes)
    engine = _pg_admin()
    try:
        with engine.connect() as conn:
            sql = (f"SELECT count(*) FROM (SELECT x FROM (SELECT {column} AS x FROM "
                   f"{table} WHERE 1 = 0 UNION ALL {values}) AS u GROUP BY x) AS g")
            return conn.exec_driver_sql(sql).scalar() < len(probes)
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", KINDS)
def test_nonbinary_collation_columns(kind, built):
    made = built(kind)
    backend = made.backend
    for table, expected in made.collations.items():
        assert backend.nonbinary_collation_columns(table) == expected, table
        assert backend.nonbinary_collation_columns(table.upper()) == expected
        # every column but the integer one holds strings (whatever type dpsql maps a
        # view's or a domain's column to)
        strings = [c for c in backend.columns(table) if c != "n"]
        assert set(expected) <= set(strings)
        assert {c for c in strings if _engine_merges(made, table, c)} == expected, table
    assert backend.nonbinary_collation_columns("bb_people") == set()


def test_duckdb_default_collation_makes_every_string_nonbinary():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a VARCHAR, b VARCHAR, n INTEGER)")
    assert DuckDBBackend(con).nonbinary_collation_columns("t") == set()
    con.execute("SET default_collation = 'nocase'")
    assert DuckDBBackend(con).nonbinary_collation_columns("t") == {"a", "b"}


def test_spark_types_keep_collations_and_complex_kinds():
    from dpsql.backends.spark import duckdb_type, nonbinary_collations

    assert duckdb_type("string") == "VARCHAR"
    assert duckdb_type("varchar(10)") == duckdb_type("char(3)") == "VARCHAR"
    assert duckdb_type("string collate UTF8_BINARY") == "VARCHAR"
    assert duckdb_type("string collate UTF8_LCASE") == "VARCHAR COLLATE UTF8_LCASE"
    assert duckdb_type("string collate UNICODE_CI") == "VARCHAR COLLATE UNICODE_CI"
    scalars = {"VARCHAR", "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT",
               "BOOLEAN", "DATE", "TIMESTAMP", "BLOB"}
    for complex_type in ("array<string>", "map<string,int>", "struct<a:int>", "variant",
                         "array<string collate UTF8_LCASE>", "interval day to second",
                         "stringy", "string collate"):
        assert duckdb_type(complex_type) not in scalars
        assert not duckdb_type(complex_type).startswith("VARCHAR")
    assert nonbinary_collations("array<string collate UTF8_LCASE>")
    assert nonbinary_collations("string collate UTF8_BINARY_RTRIM")
    assert not nonbinary_collations("string collate UTF8_BINARY")
    assert not nonbinary_collations("struct<a:string,b:int>")


@pytest.mark.parametrize("kind", KINDS)
def test_error_messages_are_the_same_on_every_backend(kind, built, monkeypatch):
    """One message per stage, whatever the engine said (its text differs per engine)."""
    backend = built(kind).backend
    patch_sql(monkeypatch, backend, "SELECT nosuch_column AS y FROM bb_people")
    with pytest.raises(BackendError) as info:
        backend.check(TREE)
    assert_stable(info.value, _boundary.PLAN_FAILED, charged=False)
    with pytest.raises(BackendError) as info:
        backend.execute(TREE)
    assert_stable(info.value, _boundary.RUN_FAILED, charged=True)
