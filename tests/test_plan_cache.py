"""The plan cache: a repeated query skips analysis, rewriting and checking, and a cached
plan is exactly the plan the checks passed (dpsql.plan_cache)."""

from __future__ import annotations

import copy

import duckdb
import pytest

import dpsql
import dpsql.engine as engine
from dpsql.datasets import catalog_path, load_pums, pums_catalog
from dpsql.plan_cache import PlanCache, Prepared, catalog_fingerprint, plan_key, typed
from tests.support import backend_of, plan_cache_of

QUERY = "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex"


@pytest.fixture()
def db():
    con = duckdb.connect()
    load_pums(con)
    yield con
    con.close()


@pytest.fixture()
def pums_file(tmp_path):
    path = tmp_path / "pums.duckdb"
    load_pums(path)
    return path


def _conn(database, **kwargs):
    kwargs.setdefault("budget", (1000.0, 1e-3))
    kwargs.setdefault("ledger", ":memory:")
    return dpsql.connect(database, catalog=catalog_path("pums"), **kwargs)


def _no_analysis(monkeypatch):
    """Any analysis, rewrite or check from here on fails the test."""
    def boom(*args, **kwargs):
        raise AssertionError("analysed again")

    monkeypatch.setattr(engine, "analyze", boom)
    monkeypatch.setattr(engine, "rewrite", boom)
    monkeypatch.setattr(engine.Connection, "_check", boom)


def test_a_repeated_query_skips_analysis_rewrite_and_checks(pums_file, monkeypatch):
    conn = _conn(pums_file)
    first = conn.execute(QUERY, epsilon=0.5)
    _no_analysis(monkeypatch)
    again = conn.execute(QUERY, epsilon=0.5)
    assert again.columns == first.columns and again.sql == first.sql
    assert [r[0] for r in again.rows] == [r[0] for r in first.rows]
    assert again.rows != first.rows  # fresh noise: only the plan is reused
    assert conn.budget.spent == (1.0, 0.0)  # both charged
    assert plan_cache_of(conn).hits == 1


def test_plan_cache_off_analyses_every_time(pums_file, monkeypatch):
    calls = []
    real = engine.analyze
    monkeypatch.setattr(engine, "analyze", lambda *a, **k: calls.append(1) or real(*a, **k))
    conn = _conn(pums_file, plan_cache=False)
    for _ in range(3):
        conn.execute(QUERY, epsilon=0.5)
    assert len(calls) == 3


@pytest.mark.parametrize("first,second", [
    ({"epsilon": 0.5}, {"epsilon": 0.25}),
    ({"epsilon": 1}, {"epsilon": 1.0}),
    ({"epsilon": 0.5}, {"epsilon": 0.5, "max_rows": 2}),
    ({"epsilon": 0.5}, {"epsilon": 0.5, "max_groups": 2}),
    ({"epsilon": 0.5}, {"epsilon": 0.5, "delta": 1e-6}),
    ({"epsilon": 0.5, "delta": 1e-6}, {"epsilon": 0.5, "delta": 1e-6, "mechanism": "gaussian"}),
])
def test_any_argument_difference_is_a_fresh_analysis(pums_file, first, second):
    conn = _conn(pums_file)
    conn.execute(QUERY, **first)
    hits = plan_cache_of(conn).hits
    conn.execute(QUERY, **second)
    assert plan_cache_of(conn).hits == hits, "a different query shared a cached plan"


def test_any_text_difference_is_a_fresh_analysis(pums_file):
    conn = _conn(pums_file)
    conn.execute(QUERY, epsilon=0.5)
    for other in (QUERY + " ", QUERY.replace("COUNT(*)", "count(*)"),
                  "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5) "
                  + QUERY[len("SELECT "):]):
        conn.execute(other, epsilon=0.5)
    assert plan_cache_of(conn).hits == 0


def test_a_value_the_analysis_refuses_never_finds_a_cached_plan(pums_file):
    # True == 1 and hash(True) == hash(1): a key on values alone would skip the refusal
    conn = _conn(pums_file)
    conn.execute("SELECT COUNT(*) FROM pums", epsilon=1)
    with pytest.raises(dpsql.PrivacyParameterError, match="got bool"):
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=True)
    assert conn.budget.spent == (1.0, 0.0)


