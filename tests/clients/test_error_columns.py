"""Error bars as ordinary columns, through clients nobody on this project wrote.

Each client runs a real private query; the DB-API cursors it used are recorded, so the
columns it shows are compared with the :class:`dpsql.Result` behind them: every noisy
column is followed by ``<name>_error`` equal to ``Result.accuracy``, and ``confidence``
holds ``1 − alpha``.
"""

from __future__ import annotations

import csv
import io
import math
import sys

import pandas as pd
import polars as pl
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from dpsql import dbapi
from dpsql.cli import main
from dpsql.datasets import catalog_path

QUERY = "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex"
IN_SQL = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (error_columns = 1) sex, COUNT(*) AS n, "
          "AVG(income) AS avg_income FROM pums GROUP BY sex")
COLUMNS = ["sex", "n", "n_error", "avg_income", "avg_income_error", "confidence"]


@pytest.fixture
def cursors(monkeypatch):
    """Every DB-API cursor made during the test, to read the Result behind a client."""
    made = []
    real = dbapi.Connection.cursor

    def cursor(self):
        cur = real(self)
        made.append(cur)
        return cur

    monkeypatch.setattr(dbapi.Connection, "cursor", cursor)
    return made


@pytest.fixture
def url(pums_file, tmp_path):
    def make(**extra):
        query = {"catalog": str(catalog_path("pums")), "epsilon": "1.0",
                 "ledger": str(tmp_path / "ledger.sqlite"), "budget_epsilon": "100",
                 "budget_delta": "1e-3", **extra}
        return sa.engine.URL.create("dpsql+duckdb", database=str(pums_file), query=query)
    return make


def check(columns, rows, cursors):
    """``rows`` (as a client shows them) are the last answered Result's, with its errors."""
    result = [c.result for c in cursors if c.result is not None][-1]
    assert list(columns) == COLUMNS
    assert len(rows) == len(result.rows) == 2
    for shown, row, acc in zip(rows, result.rows, result.accuracy, strict=True):
        shown = tuple(shown)
        assert shown[0] == row[0] and shown[1] == row[1] and shown[3] == row[2]
        assert shown[2] == acc[1] and shown[4] == pytest.approx(acc[2], rel=1e-12)
        assert acc[1] > 0 and acc[2] > 0
        assert shown[5] == 0.95
        assert shown[1] >= 0  # consistent: no negative count


def test_pandas_read_sql_through_sqlalchemy_url_option(url, cursors):
    engine = sa.create_engine(url(error_columns="true"))
    try:
        df = pd.read_sql(QUERY, engine)
    finally:
        engine.dispose()
    check(df.columns, list(df.itertuples(index=False)), cursors)


def test_pandas_read_sql_through_sqlalchemy_option_in_the_sql(url, cursors):
    engine = sa.create_engine(url())
    try:
        df = pd.read_sql(IN_SQL, engine)
        check(df.columns, list(df.itertuples(index=False)), cursors)
        plain = pd.read_sql(QUERY, engine)  # the connection's default: values only
        assert list(plain.columns) == ["sex", "n", "avg_income"]
    finally:
        engine.dispose()


def test_pandas_read_sql_through_dbapi(pums_file, cursors):
    con = dbapi.connect(pums_file, catalog_path("pums"), budget=(100.0, 1e-3),
                        ledger=":memory:", epsilon=1.0, error_columns=True)
    try:
        with pytest.warns(UserWarning):  # pandas prefers SQLAlchemy; it still works
            df = pd.read_sql(QUERY, con)
        check(df.columns, list(df.itertuples(index=False)), cursors)
        # the SQL's own option turns them off for one query
        with pytest.warns(UserWarning):
            off = pd.read_sql("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (error_columns = "
                              "FALSE) COUNT(*) AS n FROM pums", con)
        assert list(off.columns) == ["n"]
    finally:
        con.close()


