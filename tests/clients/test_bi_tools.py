"""What BI tools and notebooks send, through the clients that send it (issue 22, item 5).

Superset's and Metabase's ``virtual_table`` wrapper and ibis's top-k through pandas,
SQLAlchemy Core over a reflected ``main.pums``, jupysql's ``--with`` snippets, boxplot
and profile under IPython; public constants, date names and formats; refusals that name
what the analyst wrote. Every refusal is checked to be free (nothing charged).
"""

from __future__ import annotations

import datetime
import sqlite3

import duckdb
import pytest
import sqlglot

import dpsql
from dpsql.client_sql import constants
from dpsql.datasets import catalog_path
from dpsql.errors import UnknownColumnError, UnsupportedQueryError
from dpsql.normalize import normalize
from dpsql.parse import parse

sa = pytest.importorskip("sqlalchemy")
pd = pytest.importorskip("pandas")

SUPERSET = ("SELECT * FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS "
            "virtual_table LIMIT 1000")
#: ibis's top-k: the aggregate, then ORDER BY its count and LIMIT outside
IBIS_TOPK = ('SELECT * FROM (SELECT "t0"."educ", COUNT(*) AS "CountStar(pums)" FROM "pums" '
             'AS "t0" GROUP BY 1) AS "t1" ORDER BY "t1"."CountStar(pums)" DESC LIMIT 5')
CTE_FILTERED = ("WITH t AS (SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ) "
                "SELECT * FROM t WHERE n > 100")