def test_key_keeps_apart_what_python_hashes_alike():
    fp = catalog_fingerprint(pums_catalog())
    keys = {plan_key("q", e, 0.0, None, None, "laplace", fp, "v")
            for e in (1, 1.0, True, 0.0, -0.0, False)}
    assert len(keys) == 6
    assert typed(0.0) != typed(-0.0)
    assert plan_key("q", 1.0, 0.0, None, None, "laplace", fp, None) is None  # no version
    assert plan_key(b"q", 1.0, 0.0, None, None, "laplace", fp, "v") is None


def test_catalog_fingerprint_covers_bounds_limits_and_data_version():
    import dataclasses

    cat = pums_catalog()
    base = catalog_fingerprint(cat)
    table = cat.tables["pums"]
    col = dataclasses.replace(table.columns["income"], upper=500_001.0)
    wider = dataclasses.replace(cat, tables={**cat.tables, "pums": dataclasses.replace(
        table, columns={**table.columns, "income": col})})
    assert catalog_fingerprint(wider) != base
    assert catalog_fingerprint(dataclasses.replace(cat, data_version="2")) != base
    limits = dataclasses.replace(cat.limits, max_aggregates=3)
    assert catalog_fingerprint(dataclasses.replace(cat, limits=limits)) != base
    # a budget decides whether a query may be charged, not what it answers
    assert catalog_fingerprint(dataclasses.replace(cat, budget=(1.0, 0.0))) == base


def test_answering_from_a_cached_plan_leaves_it_as_checked(pums_file):
    conn = _conn(pums_file)
    queries = [(QUERY, {}), ("SELECT age, COUNT(*) FROM pums GROUP BY age", {"delta": 1e-6}),
               ("SELECT COUNT(*), SUM(income) FROM pums WHERE age > 30", {})]
    for sql, kw in queries:
        conn.execute(sql, epsilon=0.5, **kw)
    def stats(plan):
        return [(s.name, s.epsilon, s.rho, s.linf, s.integer, type(s.mechanism).__name__,
                 s.mechanism.scale) for s in plan.stats]

    snapshots = {}
    for key, prepared in plan_cache_of(conn).entries():
        snapshots[key] = (stats(prepared.plan), prepared.expression.copy(), prepared.sql,
                          repr(prepared.plan), copy.copy(prepared.plan.notes))
    for _ in range(3):
        for sql, kw in queries:
            conn.execute(sql, epsilon=0.5, **kw)
    assert plan_cache_of(conn).hits == 3 * len(queries)
    for key, (statistics, expression, sql, text, notes) in snapshots.items():
        prepared = dict(plan_cache_of(conn).entries())[key]
        assert prepared.sql == sql
        assert prepared.expression == expression
        assert repr(prepared.plan) == text
        assert stats(prepared.plan) == statistics
        assert prepared.plan.notes == notes
        assert backend_of(conn).to_sql(prepared.expression) == sql


def test_a_schema_change_drops_cached_plans(db):
    # the caller holds the DuckDB connection, so the schema can change under dpsql
    conn = _conn(db)
    conn.execute(QUERY, epsilon=0.5)
    conn.execute(QUERY, epsilon=0.5)
    assert plan_cache_of(conn).hits == 1
    db.execute("ALTER TABLE pums ALTER income TYPE VARCHAR")
    with pytest.raises(dpsql.CatalogError, match="income"):
        conn.execute(QUERY, epsilon=0.5)
    assert conn.budget.spent == (1.0, 0.0)  # the refusal charged nothing
    db.execute("ALTER TABLE pums ALTER income TYPE DOUBLE")
    conn.execute(QUERY, epsilon=0.5)
    assert plan_cache_of(conn).hits == 1


def test_a_collation_change_drops_cached_plans(db):
    conn = _conn(db)
    sql = "SELECT COUNT(*) FROM pums"
    conn.execute(sql, epsilon=0.5)
    db.execute("SET default_collation = 'nocase'")
    conn.execute(sql, epsilon=0.5)
    assert plan_cache_of(conn).hits == 0


def test_own_file_schema_is_read_once(pums_file):
    conn = _conn(pums_file)
    backend = backend_of(conn)
    assert backend.schema_version() == backend.schema_version()
    assert backend._schema_version is not None


def test_lru_capacity():
    cache = PlanCache(capacity=2)
    entry = Prepared(plan=None, expression=None, read=list, sql="")  # type: ignore[arg-type]
    for k in ("a", "b", "c"):
        cache.put((k,), entry)
    assert cache.get(("a",)) is None and cache.get(("c",)) is entry and len(cache) == 2
    off = PlanCache(capacity=0)
    off.put(("a",), entry)
    assert off.get(("a",)) is None


