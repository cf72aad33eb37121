"""Honest answers through the clients analysts use (pandas via ``Result.df``, the DB-API,
SQLAlchemy with ``pandas.read_sql``): what the contribution bounds cut is said per column,
capped per-user values read "N or more", the bias check measures the cut with DP, MIN <=
quantiles <= MAX, and intervals come as ``<name>_low`` / ``<name>_high`` columns.

The data: 300 people; person ``i`` has ``i % 15 + 1`` visits spread over four public
departments, so with ``max_rows = 10`` and ``max_groups = 2`` the 100 people with 11-15
visits lose rows in an ungrouped COUNT(*), and the 260 people with 3 or more visits
(they visit 3 or 4 departments) lose groups in a GROUP BY dept.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
import sqlalchemy as sa

import dpsql
import dpsql.answer_flow
import dpsql.engine
from dpsql import dbapi

CATALOG = {"dataset": "clinic", "tables": {"visits": {
    "user_key": "uid", "max_groups": 2, "max_rows": 10, "columns": {
        "uid": {"type": "int"},
        "dept": {"type": "string", "values": ["a", "b", "c", "d"]},
        "cost": {"type": "float", "lower": 0, "upper": 100}}}}}

#: a high epsilon: the discrete noise of a count is 0 except with negligible probability
#: (scale 2e-4), so the released counts are the exact ones
HIGH = 30000


@pytest.fixture(scope="module")
def clinic(tmp_path_factory):
    path = tmp_path_factory.mktemp("clinic") / "clinic.duckdb"
    con = duckdb.connect(str(path))
    con.execute("""
        CREATE TABLE visits AS
        SELECT i AS uid, ['a', 'b', 'c', 'd'][((i + j) % 4) + 1] AS dept,
               CAST((i * 7 + j * 13) % 100 AS DOUBLE) AS cost
        FROM range(300) r(i), range(15) s(j) WHERE j <= i % 15""")
    con.close()
    return path


@pytest.fixture
def conn(clinic):
    c = dpsql.connect(clinic, catalog=CATALOG, budget=(10**6, 1e-3), ledger=":memory:")
    yield c
    c.close()


def test_a_count_says_which_bound_cut_it_with_the_bound(conn):
    res = conn.execute("SELECT COUNT(*) AS n, COUNT(DISTINCT dept) AS d FROM visits",
                       epsilon=HIGH)
    frame = res.df
    assert list(frame.columns) == ["n", "n_error", "d", "d_error", "confidence"]
    # 2,400 visits, of which at most 10 per person are counted: 2,100, and nothing but
    # the note says that the true count is higher
    assert frame["n"][0] == sum(min(i % 15 + 1, 10) for i in range(300)) == 2100
    notes = [n for n in res.notes if n.startswith(("n:", "d:"))]
    assert notes[0].startswith("n: at most max_rows = 10 row(s) per user and group are "
                               "counted, so it counts the bounded data and can be below "
                               "the true count")
    assert notes[1].startswith("d: at most 10 distinct value(s) per user and group")
    # grouped by a public key: the max_groups cut is named too, for every noisy column
    res = conn.execute("SELECT dept, COUNT(*) AS n, SUM(cost) AS total FROM visits "
                       "GROUP BY dept", epsilon=1.0)
    assert any(n.startswith("n: at most max_rows = 10") and "max_groups = 2" in n
               for n in res.notes)
    assert any(n.startswith("total: each user's rows in a group weigh at most max_rows = 10")
               and "max_groups = 2" in n for n in res.notes)
    assert not any(n.startswith("dept:") for n in res.notes)  # a key is exact


def test_a_capped_per_user_count_reads_n_or_more(conn):
    res = conn.execute("WITH per AS (SELECT uid, COUNT(*) AS n FROM visits GROUP BY uid) "
                       "SELECT n, COUNT(*) AS people FROM per GROUP BY n ORDER BY n",
                       epsilon=HIGH)
    assert "per.n is a per-user count capped at max_rows = 10: a value of 10 means 10 or " \
           "more" in res.notes
    frame = res.df
    # values and types stay as they are: whole numbers 0..10, the last one "10 or more"
    assert list(frame["n"]) == list(range(11)) and frame["n"].dtype.kind == "i"
    assert frame["people"].iloc[10] == 120   # 20 people each with 10..15 visits
    assert frame["people"].iloc[3] == 20


def test_the_bias_check_measures_the_cut_through_the_dbapi(clinic):
    con = dbapi.connect(clinic, CATALOG, budget=(10**6, 1e-3), ledger=":memory:")
    cur = con.cursor()
    cur.execute(f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = {HIGH}, "
                "bias_check = 1) dept, COUNT(*) AS n FROM visits GROUP BY dept")
    bias = cur.result.bias
    assert (bias["users"], bias["rows_cut"], bias["groups_cut"]) == (300, 0, 260)
    assert bias["groups_share"] == pytest.approx(260 / 300)
    assert cur.cost == (HIGH, 0.0)  # the query still spends exactly its epsilon
    # the split: one statistic and the bias check, half of epsilon each
    assert [s["epsilon"] for s in cur.result.split] == [HIGH / 2] * 2
    assert bias["epsilon"] == HIGH / 2
    assert cur.result.split[-1]["name"] == "__bias"  # the shares add up to the cost
    note = cur.result.notes[-1]
    assert note.startswith(f"bias check (epsilon = {HIGH / 2:.4g} of this query's budget): "
                           "about 300 users have rows here; 0% of them")
    assert "86.7% (" in note and "touch more than max_groups = 2 groups" in note
    # ungrouped: rows are cut (100 people have more than 10 visits), groups cannot be
    cur.execute(f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = {HIGH}, "
                "bias_check = 1) COUNT(*) AS n FROM visits")
    bias = cur.result.bias
    assert (bias["users"], bias["rows_cut"], bias["groups_cut"]) == (300, 100, None)
    assert con.budget.spent == (2 * HIGH, 0.0)


def test_without_the_option_nothing_is_measured_or_spent_on_it(conn):
    res = conn.execute("SELECT COUNT(*) AS n FROM visits", epsilon=1.0)
    assert res.bias is None and res.split[0]["epsilon"] == 1.0
    assert "__raw_rows" not in res.sql


def test_explain_shows_the_bias_checks_share_and_spends_nothing(conn):
    before = conn.budget.spent
    ex = conn.explain("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, "
                      "bias_check = 1) dept, COUNT(*) AS n FROM visits GROUP BY dept")
    assert ex.statistics[0]["epsilon"] == 0.5
    assert ("bias check: takes one share of the split (epsilon = 0.5) for 3 noisy user "
            "counts (discrete Laplace, scale 6 each)") in str(ex)
    assert conn.explain("SELECT COUNT(*) FROM visits", epsilon=1.0,
                        bias_check=True).statistics[0]["epsilon"] == 0.5
    assert conn.budget.spent == before


def test_the_bias_check_is_free_where_nothing_can_be_cut(connect):
    conn = connect()   # the bundled pums: one row per person (a unique key)
    res = conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, "
                       "bias_check = 1) COUNT(*) AS n FROM pums")
    assert res.bias["free"] and res.split[0]["epsilon"] == 1.0 and res.cost == (1.0, 0.0)
    assert "bias check: each user has at most one row here" in res.notes[-1]


def test_a_bad_switch_is_refused_before_the_charge(conn):
    with pytest.raises(dpsql.DpsqlError, match="bias_check"):
        conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, "
                     "bias_check = 2) COUNT(*) FROM visits")
    with pytest.raises(dpsql.DpsqlError, match="bias_check must be True or False"):
        conn.execute("SELECT COUNT(*) FROM visits", epsilon=1.0, bias_check=1)
    assert conn.budget.spent == (0.0, 0.0)


@pytest.mark.parametrize("attempt", [0, *(pytest.param(i, marks=pytest.mark.slow)
                                           for i in (1, 2))])
def test_min_quantiles_and_max_come_out_ordered_in_pandas(conn, attempt):
    frame = conn.execute("SELECT dept, MIN(cost) AS lo, MEDIAN(cost) AS med, "
                         "QUANTILE_CONT(cost, 0.99) AS p99, MAX(cost) AS hi FROM visits "
                         "GROUP BY dept", epsilon=0.05).df
    assert ((frame["lo"] <= frame["med"]) & (frame["med"] <= frame["p99"])
            & (frame["p99"] <= frame["hi"])).all()
    for name in ("lo", "med", "p99", "hi"):
        assert (frame[f"{name}_error"] >= 0).all()


def test_interval_columns_in_pandas_with_the_option_and_the_connect_flag(clinic):
    sql = "SELECT dept, COUNT(*) AS n, AVG(cost) AS avg_cost FROM visits GROUP BY dept"
    conn = dpsql.connect(clinic, catalog=CATALOG, budget=(100, 1e-3), ledger=":memory:")
    frame = conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, "
                         "intervals = 1) " + sql[len("SELECT "):]).df
    assert list(frame.columns) == ["dept", "n", "n_error", "n_low", "n_high", "avg_cost",
                                   "avg_cost_error", "avg_cost_low", "avg_cost_high",
                                   "confidence"]
    for name in ("n", "avg_cost"):
        assert (frame[f"{name}_low"] <= frame[name]).all()
        assert (frame[name] <= frame[f"{name}_high"]).all()
        # the half-width is the larger side: it covers the interval
        assert (frame[name] - frame[f"{name}_error"] <= frame[f"{name}_low"] + 1e-9).all()
    assert list(conn.execute(sql, epsilon=1.0).df.columns) == [
        "dept", "n", "n_error", "avg_cost", "avg_cost_error", "confidence"]
    conn.close()
    conn = dpsql.connect(clinic, catalog=CATALOG, budget=(100, 1e-3), ledger=":memory:",
                         intervals=True)
    assert "n_low" in conn.execute(sql, epsilon=1.0).df.columns
    assert "n_low" not in conn.execute(sql, epsilon=1.0, intervals=False).df.columns
    conn.close()


def test_an_asymmetric_interval_is_stated_honestly(conn, monkeypatch):
    """A sum of non-negative costs whose noise came out very negative: released as 0,
    its interval is [0, w], not 0 ± w; the columns and a note say so."""
    real = dpsql.answer_flow.add_noise

    def negative(plan, columns, rows):
        noisy = real(plan, columns, rows)
        for s in plan.stats:
            noisy.stats[s.name] = [v - 10**9 for v in noisy.stats[s.name]]
        return noisy

    monkeypatch.setattr(dpsql.answer_flow, "add_noise", negative)
    res = conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, "
                       "intervals = 1) SUM(cost) AS total FROM visits")
    frame = res.df
    w = res.accuracy[0][0]
    assert frame["total"][0] == 0.0 and frame["total_low"][0] == 0.0
    assert frame["total_high"][0] == frame["total_error"][0] == w
    assert any(n.startswith("total: its interval is not symmetric") and "total_low" in n
               for n in res.notes)


def test_interval_columns_through_the_dbapi_and_sqlalchemy(clinic, tmp_path):
    con = dbapi.connect(clinic, CATALOG, budget=(100, 1e-3), ledger=":memory:",
                        epsilon=1.0, intervals=True)
    cur = con.cursor()
    cur.execute("SELECT dept, COUNT(*) AS n FROM visits GROUP BY dept")
    assert [d[0] for d in cur.description] == ["dept", "n", "n_error", "n_low", "n_high",
                                               "confidence"]
    assert all(low <= n <= high for _, n, _, low, high, _ in cur.fetchall())
    cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (intervals = 0) COUNT(*) AS n "
                "FROM visits")
    assert [d[0] for d in cur.description] == ["n"]
    catalog = tmp_path / "clinic.yaml"
    import yaml

    catalog.write_text(yaml.safe_dump(CATALOG))
    url = sa.engine.URL.create("dpsql+duckdb", database=str(clinic), query={
        "catalog": str(catalog), "epsilon": "1.0", "ledger": str(tmp_path / "l.sqlite"),
        "budget_epsilon": "100", "budget_delta": "1e-3", "intervals": "true"})
    engine = sa.create_engine(url)
    with engine.connect() as c:
        frame = pd.read_sql(sa.text("SELECT COUNT(*) AS n FROM visits"), c)
    assert list(frame.columns) == ["n", "n_error", "n_low", "n_high", "confidence"]
    engine.dispose()