@pytest.fixture
def engine(pums_file, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    eng = sa.create_engine(f"dpsql+duckdb:///{pums_file}?catalog={catalog_path('pums')}"
                           f"&epsilon=1.0&ledger={ledger}&budget_epsilon=50")
    yield eng, ledger
    eng.dispose()


def _spent(ledger):
    from dpsql.ledger import Ledger

    led = Ledger(ledger)
    try:
        return led.spent("pums").basic[0]
    finally:
        led.close()


# -- an outer query over an aggregate's released rows -----------------------------------


def test_superset_wrapper_through_pandas_is_answered_once(engine):
    eng, ledger = engine
    with eng.connect() as conn:
        df = pd.read_sql(sa.text(SUPERSET), conn)
    assert list(df.columns) == ["sex", "n"] and sorted(df["sex"]) == [0, 1]
    assert df["n"].between(300, 700).all()
    assert _spent(ledger) == pytest.approx(1.0)  # one query at the URL's epsilon


def test_ibis_topk_and_cte_filter_through_pandas(engine):
    eng, ledger = engine
    with eng.connect() as conn:
        top = pd.read_sql(sa.text(IBIS_TOPK), conn)
        big = pd.read_sql(sa.text(CTE_FILTERED), conn)
    assert list(top.columns) == ["educ", "CountStar(pums)"] and len(top) == 5
    assert list(top["CountStar(pums)"]) == sorted(top["CountStar(pums)"], reverse=True)
    # the filter reads the noisy counts: every released row passes it
    assert list(big.columns) == ["educ", "n"] and (big["n"] > 100).all()
    assert set(big["educ"]) <= {9, 11, 13, 12}  # the large education groups
    assert _spent(ledger) == pytest.approx(2.0)


def test_sqlalchemy_core_over_reflected_main_schema(engine):
    eng, _ = engine
    pums = sa.Table("pums", sa.MetaData(), autoload_with=eng, schema="main")
    inner = sa.select(pums.c.educ, sa.func.count().label("n")).group_by(pums.c.educ)
    sub = inner.subquery()
    outer = sa.select(sub).where(sub.c.n > 100).order_by(sub.c.n.desc())
    assert "main.pums" in str(outer.compile(eng))
    with eng.connect() as conn:
        rows = conn.execute(outer).fetchall()
        plain = conn.execute(sa.select(sa.func.avg(pums.c.age))).scalar()
    assert rows and all(n > 100 for _, n in rows)
    assert [n for _, n in rows] == sorted((n for _, n in rows), reverse=True)
    assert 30 < plain < 60


@pytest.mark.parametrize("sql", [
    # a join back to a private table
    "SELECT t.n, p.age FROM (SELECT pid, COUNT(*) AS n FROM pums GROUP BY pid) AS t "
    "JOIN pums AS p ON t.pid = p.pid",
    # a correlated subquery
    "SELECT n, (SELECT MAX(age) FROM pums WHERE pums.sex = t.sex) AS m FROM "
    "(SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS t",
    # a subquery in the outer filter
    "SELECT n FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS t "
    "WHERE sex IN (SELECT sex FROM pums)",
    # a window over the released rows
    "SELECT n, ROW_NUMBER() OVER (ORDER BY n) AS r FROM "
    "(SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS t",
    # a column of the private table, not of the released rows
    "SELECT pums.age FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS t",
    "SELECT age FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS t",
    # an output named like a column inside (HAVING could rebind it)
    "SELECT n AS sex FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex) AS t "
    "WHERE sex = 1",
    # an outer filter over rows an inner LIMIT picked first
    "SELECT * FROM (SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex LIMIT 1) AS t "
    "WHERE n > 3",
    # SELECT * over rows that are not released stays refused
    "SELECT * FROM (SELECT sex, age FROM pums) AS t LIMIT 10",
    "SELECT * FROM main.pums",
])
def test_outer_queries_that_reach_private_rows_are_refused_free(connect, sql):
    conn = connect()
    with pytest.raises((UnsupportedQueryError, UnknownColumnError)) as err:
        conn.execute(sql, epsilon=1.0)
    assert not err.value.charged and conn.budget.spent == (0.0, 0.0)


def test_outer_query_is_the_aggregate_with_having_order_and_limit(pums_catalog_fixture=None):
    from dpsql.datasets import pums_catalog

    got = normalize(parse(
        "SELECT n * 2 AS m, educ FROM (SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ) "
        "AS t WHERE educ < 5 ORDER BY m LIMIT 3"), pums_catalog()).sql(dialect="duckdb")
    assert got == ("SELECT (COUNT(*)) * 2 AS m, educ AS educ FROM pums GROUP BY educ "
                   "HAVING educ < 5 ORDER BY m LIMIT 3")


# -- jupysql under IPython ----------------------------------------------------------------


def test_jupysql_with_snippet_over_an_aggregate(ipython):
    ip, _, ledger = ipython
    ip.run_cell_magic("sql", "--save by_educ --no-execute",
                      "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ")
    result = ip.run_cell_magic("sql", "--with by_educ", "SELECT * FROM by_educ WHERE n > 100")
    df = result.DataFrame()
    assert list(df.columns) == ["educ", "n"] and (df["n"] > 100).all() and len(df) >= 2
    assert _spent(ledger) == pytest.approx(0.5)


def _cell(ip, text, capsys):
    result = ip.run_cell(text)
    out = capsys.readouterr()
    return result, out.out + out.err


def test_sqlcmd_profile_is_a_one_line_free_refusal(ipython, capsys):
    ip, _, ledger = ipython
    result, shown = _cell(ip, "%sqlcmd profile -t pums", capsys)
    assert not result.success
    lines = [line for line in shown.splitlines() if line.strip()]
    assert lines == ["UnsupportedQueryError: column 'pid' in output column 'pid' must appear "
                     "in GROUP BY or inside an aggregate: only aggregates over groups can be "
                     "released"], shown
    assert _spent(ledger) == 0.0


def test_boxplot_quartiles_are_answered_and_its_outliers_refused_in_one_line(ipython, capsys):
    pytest.importorskip("matplotlib")
    ip, _, ledger = ipython
    result, shown = _cell(ip, "%sqlplot boxplot --table pums --column age", capsys)
    # the quartiles (percentile_disc ... OVER ()), the mean and the whiskers are answered;
    # the outliers (SELECT age ... WHERE age < lo OR age > hi) are raw rows: refused
    assert not result.success
    lines = [line for line in shown.splitlines() if line.strip()]
    assert lines[-1].startswith("UnsupportedQueryError: column 'age'") and len(lines) == 1
    assert _spent(ledger) == pytest.approx(4 * 0.5)


def test_whole_table_quantile_over_an_empty_window(connect):
    conn = connect()
    res = conn.execute(
        'SELECT percentile_disc(0.25) WITHIN GROUP (ORDER BY "age") OVER (), '
        'percentile_disc(0.50) WITHIN GROUP (ORDER BY "age") OVER (), '
        'percentile_disc(0.75) WITHIN GROUP (ORDER BY "age") OVER () FROM pums', epsilon=3.0)
    assert len(res.rows) == 1 and res.cost == (3.0, 0.0)
    q1, med, q3 = res.rows[0]
    assert 0 <= q1 <= 100 and 0 <= med <= 100 and 0 <= q3 <= 100
    for sql in ("SELECT age, percentile_disc(0.5) WITHIN GROUP (ORDER BY age) OVER () FROM pums",
                "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY age) OVER (PARTITION BY "
                "sex) FROM pums",
                "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY age) OVER () FROM pums "
                "GROUP BY sex",
                "SELECT COUNT(*), percentile_disc(0.5) WITHIN GROUP (ORDER BY age) OVER () "
                "FROM pums"):
        with pytest.raises(UnsupportedQueryError):
            conn.execute(sql, epsilon=1.0)
    assert conn.budget.spent == (3.0, 0.0)


# -- constants, dates and names ------------------------------------------------------------


def test_current_date_and_timestamp_are_literals_computed_before_the_charge():
    from dpsql.datasets import pums_catalog

    now = datetime.datetime(2026, 11, 26, 17, 40, 31, 123456)
    tree = constants(parse("SELECT CURRENT_DATE, COUNT(*) FROM pums WHERE "
                           "CURRENT_TIMESTAMP > NOW() AND today() = CURRENT_DATE"),
                     pums_catalog(), now=now)
    assert tree.sql(dialect="duckdb") == (
        "SELECT CAST('2026-11-26' AS DATE) AS \"CURRENT_DATE\", COUNT(*) FROM pums WHERE "
        "CAST('2026-11-26 17:40:31.123456' AS TIMESTAMP) > CAST('2026-11-26 "
        "17:40:31.123456' AS TIMESTAMP) AND CAST('2026-11-26' AS DATE) = "
        "CAST('2026-11-26' AS DATE)")


@pytest.fixture
def clinic(tmp_path):
    """Visits with dates: 300 people, 3,000 visits over 2024."""
    path = tmp_path / "clinic.duckdb"
    con = duckdb.connect(str(path))
    con.execute("""CREATE TABLE visits AS SELECT (range % 300)::BIGINT AS pid,
        DATE '2024-01-01' + (range * 7 % 366)::INTEGER AS d,
        CASE range % 3 WHEN 0 THEN 'in' ELSE 'out' END AS kind FROM range(3000)""")
    con.close()
    catalog = {"dataset": "clinic", "tables": {"visits": {
        "user_key": "pid", "max_groups": 7, "max_rows": 20, "columns": {
            "pid": {"type": "int"},
            "d": {"type": "date", "lower": "2024-01-01", "upper": "2024-12-31"},
            "kind": {"type": "string", "values": ["in", "out"]}}}}}
    conn = dpsql.connect(path, catalog=catalog, budget=(100.0, 1e-3), ledger=":memory:")
    yield conn, path
    conn.close()


def test_dayname_monthname_strftime_through_pandas_style_queries(clinic):
    conn, _ = clinic
    res = conn.execute("SELECT COUNT(*) AS n FROM visits WHERE dayname(d) = 'Monday' AND "
                       "d < CURRENT_DATE", epsilon=5.0)
    assert 300 < res.rows[0][0] < 560  # 3000 visits, one day in seven
    assert "TRY(DAYNAME(" in res.sql  # guarded: not on DuckDB's allow-list
    res = conn.execute("SELECT strftime(d, '%Y-%m') AS ym, monthname(d) AS mn, COUNT(*) AS n "
                       "FROM visits GROUP BY 1, 2", epsilon=5.0, delta=1e-4)
    for ym, mn, _ in res.rows:
        assert datetime.datetime.strptime(ym, "%Y-%m").strftime("%B") == mn


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT strftime(d, '%Y%s') AS y, COUNT(*) FROM visits GROUP BY 1",
     "strftime format '%Y%s' is not supported"),
    ("SELECT strftime(d, kind) AS y, COUNT(*) FROM visits GROUP BY 1",
     "strftime format 'kind' is not supported"),
    ("SELECT LISTAGG(kind) FROM visits", "function LISTAGG() is not supported: it would "
     "release raw values: GROUP BY the column and COUNT(*) each value"),
    ("SELECT to_char(d, 'YYYY') AS y, COUNT(*) FROM visits GROUP BY 1",
     "function to_char() is not supported: write strftime(d, '%Y-%m')"),
    ("SELECT COUNT(*) FROM visits WHERE EXISTS (SELECT 1 FROM visits)",
     "EXISTS (subquery) is not supported: use a JOIN"),
    ("SELECT date_part('year', d) AS y, COUNT(*) FROM visits GROUP BY 1",
     "function date_part() is not supported: write EXTRACT(part FROM d)"),
])
def test_refusals_name_what_the_analyst_wrote(clinic, sql, message):
    conn, _ = clinic
    with pytest.raises(UnsupportedQueryError) as err:
        conn.execute(sql, epsilon=1.0)
    assert message in str(err.value) and not err.value.charged
    assert "TIME_TO_STR" not in str(err.value) and "GROUP_CONCAT" not in str(err.value)
    assert conn.budget.spent == (0.0, 0.0)


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM (pums) AS C",
    "SELECT C.sex, COUNT(*) AS n FROM (pums) AS C GROUP BY C.sex",
    "SELECT COUNT(*) AS n FROM (pums JOIN pums_dup USING (pid))",
    "SELECT COUNT(*) AS n FROM (SELECT T.* FROM pums AS T JOIN pums_dup AS D ON T.pid = D.pid) "
    "AS x",
    "SELECT PI() * COUNT(*) AS x FROM pums WHERE age < PI() * 10",
])
def test_smartnoise_spellings_are_answered(connect, sql):
    res = connect().execute(sql, epsilon=1.0)
    assert res.rows and res.cost == (1.0, 0.0)