def test_polars_read_database(url, pums_file, cursors):
    engine = sa.create_engine(url(error_columns="1"))
    try:
        df = pl.read_database(QUERY, engine)
    finally:
        engine.dispose()
    check(df.columns, df.rows(), cursors)
    con = dbapi.connect(pums_file, catalog_path("pums"), budget=(100.0, 1e-3),
                        ledger=":memory:", epsilon=1.0)
    try:
        df = pl.read_database(IN_SQL, con)
    finally:
        con.close()
    check(df.columns, df.rows(), cursors)
    assert df.schema["n_error"] == pl.Int64 and df.schema["confidence"] == pl.Float64


@pytest.fixture
def ipython(monkeypatch):
    """An IPython shell with jupysql loaded."""
    # jupysql imports pyspark's Spark Connect module when pyspark is installed; without
    # grpc that import raises an error jupysql does not catch. Spark Connect plays no
    # part here: mark it missing, as jupysql's own fallback expects.
    if "sql.run.sparkdataframe" not in sys.modules:
        monkeypatch.setitem(sys.modules, "pyspark.sql.connect.dataframe", None)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "sql")
    shell.run_line_magic("config", "SqlMagic.displaycon = False")
    shell.run_line_magic("config", "SqlMagic.feedback = 0")
    yield shell
    shell.run_line_magic("sql", "--close dpsql")


def test_jupysql_sql_magic(ipython, url, cursors):
    target = url().render_as_string(hide_password=False)
    ipython.run_line_magic("sql", f"{target} --alias dpsql")
    result = ipython.run_line_magic("sql", IN_SQL)
    check(list(result.keys), list(result), cursors)
    frame = result.DataFrame()
    assert list(frame.columns) == COLUMNS
    # the connection option from the URL works the same
    ipython.run_line_magic("sql", "--close dpsql")
    ipython.run_line_magic("sql", f"{url(error_columns='true').render_as_string(False)} "
                                  "--alias dpsql")
    result = ipython.run_line_magic("sql", QUERY)
    check(list(result.keys), list(result), cursors)


def test_alias_collisions_get_deterministic_names(connect):
    res = connect().execute("SELECT sex, COUNT(*) AS n, SUM(age) AS n_error, "
                            "COUNT(*) AS confidence FROM pums GROUP BY sex", epsilon=1.0)
    columns, rows = res.error_table()
    assert columns == ["sex", "n", "n_error_2", "n_error", "n_error_error", "confidence",
                       "confidence_error", "confidence_2"]
    assert [r[2] for r in rows] == [a[1] for a in res.accuracy]
    assert [r[4] for r in rows] == [a[2] for a in res.accuracy]
    assert all(r[-1] == 0.95 for r in rows)
    # SQL clients often fold case: N_ERROR collides with n_error
    res = connect().execute("SELECT COUNT(*) AS n, SUM(age) AS N_ERROR FROM pums",
                            epsilon=1.0)
    assert res.error_table()[0] == ["n", "n_error_2", "N_ERROR", "N_ERROR_error",
                                    "confidence"]


def test_description_describes_the_error_columns_even_without_rows(pums_file):
    con = dbapi.connect(pums_file, catalog_path("pums"), budget=(100.0, 1e-3),
                        ledger=":memory:", epsilon=1.0, delta=1e-6, error_columns=True)
    try:
        cur = con.cursor()
        cur.execute("SELECT age, COUNT(*) AS n FROM pums WHERE age > 1000 GROUP BY age")
        assert cur.fetchall() == []
        assert [d[:2] for d in cur.description] == [
            ("age", "BIGINT"), ("n", "BIGINT"), ("n_error", "DOUBLE"),
            ("confidence", "DOUBLE")]
        cur.execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex")
        assert [d[:2] for d in cur.description] == [
            ("sex", "BIGINT"), ("n", "BIGINT"), ("n_error", "BIGINT"),
            ("confidence", "DOUBLE")]
        # accuracy stays parallel to the fetched rows
        assert [len(a) for a in cur.accuracy] == [4, 4]
        assert cur.accuracy[0][2] is None and cur.accuracy[0][1] == cur.fetchone()[2]
    finally:
        con.close()


