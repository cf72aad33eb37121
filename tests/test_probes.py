"""Schema probes (dpsql.probe): a query that provably returns no rows is answered free.

The answer comes from the catalog alone; nothing runs on the data, nothing is spent, and
the ledger logs it as answered at zero cost. Anything that is not provably empty, e.g.
``WHERE age = 0``, is not a probe: it goes through the normal pipeline as before.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import registry

import dpsql
from dpsql import dbapi
from dpsql.datasets import catalog_path, pums_catalog
from dpsql.probe import schema_probe
from tests.support import backend_of, ledger_of

PUMS = [("pid", "int"), ("age", "int"), ("sex", "int"), ("educ", "int"), ("race", "int"),
        ("income", "float"), ("married", "int")]


@pytest.mark.parametrize(("sql", "columns"), [
    ('SELECT * FROM "pums" WHERE 1=0', PUMS),            # jupysql
    ("SELECT * FROM pums LIMIT 0", PUMS),
    ("SELECT * FROM pums WHERE FALSE", PUMS),
    ("SELECT * FROM pums WHERE NULL", PUMS),
    ("SELECT p.* FROM pums AS p WHERE 1 = 1 AND 0 > 1", PUMS),
    ("SELECT * FROM pums WHERE NOT (2 >= 1) LIMIT 5", PUMS),
    ("SELECT * FROM pums WHERE -1 = 1 OR NULL", PUMS),
    ("SELECT age, income AS money FROM pums WHERE 1=0", [("age", "int"), ("money", "float")]),
    ("SELECT p.sex, age FROM pums p LIMIT 0", [("sex", "int"), ("age", "int")]),
])
def test_probes(sql, columns):
    assert schema_probe(sql, pums_catalog()) == columns


@pytest.mark.parametrize("sql", [
    "SELECT * FROM pums WHERE age = 0",                  # depends on the data
    "SELECT * FROM pums WHERE 1=0 OR age > 3",
    "SELECT * FROM pums WHERE 1=0 AND age > 3",          # no column anywhere, however sure
    "SELECT * FROM pums WHERE 1 = 1",
    "SELECT * FROM pums WHERE 1",
    "SELECT * FROM pums WHERE 'a' = 'b'",
    "SELECT * FROM pums WHERE ABS(1) = 0",
    "SELECT * FROM pums WHERE 1 IN (SELECT pid FROM pums)",
    "SELECT * FROM pums LIMIT 1",
    "SELECT * FROM pums WHERE age = 3 LIMIT 0",
    "SELECT * FROM pums LIMIT 0 OFFSET 2",
    "SELECT COUNT(*) FROM pums WHERE 1=0",               # one row, whatever the data
    "SELECT age + 1 FROM pums LIMIT 0",
    "SELECT sex FROM pums WHERE 1=0 GROUP BY sex",
    "SELECT DISTINCT sex FROM pums WHERE 1=0",
    "SELECT * FROM pums ORDER BY age LIMIT 0",
    "SELECT * FROM pums a JOIN pums_dup b ON a.pid = b.pid WHERE 1=0",
    "SELECT * FROM (SELECT * FROM pums) d WHERE 1=0",
    "WITH d AS (SELECT * FROM pums) SELECT * FROM d WHERE 1=0",
    "SELECT * FROM read_csv('/etc/passwd') WHERE 1=0",
    "SELECT x.* FROM pums p WHERE 1=0",
    "SELECT * FROM pums WHERE 1=0 UNION SELECT * FROM pums",
    "DELETE FROM pums WHERE 1=0",
])
def test_not_probes(sql):
    assert schema_probe(sql, pums_catalog()) is None


def test_probes_of_unknown_names_are_refused():
    with pytest.raises(dpsql.UnknownTableError):
        schema_probe("SELECT * FROM nowhere WHERE 1=0", pums_catalog())
    with pytest.raises(dpsql.UnknownColumnError):
        schema_probe("SELECT nothing FROM pums LIMIT 0", pums_catalog())


def test_a_probe_runs_nothing_and_costs_nothing(conn):
    backend = backend_of(conn)

    def touched(*args, **kwargs):
        raise AssertionError("a probe must not reach the backend")

    backend.execute = backend.check = touched
    res = conn.execute('SELECT * FROM "pums" WHERE 1=0', epsilon=1.0)
    assert res.columns == [c for c, _ in PUMS] and res.rows == [] and res.cost == (0.0, 0.0)
    assert list(res.df.columns) == res.columns and len(res.df) == 0
    assert conn.budget.spent == (0.0, 0.0)
    (entry,) = ledger_of(conn).log()
    assert (entry["outcome"], entry["epsilon"], entry["delta"]) == ("answered", 0, 0)


def test_a_query_that_may_return_rows_is_not_a_probe(conn):
    with pytest.raises(dpsql.UnsupportedQueryError, match="raw rows"):
        conn.execute("SELECT * FROM pums WHERE age = 0", epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
    assert ledger_of(conn).log()[0]["outcome"] == "refused"


@pytest.fixture
def dbapi_conn(pums_file):
    con = dbapi.connect(pums_file, catalog=dataclasses.replace(pums_catalog(), budget=None),
                        budget=(1.0, 1e-6), ledger=":memory:")
    yield con
    con.close()


def test_dbapi_description_has_the_catalogs_names_and_types(dbapi_conn):
    cur = dbapi_conn.cursor()  # no epsilon anywhere: a probe needs none
    cur.execute('SELECT * FROM "pums" WHERE 1=0')
    assert [d[0] for d in cur.description] == [c for c, _ in PUMS]
    assert [d[1] for d in cur.description] == [dbapi.CATALOG_TYPE_CODES[t] for _, t in PUMS]
    assert cur.fetchall() == [] and cur.cost == (0.0, 0.0)
    cur.execute("SELECT income AS money FROM pums LIMIT 0")
    assert cur.description[0][:2] == ("money", "DOUBLE")
    with pytest.raises(dbapi.ProgrammingError, match="no epsilon"):
        cur.execute("SELECT * FROM pums WHERE age = 0")
    assert dbapi_conn.budget.spent == (0.0, 0.0)


def test_pandas_read_sql_of_a_probe_is_an_empty_frame(pums_file, tmp_path):
    registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")
    url = sa.engine.URL.create("dpsql+duckdb", database=str(pums_file), query={
        "catalog": str(catalog_path("pums")), "ledger": str(tmp_path / "ledger.sqlite")})
    engine = sa.create_engine(url)
    try:
        frame = pd.read_sql('SELECT * FROM "pums" WHERE 1=0', engine)
        assert list(frame.columns) == [c for c, _ in PUMS] and len(frame) == 0
        frame = pd.read_sql(sa.text("SELECT age, sex FROM pums LIMIT 0"), engine)
        assert list(frame.columns) == ["age", "sex"] and len(frame) == 0
        with engine.connect() as c:
            assert c.connection.dbapi_connection.budget.spent == (0.0, 0.0)
    finally:
        engine.dispose()


@pytest.mark.parametrize("where", ["1e-400 = 0", "2e308 = 3e308",
                                   "1 = 1." + "0" * 40 + "1", "0.1 + 0.2 = 0.3"])
def test_literals_a_database_may_round_are_not_folded(where):
    # DuckDB reads 1e-400 as 0 and both of 2e308, 3e308 as infinity: these conditions
    # are true there, so such a query is no probe
    assert schema_probe(f"SELECT age FROM pums WHERE {where}", pums_catalog()) is None