# -- SQLite: date truncation ------------------------------------------------------------


@pytest.mark.parametrize("unit", ["year", "quarter", "month", "week", "day", "hour"])
@pytest.mark.parametrize("family", ["DATE", "TIMESTAMP"])
def test_sqlite_date_trunc_matches_duckdb(unit, family):
    """The SQLite form of ``date_trunc`` gives DuckDB's value, in its input's text form."""
    from dpsql.backends import dialects

    values = ["2024-01-01", "2024-02-29", "2024-03-31", "2023-12-31", "2024-07-07",
              "2024-09-30", "2000-01-02", "1999-11-15"]
    if family == "TIMESTAMP":
        values = [f"{v} {h:02d}:{h * 7 % 60:02d}:13" for h, v in enumerate(values)]
    tree = sqlglot.parse_one(f"SELECT DATE_TRUNC('{unit}', x) AS y FROM t", read="duckdb")
    ctx = dialects.Context({"x": dialects.DATE if family == "DATE" else dialects.TIMESTAMP},
                           "sqlite", {}, {}, {})
    sql = dialects.sqlite_dates(tree, ctx).sql(dialect="sqlite")
    lite = sqlite3.connect(":memory:")
    lite.execute("CREATE TABLE t (x TEXT)")
    lite.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values] + [("not a date",)])
    got = [r[0] for r in lite.execute(sql)]
    duck = duckdb.connect()
    fmt = "%Y-%m-%d" if family == "DATE" else "%Y-%m-%d %H:%M:%S"
    want = [duck.execute(f"SELECT strftime(date_trunc('{unit}', CAST(? AS {family})), '{fmt}')",
                         [v]).fetchone()[0] for v in values]
    assert got == [*want, None]  # not a date: NULL, never an error


@pytest.mark.parametrize("sql", ['SELECT COUNT(*) AS n FROM "main"."pums"',
                                 "SELECT main.pums.sex, COUNT(*) AS n FROM main.pums "
                                 "GROUP BY main.pums.sex"])
def test_the_reflected_schema_names_the_catalog_tables(connect, sql):
    assert connect().execute(sql, epsilon=1.0).rows
