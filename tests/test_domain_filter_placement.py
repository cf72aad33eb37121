"""The public-domain key filter after the grouping keeps exactly the rows it kept before it.

:mod:`dpsql.rewrite.restrict_domains` moves the filter of a plain-column key of joined
rows from WHERE to HAVING (and :mod:`dpsql.rewrite.per_user_aggregate` folds it into
its own HAVING). Here both placements run on data made to tell them apart: keys outside
their domain, NULL keys, NULL users, users with rows inside and outside the domain, on
DuckDB and SQLite (and PostgreSQL when ``DPSQL_TEST_POSTGRES_ADMIN_URL`` is set); the
per-user rows and, on DuckDB, the final exact statistics after the ``max_groups`` step
must be identical.
"""

from __future__ import annotations

import importlib
import os
import sqlite3

import duckdb
import pytest
from sqlglot import exp

from dpsql.engine import _demo_plan
from dpsql.rewrite import RULES, statistics_query
from tests.support import needs_spark, spark_session

# the module (``dpsql.rewrite.restrict_domains`` names the pass's function)
restrict_module = importlib.import_module("dpsql.rewrite.restrict_domains")

COLUMNS = ("pid", "age", "sex", "educ", "race", "income", "married")
# (pid, age, sex, educ, race, income, married): race's domain is 1..6, sex's 0..1
ROWS_A = [(p, 40, 1, 9, 1, 1000 * p, 1) for p in range(1, 9)] + [(None, 40, 1, 9, 1, 5, 1)]
ROWS_B = [
    (1, 30, 0, 9, 1, 10, 0), (1, 30, 0, 9, 7, 10, 0),      # in and out of race's domain
    (2, 30, 2, 9, 3, 10, 0), (2, 30, 1, 9, 3, 10, 0),      # sex 2: outside
    (3, 30, None, 9, None, 10, 0), (3, 30, 1, 9, 0, 10, 0),  # NULL keys, race 0
    (4, 30, 1, 9, -1, 10, 0), (4, 30, 1, 9, 6, 10, 0), (4, 30, 0, 9, 6, 10, 0),
    (5, 30, 0, 9, 2, 10, 0), (5, 30, 1, 9, 2, 10, 0), (5, 30, 1, 9, 99, 10, 0),
    (6, 30, 1, 9, 4, 10, 0), (None, 30, 1, 9, 4, 10, 0), (None, 30, 1, 9, 8, 10, 0),
    (7, 30, 1, 9, 5, 10, 0), (7, 30, 1, 9, 5, 10, 0), (8, 30, 9, 9, 9, 10, 0),
]
QUERIES = (
    "SELECT b.race, b.sex, COUNT(*), SUM(a.income) FROM pums a JOIN pums_dup b "
    "ON a.pid = b.pid GROUP BY b.race, b.sex",
    "SELECT b.race, COUNT(*), COUNT(DISTINCT b.educ) FROM pums a JOIN pums_dup b "
    "ON a.pid = b.pid WHERE a.age > 30 GROUP BY b.race",
)


def _where_only(monkeypatch):
    """The old placement: every key filter in WHERE."""
    monkeypatch.setattr(restrict_module, "_after_grouping", lambda *args: False)


def _rewrite(sql: str, upto=None):
    plan = _demo_plan(sql, seed=0, max_groups=1, max_rows=2)
    expression = statistics_query(plan)
    for rule in RULES[:upto]:
        expression = rule(expression, plan)
    return expression


def _per_user(sql: str) -> exp.Select:
    """The per-user CTE of the rewrite, as a query of its own."""
    upto = [r.__name__ for r in RULES].index("per_user_aggregate") + 1
    tree = _rewrite(sql, upto)
    return next(c.this for c in tree.args["with_"].expressions if c.alias == "__per_user")


def _load(execute, placeholders: str) -> None:
    for table, rows in (("pums", ROWS_A), ("pums_dup", ROWS_B)):
        execute(f"CREATE TABLE {table} (pid INTEGER, age INTEGER, sex INTEGER, "
                "educ INTEGER, race INTEGER, income INTEGER, married INTEGER)")
        for row in rows:
            execute(f"INSERT INTO {table} VALUES ({placeholders})", row)


def _sorted(rows):
    return sorted((tuple(r) for r in rows), key=repr)


