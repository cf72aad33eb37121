"""Public-domain keys as an analyst sees them through pandas, SQLAlchemy and the DB-API.

``GROUP BY age`` answers every age of the catalog's bounds (it returned no rows at
ε = 0.5, δ = 1e-6 when ages went through partition selection), and WHERE over a
public-domain key returns only the keys that can satisfy it.
"""

from __future__ import annotations

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import registry

import dpsql.dbapi
from dpsql.datasets import catalog_path


@pytest.fixture
def engine(pums_file, tmp_path):
    registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")
    url = sa.engine.URL.create("dpsql+duckdb", database=str(pums_file), query={
        "catalog": str(catalog_path("pums")), "ledger": str(tmp_path / "ledger.sqlite"),
        "epsilon": "0.5", "delta": "1e-6"})
    eng = sa.create_engine(url)
    yield eng
    eng.dispose()


def test_pandas_group_by_bounded_int_answers_every_age(engine):
    df = pd.read_sql("SELECT age, COUNT(*) AS n FROM pums GROUP BY age", engine)
    assert list(df["age"]) == list(range(101))


def test_pandas_where_restricts_public_keys(engine):
    df = pd.read_sql("SELECT race, COUNT(*) AS n FROM pums WHERE race IN (1, 2) "
                     "GROUP BY race", engine)
    assert list(df["race"]) == [1, 2]
    df = pd.read_sql("SELECT sex, AVG(income) AS avg_income FROM pums WHERE sex = 1 "
                     "GROUP BY sex", engine)
    assert list(df["sex"]) == [1]
    df = pd.read_sql(sa.text("SELECT age, COUNT(*) AS n FROM pums WHERE age >= :a "
                             "GROUP BY age"), engine, params={"a": 18})
    assert list(df["age"]) == list(range(18, 101))


def test_readme_dbapi_example_answers_every_age(pums_file, tmp_path):
    con = dpsql.dbapi.connect(str(pums_file), catalog=str(catalog_path("pums")),
                              epsilon=0.5, ledger=str(tmp_path / "ledger.sqlite"))
    cur = con.cursor()
    cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25, delta = 1e-6) "
                "age, COUNT(*) FROM pums GROUP BY age")
    assert [r[0] for r in cur.fetchall()] == list(range(101))
    assert cur.cost == (0.25, 0.0)  # public keys: no delta spent
    con.close()