def test_a_query_that_reads_the_clock_is_never_cached(pums_file, monkeypatch):
    """CURRENT_DATE is written into the plan as the day it was asked (dpsql.client_sql):
    tomorrow the same text is another query, so it is analysed every time."""
    conn = _conn(pums_file)
    sql = "SELECT COUNT(*) FROM pums WHERE CURRENT_DATE > DATE '2000-01-01'"
    conn.execute(sql, epsilon=0.5)
    conn.execute(sql, epsilon=0.5)
    assert plan_cache_of(conn).hits == 0


def test_sql_that_is_not_text_is_refused_not_cached(pums_file):
    conn = _conn(pums_file)
    with pytest.raises(dpsql.DpsqlError):
        conn.execute(b"SELECT COUNT(*) FROM pums", epsilon=0.5)
    assert conn.budget.spent == (0.0, 0.0)


# -- SQLite and PostgreSQL: a schema version from one metadata query -----------------------

_SMALL = {"dataset": "small", "tables": {"small_t": {
    "user_key": "uid", "max_rows": 1,
    "columns": {"uid": {"type": "int"}, "x": {"type": "int", "lower": 0, "upper": 10}}}}}


def _small_cache_round(url, alter):
    """Asks twice (a hit), changes the schema with ``alter()``, asks twice again: the
    change drops the plan (a miss), then it is cached anew."""
    conn = dpsql.connect(url, catalog=_SMALL, budget=(10.0, 1e-3), ledger=":memory:")
    sql = "SELECT COUNT(*) AS n, SUM(x) AS s FROM small_t"
    conn.execute(sql, epsilon=0.1)
    conn.execute(sql, epsilon=0.1)
    assert plan_cache_of(conn).hits == 1
    first = backend_of(conn).schema_version()
    assert first is not None and first == backend_of(conn).schema_version()
    alter()
    conn.execute(sql, epsilon=0.1)
    assert plan_cache_of(conn).hits == 1, "a plan of the old schema was reused"
    assert backend_of(conn).schema_version() != first
    conn.execute(sql, epsilon=0.1)
    assert plan_cache_of(conn).hits == 2
    conn.close()


def test_sqlite_schema_change_drops_cached_plans(tmp_path):
    import sqlite3

    path = tmp_path / "small.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE small_t (uid INTEGER PRIMARY KEY, x INTEGER)")
    con.executemany("INSERT INTO small_t VALUES (?, ?)", [(i, i % 10) for i in range(50)])
    con.commit()

    def alter():
        con.execute("CREATE INDEX small_x ON small_t (x)")
        con.commit()

    _small_cache_round(f"sqlite:///{path}", alter)
    con.close()


def test_postgres_schema_change_drops_cached_plans(postgres_url):
    import sqlalchemy as sa

    admin = sa.create_engine(postgres_url.admin_url)
    with admin.begin() as c:
        c.exec_driver_sql("DROP TABLE IF EXISTS small_t")
        c.exec_driver_sql("CREATE TABLE small_t (uid BIGINT PRIMARY KEY, x INTEGER)")
        c.exec_driver_sql("INSERT INTO small_t SELECT i, mod(i, 10) FROM generate_series(1, 50) i")

    def alter():
        with admin.begin() as c:
            c.exec_driver_sql("ALTER TABLE small_t ALTER x TYPE BIGINT")

    try:
        _small_cache_round(postgres_url.url, alter)
    finally:
        with admin.begin() as c:
            c.exec_driver_sql("DROP TABLE IF EXISTS small_t")
        admin.dispose()


def test_a_cached_plans_split_table_is_a_fresh_copy_each_time(connect):
    """The split table is kept per plan (answering.split_table); what one Result's
    ``split`` is edited into never shows in the next answer's."""
    conn = connect()
    sql = "SELECT sex, COUNT(*) AS n, AVG(income) AS a FROM pums GROUP BY sex"
    first = conn.execute(sql, epsilon=1.0)
    want = copy.deepcopy(first.split)
    first.split[0]["epsilon"] = 99.0
    first.split[0]["feeds"].append("edited")
    first.split.append({"name": "extra"})
    assert conn.execute(sql, epsilon=1.0).split == want
    assert conn.execute(sql, epsilon=1.0, alpha=0.1).split != want  # another alpha
