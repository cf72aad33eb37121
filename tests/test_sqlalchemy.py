"""SQLAlchemy and pandas through the dpsql.duckdb dialect."""

from __future__ import annotations

import pandas as pd
import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import registry
from sqlalchemy.engine import make_url

import dpsql
from dpsql import dbapi
from dpsql.datasets import catalog_path, load_pums
from dpsql.ledger import Ledger
from dpsql.sqlalchemy_dialect import DpsqlDuckDBDialect


@pytest.fixture(scope="module", autouse=True)
def register_dialect():
    registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("sqlalchemy") / "pums.duckdb"
    load_pums(path)
    return path


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "ledger.sqlite"


def url(db, ledger, catalog=None, **query):
    query = {"catalog": str(catalog or catalog_path("pums")), "ledger": str(ledger),
             "epsilon": "0.5", **{k: str(v) for k, v in query.items()}}
    return sa.engine.URL.create("dpsql+duckdb", database=str(db), query=query)


@pytest.fixture
def engine(db, ledger):
    eng = sa.create_engine(url(db, ledger, delta=1e-6))
    yield eng
    eng.dispose()


@pytest.fixture
def statements(engine):
    """Every statement SQLAlchemy sends to the DB-API."""
    sent = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda conn, cursor, statement, *args: sent.append(statement))
    return sent


def spent(ledger):
    led = Ledger(ledger)
    try:
        return led.spent("pums", None).basic
    finally:
        led.close()


def log(ledger):
    led = Ledger(ledger)
    try:
        return led.log("pums")
    finally:
        led.close()


# -- connecting ----------------------------------------------------------------------


def test_url_string_and_dbapi(db, ledger):
    text_url = (f"dpsql+duckdb:///{db}?catalog={catalog_path('pums')}&epsilon=0.5&delta=1e-6"
                f"&ledger={ledger}&analyst=alice&budget_epsilon=2&budget_delta=1e-6")
    eng = sa.create_engine(text_url)
    assert eng.dialect.name == "dpsql" and eng.dialect.driver == "duckdb"
    assert eng.dialect.loaded_dbapi is dbapi
    assert eng.dialect.paramstyle == "qmark"
    assert eng.dialect.supports_statement_cache is True
    with eng.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert isinstance(raw, dbapi.Connection)
        assert raw.analyst == "alice"
        assert raw.budget.total == (2.0, 1e-6)
        assert conn.connection.driver_connection is raw  # never the backend connection
    eng.dispose()


def test_create_connect_args():
    dialect = DpsqlDuckDBDialect()
    _, args = dialect.create_connect_args(make_url(
        "dpsql+duckdb:////data/p.duckdb?catalog=c.yaml&epsilon=1&delta=1e-6&max_groups=2"
        "&max_rows=3&alpha=0.1&analyst=bob&ledger=:memory:&budget_epsilon=4"))
    assert args == {"database": "/data/p.duckdb", "catalog": "c.yaml", "epsilon": 1.0,
                    "delta": 1e-6, "max_groups": 2, "max_rows": 3, "alpha": 0.1,
                    "analyst": "bob", "ledger": ":memory:", "budget": (4.0, 0.0)}
    for bad in ("dpsql+duckdb:///p.duckdb?catalog=c.yaml&epsilonn=1",
                "dpsql+duckdb:///p.duckdb?epsilon=1",
                "dpsql+duckdb:///p.duckdb?catalog=c.yaml&epsilon=lots",
                "dpsql+duckdb:///p.duckdb?catalog=c.yaml&max_groups=1.5"):
        with pytest.raises(sa_exc.ArgumentError):
            dialect.create_connect_args(make_url(bad))


def test_connecting_sends_no_sql(db, ledger):
    eng = sa.create_engine(url(db, ledger), pool_pre_ping=True)
    sent = []
    sa.event.listen(eng, "before_cursor_execute", lambda c, cur, stmt, *a: sent.append(stmt))
    for _ in range(2):  # the second checkout pings
        with eng.connect() as conn:
            conn.rollback()
            conn.commit()
    assert eng.dialect.server_version_info == tuple(
        int(x) for x in dpsql.__version__.split(".")[:3])
    assert eng.dialect.default_isolation_level == "AUTOCOMMIT"
    assert sent == []
    assert log(ledger) == []
    eng.dispose()


# -- reflection ----------------------------------------------------------------------


def test_inspect_from_the_catalog(engine, statements, ledger):
    insp = sa.inspect(engine)
    assert insp.get_table_names() == ["pums"]
    assert insp.has_table("pums") and not insp.has_table("nowhere")
    cols = {c["name"]: c for c in insp.get_columns("pums")}
    assert list(cols) == ["pid", "age", "sex", "educ", "race", "income", "married"]
    assert isinstance(cols["age"]["type"], sa.BigInteger)
    assert isinstance(cols["income"]["type"], sa.Double)
    assert cols["age"]["nullable"] is False
    assert "bounds [0, 100]" in cols["age"]["comment"]
    assert insp.get_pk_constraint("pums")["constrained_columns"] == []
    assert insp.get_foreign_keys("pums") == []
    assert insp.get_indexes("pums") == []
    assert insp.get_view_names() == []
    with pytest.raises(sa_exc.NoSuchTableError):
        insp.get_columns("nowhere")
    assert statements == []
    assert log(ledger) == []