@pytest.mark.parametrize("value", ["2", "yes", "'1'", "1.0", "TRUE1"])
def test_a_bad_error_columns_option_is_refused_for_free(pums_file, value):
    con = dbapi.connect(pums_file, catalog_path("pums"), budget=(100.0, 1e-3),
                        ledger=":memory:", epsilon=1.0)
    try:
        with pytest.raises(dbapi.ProgrammingError, match="error_columns"):
            con.cursor().execute(f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (error_columns = "
                                 f"{value}) COUNT(*) FROM pums")
        assert con.budget.spent == (0.0, 0.0)
    finally:
        con.close()
    with pytest.raises(dbapi.ProgrammingError, match="True or False"):
        dbapi.connect(pums_file, catalog_path("pums"), ledger=":memory:",
                      error_columns="yes")


def test_a_bad_url_value_is_refused(url):
    with pytest.raises(sa.exc.ArgumentError, match="error_columns='maybe' is not true"):
        sa.create_engine(url(error_columns="maybe"))


def test_python_api_accepts_the_option_and_df_carries_the_columns(connect):
    res = connect().execute(IN_SQL, epsilon=1.0)
    assert res.columns == ["sex", "n", "avg_income"]  # rows and accuracy: as always
    assert list(res.df.columns) == COLUMNS
    assert res.df.attrs == {"epsilon": 1.0, "delta": 0.0, "confidence": 0.95}


def test_cli_csv_carries_error_columns_and_cost(pums_file, tmp_path):
    out = CliRunner().invoke(main, [
        "query", QUERY, "-d", str(pums_file), "-c", str(catalog_path("pums")), "-e", "0.5",
        "--format", "csv", "--ledger", str(tmp_path / "l.sqlite"), "--budget", "10", "0"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert list(rows[0]) == COLUMNS + ["epsilon", "delta"]
    assert [float(r["epsilon"]) for r in rows] == [0.5, 0.5]
    assert all(float(r["delta"]) == 0 and float(r["confidence"]) == 0.95 for r in rows)
    assert all(int(r["n_error"]) > 0 and float(r["avg_income_error"]) > 0 for r in rows)
    df = pd.read_csv(io.StringIO(out.stdout))  # and pandas reads it as it is
    assert list(df.columns) == COLUMNS + ["epsilon", "delta"] and len(df) == 2
    assert not math.isnan(df["avg_income"][0])


def test_sqlalchemy_core_rows_carry_the_error_columns_by_name(url, cursors):
    engine = sa.create_engine(url(error_columns="true"))
    try:
        pums = sa.Table("pums", sa.MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            rows = conn.execute(sa.select(pums.c.sex, sa.func.count().label("n"))
                                .group_by(pums.c.sex)).all()
            total = conn.execute(sa.select(sa.func.count()).select_from(pums)).scalar()
    finally:
        engine.dispose()
    result = [c.result for c in cursors if c.result is not None][-2]
    assert [(r.sex, r.n, r.n_error, r.confidence) for r in rows] == [
        (*row, acc[1], 0.95) for row, acc in zip(result.rows, result.accuracy, strict=True)]
    assert total >= 0  # the first column is still the value


def test_a_schema_probe_gets_no_error_columns(pums_file):
    """jupysql's column probe (no rows, answered from the catalog) lists real columns."""
    con = dbapi.connect(pums_file, catalog_path("pums"), budget=(100.0, 1e-3),
                        ledger=":memory:", error_columns=True)
    try:
        cur = con.cursor()
        cur.execute('SELECT * FROM "pums" WHERE 1=0')
        names = [d[0] for d in cur.description]
        assert "confidence" not in names and not any(n.endswith("_error") for n in names)
        assert cur.fetchall() == [] and con.budget.spent == (0.0, 0.0)
    finally:
        con.close()