@pytest.fixture
def engines():
    duck = duckdb.connect(":memory:")
    _load(lambda s, p=(): duck.execute(s, list(p)), ", ".join("?" * 7))
    lite = sqlite3.connect(":memory:")
    _load(lambda s, p=(): lite.execute(s, p), ", ".join("?" * 7))
    out = {"duckdb": lambda q: duck.execute(q).fetchall(),
           "sqlite": lambda q: lite.execute(q).fetchall()}
    # the admin login: the temporary tables need a session that may write
    url = os.environ.get("DPSQL_TEST_POSTGRES_ADMIN_URL")
    if url:
        sqlalchemy = pytest.importorskip("sqlalchemy")
        engine = sqlalchemy.create_engine(url)
        pg = engine.connect()
        pg.exec_driver_sql("CREATE TEMPORARY TABLE pums (pid INTEGER, age INTEGER, "
                           "sex INTEGER, educ INTEGER, race INTEGER, income INTEGER, "
                           "married INTEGER)")
        pg.exec_driver_sql("CREATE TEMPORARY TABLE pums_dup (LIKE pums)")
        for table, rows in (("pums", ROWS_A), ("pums_dup", ROWS_B)):
            pg.exec_driver_sql(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * 7)})",
                               list(rows))
        out["postgres"] = lambda q: pg.exec_driver_sql(q).fetchall()
    yield out
    duck.close()
    lite.close()
    if url:
        pg.close()
        engine.dispose()


@pytest.mark.parametrize("sql", QUERIES)
def test_having_form_is_used_for_joined_column_keys(sql):
    tree = _per_user(sql)
    assert "BETWEEN 1 AND 6" in tree.args["having"].sql()
    where = tree.args.get("where")
    assert where is None or "BETWEEN 1 AND 6" not in where.sql()


@pytest.mark.parametrize("sql", QUERIES)
def test_per_user_rows_equal_on_every_engine(sql, engines, monkeypatch):
    moved = _per_user(sql)
    _where_only(monkeypatch)
    kept = _per_user(sql)
    assert moved.sql() != kept.sql()
    for name, run in engines.items():
        dialect = "postgres" if name == "postgres" else name
        a = _sorted(run(moved.sql(dialect=dialect)))
        b = _sorted(run(kept.sql(dialect=dialect)))
        assert a == b, name
        assert a, name  # the data reach the groups


@pytest.mark.parametrize("sql", QUERIES)
def test_bounded_statistics_equal_on_duckdb(sql, engines, monkeypatch):
    moved = _rewrite(sql).sql(dialect="duckdb")
    _where_only(monkeypatch)
    kept = _rewrite(sql).sql(dialect="duckdb")
    run = engines["duckdb"]
    assert _sorted(run(moved)) == _sorted(run(kept))


def test_single_table_keeps_where():
    upto = [r.__name__ for r in RULES].index("restrict_domains") + 1
    tree = _rewrite("SELECT race, COUNT(*) FROM pums_dup GROUP BY race", upto)
    assert tree.args.get("having") is None and "BETWEEN 1 AND 6" in tree.args["where"].sql()


DERIVED = ("SELECT n, COUNT(*) FROM (SELECT pid, COUNT(*) AS n FROM pums_dup GROUP BY pid) "
           "AS t GROUP BY n")


def test_derived_table_drops_the_null_user_after_grouping(engines):
    """A derived table in FROM takes the joined form (``HAVING COUNT(uid) > 0``,
    :mod:`dpsql.rewrite.per_user_aggregate`); it keeps exactly the rows of the row
    filter ``WHERE NOT uid IS NULL``, and no NULL user (the data hold NULL pids)."""
    moved = _per_user(DERIVED)
    old = moved.copy()
    old.set("having", None)
    old = old.where(exp.Not(this=exp.Is(this=exp.column("pid"), expression=exp.Null())))
    for name, run in engines.items():
        dialect = "postgres" if name == "postgres" else name
        a = _sorted(run(moved.sql(dialect=dialect)))
        assert a and all(r[0] is not None for r in a), name
        assert a == _sorted(run(old.sql(dialect=dialect))), name
    assert moved.args["having"].this.sql() == "COUNT(pid) > 0"
    assert "IS NULL" not in moved.args["where"].sql()


@needs_spark
@pytest.mark.slow
@pytest.mark.parametrize("sql", [*QUERIES, DERIVED])
def test_per_user_rows_equal_on_spark(sql, monkeypatch):
    """Spark: the HAVING forms (the folded CASE, and ``COUNT(uid) > 0`` over a derived
    table) keep exactly the rows of the WHERE forms."""
    spark = spark_session()
    schema = ", ".join(f"{c} INT" for c in COLUMNS)
    for table, rows in (("pums", ROWS_A), ("pums_dup", ROWS_B)):
        spark.createDataFrame(rows, schema).createOrReplaceTempView(table)
    moved = _per_user(sql)
    if sql == DERIVED:
        kept = moved.copy()
        kept.set("having", None)
        kept = kept.where(exp.Not(this=exp.Is(this=exp.column("pid"), expression=exp.Null())))
    else:
        _where_only(monkeypatch)
        kept = _per_user(sql)
    a = _sorted(r for r in spark.sql(moved.sql(dialect="spark")).collect())
    b = _sorted(r for r in spark.sql(kept.sql(dialect="spark")).collect())
    assert a and a == b