def test_reflection_never_reads_the_backend(db, ledger, tmp_path):
    # a table that exists only in the catalog is reflected: the database is not asked
    catalog = yaml.safe_load(catalog_path("pums").read_text())
    catalog["tables"]["ghost"] = {"row_privacy": True, "columns": {
        "name": {"type": "string"}, "born": {"type": "date", "nullable": True}}}
    path = tmp_path / "ghost.yaml"
    path.write_text(yaml.safe_dump(catalog, sort_keys=False))
    eng = sa.create_engine(url(db, ledger, catalog=path))
    insp = sa.inspect(eng)
    assert insp.get_table_names() == ["ghost", "pums"]
    cols = insp.get_columns("ghost")
    assert [type(c["type"]) for c in cols] == [sa.String, sa.Date]
    assert [c["nullable"] for c in cols] == [False, True]
    meta = sa.MetaData()
    meta.reflect(eng)
    assert set(meta.tables) == {"ghost", "pums"}
    eng.dispose()


def test_reflected_table_core_count(engine, statements, ledger):
    pums = sa.Table("pums", sa.MetaData(), autoload_with=engine)
    assert pums.c.keys() == ["pid", "age", "sex", "educ", "race", "income", "married"]
    query = sa.select(sa.func.count()).select_from(pums)
    assert " ".join(str(query.compile(engine)).split()) == "SELECT count(*) AS count_1 FROM pums"
    with engine.connect() as conn:
        (n,) = conn.execute(query).one()
    assert 800 < n < 1200  # 1,000 people; the noise at epsilon 0.5 is a few units
    assert len(statements) == 1
    assert spent(ledger) == (0.5, 0.0)


def test_core_group_by_where_limit(engine, ledger):
    pums = sa.Table("pums", sa.MetaData(), autoload_with=engine)
    query = (sa.select(pums.c.educ, sa.func.count().label("n"), sa.func.avg(pums.c.income))
             .where(pums.c.age >= 18).group_by(pums.c.educ).order_by(pums.c.educ).limit(4))
    with engine.connect() as conn:
        result = conn.execute(query)
        assert list(result.keys()) == ["educ", "n", "avg_1"]
        rows = result.all()
    assert [r.educ for r in rows] == [1, 2, 3, 4]
    assert spent(ledger) == (0.5, 0.0)


def test_text_with_bound_parameters(engine, ledger):
    with engine.connect() as conn:
        rows = conn.execute(
            # a text compared with a text: an int column against text is refused
            sa.text("SELECT sex, COUNT(*) AS n FROM pums WHERE age > :low "
                    "AND CAST(educ AS VARCHAR) <> :q GROUP BY sex"),
            {"low": 30, "q": "it's'; DROP TABLE pums; --"},
        ).all()
        assert [r.sex for r in rows] == [0, 1]
        conn.rollback()  # refunds nothing
    assert spent(ledger) == (0.5, 0.0)
    assert "it''s''; DROP TABLE pums; --" in log(ledger)[0]["sql"]


def test_bigquery_options_through_sqlalchemy(engine, ledger):
    with engine.connect() as conn:
        conn.exec_driver_sql(
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.125) COUNT(*) FROM pums").all()
    assert spent(ledger) == (0.125, 0.0)


# -- pandas --------------------------------------------------------------------------


def test_pandas_read_sql(engine, statements, ledger):
    df = pd.read_sql("SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums "
                     "GROUP BY sex", engine)
    assert list(df.columns) == ["sex", "n", "avg_income"]
    assert df["sex"].tolist() == [0, 1]
    assert df["n"].between(300, 700).all()
    assert len(statements) == 1  # pandas' probes (has_table) come from the catalog
    df = pd.read_sql(sa.text("SELECT educ, COUNT(*) AS n FROM pums WHERE age > :a GROUP BY educ"),
                     engine, params={"a": 40})
    assert df["educ"].tolist() == list(range(1, 17))
    df = pd.read_sql("SELECT COUNT(*) AS n FROM pums WHERE age > ?", engine, params=(40,))
    assert list(df.columns) == ["n"] and len(df) == 1
    assert spent(ledger) == (1.5, 0.0)


# -- errors --------------------------------------------------------------------------


def test_errors_are_wrapped_by_sqlalchemy(db, ledger):
    eng = sa.create_engine(url(db, ledger, budget_epsilon=0.75))
    with eng.connect() as conn:
        with pytest.raises(sa_exc.ProgrammingError) as info:
            conn.exec_driver_sql("SELECT * FROM pums")
        assert isinstance(info.value.orig, dpsql.UnsupportedQueryError)
        assert isinstance(info.value.orig, dbapi.ProgrammingError)
        conn.rollback()
        conn.exec_driver_sql("SELECT COUNT(*) FROM pums").all()
        with pytest.raises(sa_exc.OperationalError) as info:
            conn.exec_driver_sql("SELECT COUNT(*) FROM pums")
        assert isinstance(info.value.orig, dpsql.BudgetExhaustedError)
        conn.rollback()
        with pytest.raises(sa_exc.NotSupportedError):
            conn.execute(sa.text("SELECT COUNT(*) FROM pums WHERE age > :a"),
                         [{"a": 1}, {"a": 2}])
    assert spent(ledger) == (0.5, 0.0)
    eng.dispose()
