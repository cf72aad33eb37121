"""End to end through the public API on DuckDB."""

from __future__ import annotations

import dataclasses
import math

import duckdb
import pandas as pd
import pytest

import dpsql
from dpsql.datasets import catalog_path, load_pums
from tests.support import duckdb_of

QUERY = "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex"


def test_issue_example(tmp_path):
    load_pums(tmp_path / "pums.duckdb")
    conn = dpsql.connect(str(tmp_path / "pums.duckdb"), catalog=str(catalog_path("pums")),
                         budget=(10.0, 1e-5))
    res = conn.execute(QUERY, epsilon=1.0, delta=1e-6)
    assert res.columns == ["sex", "n", "avg_income"]
    assert [r[0] for r in res.rows] == [0, 1]
    assert all(isinstance(r, tuple) and len(r) == 3 for r in res.rows)
    assert isinstance(res.df, pd.DataFrame)
    assert list(res.df.columns) == ["sex", "n", "n_error", "avg_income", "avg_income_error",
                                    "confidence"]  # the error bars as columns
    assert len(res.accuracy) == len(res.rows)
    for acc in res.accuracy:
        assert acc[0] is None
        assert acc[1] > 0 and acc[2] > 0
    # public keys: no partition selection, so no delta is spent
    assert res.cost == (1.0, 0.0)
    # pums declares PRIMARY KEY (pid): one row per user, so no per-user aggregate
    assert "__per_user" not in res.sql and "LEAST(GREATEST(income, 0), 500000)" in res.sql
    assert conn.budget.spent == (1.0, 0.0)
    assert conn.budget.remaining == (9.0, 1e-5)
    conn.close()


def test_accepts_memory_and_open_connection():
    db = duckdb.connect()
    load_pums(db)
    conn = dpsql.connect(db, catalog=catalog_path("pums"), budget=(1.0, 0.0), ledger=":memory:")
    assert len(conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.5).rows) == 1
    with pytest.raises(dpsql.LedgerError, match="has no place for a"):
        dpsql.connect(db, catalog=catalog_path("pums"), budget=(1.0, 0.0))
    empty = dpsql.connect(":memory:", catalog=catalog_path("pums"), budget=(1.0, 0.0),
                          ledger=":memory:")
    with pytest.raises(dpsql.UnknownTableError, match="not in the database"):
        empty.execute("SELECT COUNT(*) FROM pums", epsilon=0.5)
    assert empty.budget.spent == (0.0, 0.0)


def test_answers_are_close_to_the_truth(connect, pums_db):
    # alpha=1e-9: each interval fails with probability <= 1e-9, so this test does not flake
    conn = connect(alpha=1e-9)
    res = conn.execute(QUERY, epsilon=50.0)
    truth = dict(((s, (n, a)) for s, n, a in pums_db.execute(
        "SELECT sex, COUNT(*), AVG(income) FROM pums GROUP BY sex").fetchall()))
    for (sex, n, avg), (_, hn, ha) in zip(res.rows, res.accuracy, strict=True):
        assert abs(n - truth[sex][0]) <= hn
        assert abs(avg - truth[sex][1]) <= ha


def _data_keys_catalog():
    """The bundled catalog with no int column's bounds making a public domain
    (``max_int_domain: 0``): ``GROUP BY age`` takes partition selection."""
    from dpsql.datasets import pums_catalog

    catalog = pums_catalog()
    return dataclasses.replace(catalog, budget=None, limits=dataclasses.replace(
        catalog.limits, max_int_domain=0))


def test_explain_spends_nothing(connect):
    conn = connect(budget=(1.0, 1e-6), catalog=_data_keys_catalog())
    ex = conn.explain("SELECT age, COUNT(*), SUM(income) FROM pums GROUP BY age",
                      epsilon=1.0, delta=1e-6)
    assert conn.budget.spent == (0.0, 0.0)
    assert ex.cost == (1.0, 1e-6)
    names = [s["name"] for s in ex.statistics]
    assert names == ["__s0", "__s1", "__users"]
    # a third of epsilon each: two statistics and the partition selection
    assert all(math.isclose(s["epsilon"], 1 / 3) for s in ex.statistics)
    count = ex.statistics[0]
    assert count["linf"] == 1 and count["scale"] == 3.0
    assert count["half_width"] == 9  # P(|Z| > 9) <= 5% for discrete Laplace(3)
    assert ex.partition_selection["threshold"] == 41
    assert "GROUP BY age" in ex.sql and "Rewritten SQL" in str(ex)
    dup = conn.explain("SELECT age, COUNT(*) FROM pums_dup GROUP BY age", epsilon=1.0,
                       delta=1e-6)
    assert "__per_user" in dup.sql and "__bounded" in dup.sql


def test_per_user_aggregate_is_skipped_only_for_keys_unique_in_the_database(tmp_path):
    path = tmp_path / "u.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE a AS SELECT i AS uid, i % 3 AS g FROM range(100) r(i)")
    con.execute("CREATE TABLE b AS SELECT * FROM a")
    con.execute("ALTER TABLE b ADD PRIMARY KEY (uid)")
    con.close()
    columns = {"uid": "int", "g": {"type": "int", "values": [0, 1, 2]}}
    cat = {"tables": {t: {"user_key": "uid", "max_rows": 5, "max_groups": 2,
                          "columns": columns} for t in ("a", "b")}}
    conn = dpsql.connect(path, catalog=cat, budget=(10, 0), ledger=":memory:")
    a = conn.explain("SELECT g, COUNT(*) FROM a GROUP BY g", epsilon=1.0)
    b = conn.explain("SELECT g, COUNT(*) FROM b GROUP BY g", epsilon=1.0)
    assert "__per_user" in a.sql and a.statistics[0]["l1"] == 10  # G · R from the catalog
    assert "__per_user" not in b.sql and b.statistics[0]["l1"] == 1  # one row per user


def test_budget_split_across_statistics(connect):
    conn = connect()
    ex = conn.explain("SELECT COUNT(*), SUM(age), AVG(age), AVG(income) FROM pums",
                      epsilon=0.8)
    # COUNT(*) is shared by both AVGs; SUM(age) differs from the centred SUM(age - 50)
    assert [s["statistic"] for s in ex.statistics] == [
        "COUNT(*)", "SUM(age)", "SUM(age - 50)", "SUM(income - 250000)"]
    assert math.isclose(sum(s["epsilon"] for s in ex.statistics), 0.8)
    res = conn.execute("SELECT COUNT(*), SUM(age), AVG(age), AVG(income) FROM pums",
                       epsilon=0.8)
    assert res.cost == (0.8, 0.0)
    assert conn.budget.spent == (0.8, 0.0)


def test_public_domain_releases_every_key_even_empty(connect):
    conn = connect()
    # a filter on a column that is no key: every race, each (truly) empty
    res = conn.execute("SELECT race, COUNT(*) AS n FROM pums WHERE income > 1e9 GROUP BY race",
                       epsilon=1.0)
    assert [r[0] for r in res.rows] == [1, 2, 3, 4, 5, 6]
    res = conn.execute("SELECT sex, married, COUNT(*) FROM pums GROUP BY sex, married "
                       "ORDER BY sex, married", epsilon=1.0)
    assert [r[:2] for r in res.rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_partition_selection_needs_delta(connect):
    conn = connect(catalog=_data_keys_catalog())
    with pytest.raises(dpsql.PrivacyParameterError, match="needs delta > 0"):
        conn.execute("SELECT age, COUNT(*) FROM pums GROUP BY age", epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)


def test_rare_keys_are_not_released(tmp_path):
    # 50 users share key 'common'; each of 50 other users has a key of their own.
    path = tmp_path / "rare.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT i AS uid, CASE WHEN i < 50 THEN 'common' "
                "ELSE 'k' || i END AS k FROM range(100) r(i)")
    con.close()
    catalog = {"tables": {"t": {"user_key": "uid", "columns": {
        "uid": {"type": "int"}, "k": {"type": "string"}}}}}
    conn = dpsql.connect(path, catalog=catalog, budget=(100.0, 1e-2), ledger=":memory:")
    for _ in range(20):
        res = conn.execute("SELECT k, COUNT(*) FROM t GROUP BY k", epsilon=2.0, delta=1e-9)
        assert [r[0] for r in res.rows] in ([], ["common"])
    assert conn.budget.spent[1] == pytest.approx(20 * 1e-9)


def test_having_order_limit_offset_are_post_processing(connect):
    conn = connect()
    res = conn.execute(
        "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ HAVING n > 50 "
        "ORDER BY n DESC LIMIT 3 OFFSET 1", epsilon=20.0)
    counts = [r[1] for r in res.rows]
    assert counts == sorted(counts, reverse=True)
    assert len(res.rows) <= 3 and all(n > 50 for n in counts)
    res = conn.execute("SELECT educ, COUNT(*) FROM pums GROUP BY 1 ORDER BY 2, 1 LIMIT 2",
                       epsilon=1.0)
    assert len(res.rows) == 2


def test_expressions_and_aliases(connect, pums_db):
    conn = connect(budget=(1e4, 0.0), alpha=1e-9)
    res = conn.execute(
        "SELECT p.sex AS s, SUM(CASE WHEN p.income > 50000 THEN 1 ELSE 0 END) AS rich, "
        "SUM(income) / COUNT(*) AS mean_income, COUNT(*) * 2 AS twice "
        "FROM pums AS p WHERE age BETWEEN 20 AND 60 GROUP BY s ORDER BY s", epsilon=1e3)
    truth = pums_db.execute(
        "SELECT sex, SUM(CASE WHEN income > 50000 THEN 1 ELSE 0 END), SUM(income)/COUNT(*), "
        "COUNT(*) * 2 FROM pums WHERE age BETWEEN 20 AND 60 GROUP BY sex ORDER BY sex"
    ).fetchall()
    assert res.columns == ["s", "rich", "mean_income", "twice"]
    for row, acc, exact in zip(res.rows, res.accuracy, truth, strict=True):
        assert row[0] == exact[0] and acc[0] is None
        for value, width, want in zip(row[1:], acc[1:], exact[1:], strict=True):
            assert abs(value - want) <= width + 1e-9


def test_group_by_expression_with_partition_selection(connect, pums_db):
    conn = connect(catalog=_data_keys_catalog())
    res = conn.execute("SELECT age // 10 AS decade, COUNT(*) AS n FROM pums GROUP BY decade "
                       "ORDER BY decade", epsilon=10.0, delta=1e-6)
    truth = dict(pums_db.execute("SELECT age // 10, COUNT(*) FROM pums GROUP BY 1").fetchall())
    assert res.rows, "decades with about 100 people each must pass selection at epsilon=10"
    for decade, n in res.rows:
        assert decade in truth and abs(n - truth[decade]) < 10


@pytest.mark.parametrize(
    ("sql", "error", "message"),
    [
        ("SELECT * FROM pums", dpsql.UnsupportedQueryError, "SELECT *"),
        ("SELECT age FROM pums", dpsql.UnsupportedQueryError, "must appear in GROUP BY"),
        ("SELECT age, COUNT(*) FROM pums", dpsql.UnsupportedQueryError, "GROUP BY"),
        ("SELECT COUNT(*) FROM nosuch", dpsql.UnknownTableError, "unknown table 'nosuch'"),
        ("SELECT SUM(nosuch) FROM pums", dpsql.UnknownColumnError, "unknown column 'nosuch'"),
        ("SELECT SUM(pid) FROM pums", dpsql.UnboundedExpressionError,
         "column 'pid' has no lower/upper bounds"),
        ("SELECT SUM(income / age) FROM pums", dpsql.UnboundedExpressionError, "include 0"),
        ("SELECT COUNT(DISTINCT age, sex) FROM pums", dpsql.UnsupportedQueryError,
         "takes one expression"),
        ("SELECT MAX(pid) FROM pums", dpsql.UnboundedExpressionError, "no lower/upper"),
        ("SELECT MEDIAN(age, 2) FROM pums", dpsql.ParseError, "arguments"),
        ("SELECT COUNT(*) FROM pums a JOIN pums b ON a.age = b.age",
         dpsql.UnsupportedQueryError, "without matching their users"),
        ("SELECT COUNT(*) FROM pums a, pums b", dpsql.UnsupportedQueryError, "cross joins"),
        ("SELECT COUNT(*) FROM pums WHERE COUNT(*) > 1", dpsql.UnsupportedQueryError, "WHERE"),
        ("SELECT COUNT(*) FROM pums; DROP TABLE pums", dpsql.UnsupportedQueryError,
         "several statements"),
        ("DELETE FROM pums", dpsql.UnsupportedQueryError, "DELETE"),
        ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", dpsql.UnsupportedQueryError,
         "table function"),
        ("SELEC COUNT(*) FROM pums", dpsql.ParseError, "line 1"),
        ("SELECT COUNT(*) FROM pums LIMIT n", dpsql.UnsupportedQueryError, "LIMIT"),
        ("SELECT SUM(DISTINCT age) FROM pums", dpsql.UnsupportedQueryError, "DISTINCT"),
    ],
)
def test_refusals_name_the_problem_and_charge_nothing(connect, sql, error, message):
    conn = connect(budget=(1.0, 1e-6))
    with pytest.raises(error) as info:
        conn.execute(sql, epsilon=0.5, delta=1e-7)
    assert message in str(info.value)
    assert isinstance(info.value, dpsql.DpsqlError)
    assert conn.budget.spent == (0.0, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 0}, "epsilon must be a positive"),
        ({"epsilon": -1.0}, "epsilon must be a positive"),
        ({"epsilon": float("nan")}, "epsilon must be a positive"),
        ({"epsilon": float("inf")}, "epsilon must be a positive"),
        ({"epsilon": "1"}, "epsilon must be a number"),
        ({"epsilon": 1.0, "delta": 1.0}, "delta must be in [0, 1)"),
        ({"epsilon": 1.0, "delta": -0.1}, "delta must be in [0, 1)"),
        ({"epsilon": 1.0, "max_rows": 0}, "max_rows must be a positive integer"),
        ({"epsilon": 1.0, "max_groups": 1.5}, "max_groups must be a positive integer"),
    ],
)
def test_bad_privacy_parameters(connect, kwargs, message):
    conn = connect(budget=(1.0, 1e-6))
    with pytest.raises(dpsql.PrivacyParameterError) as info:
        conn.execute("SELECT COUNT(*) FROM pums", **kwargs)
    assert message in str(info.value)
    assert conn.budget.spent == (0.0, 0.0)


def test_budget_overrun_is_refused_before_reading(connect):
    conn = connect(budget=(1.0, 1e-6), catalog=_data_keys_catalog())
    conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.75)
    with pytest.raises(dpsql.BudgetExhaustedError, match="has only epsilon=0.25"):
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.5)
    assert conn.budget.spent == (0.75, 0.0)
    with pytest.raises(dpsql.BudgetExhaustedError):
        conn.execute("SELECT age, COUNT(*) FROM pums GROUP BY age", epsilon=0.1, delta=1e-5)
    conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.25)
    assert conn.budget.remaining == (0.0, 1e-6)


def test_connection_errors(pums_file, tmp_path):
    no_budget = dataclasses.replace(dpsql.load_catalog(catalog_path("pums")), budget=None)
    with pytest.raises(dpsql.PrivacyParameterError, match="no privacy budget"):
        dpsql.connect(pums_file, catalog=no_budget, ledger=":memory:")
    with pytest.raises(dpsql.BackendError, match="does not exist"):
        dpsql.connect(tmp_path / "missing.duckdb", catalog=catalog_path("pums"), budget=(1, 0),
                      ledger=":memory:")
    with pytest.raises(dpsql.CatalogError):
        dpsql.connect(pums_file, catalog={"tables": {}}, budget=(1, 0), ledger=":memory:")
    conn = dpsql.connect(pums_file, catalog=catalog_path("pums"), budget=(1, 0),
                         ledger=":memory:")
    conn.close()
    with pytest.raises(dpsql.DpsqlError, match="closed"):
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.1)


def test_catalog_type_mismatch_is_refused_before_charging(pums_file):
    catalog = {"tables": {"pums": {"user_key": "pid", "columns": {
        "pid": "int", "income": {"type": "int", "lower": 0, "upper": 10}}}}}
    conn = dpsql.connect(pums_file, catalog=catalog, budget=(1, 0), ledger=":memory:")
    with pytest.raises(dpsql.CatalogError, match="catalog says int but the database"):
        conn.execute("SELECT SUM(income) FROM pums", epsilon=0.5)
    assert conn.budget.spent == (0.0, 0.0)


def test_database_is_opened_read_only_without_external_access(pums_file):
    conn = dpsql.connect(pums_file, catalog=catalog_path("pums"), budget=(1, 0),
                         ledger=":memory:")
    con = duckdb_of(conn)
    with pytest.raises(duckdb.Error):
        con.execute("CREATE TABLE x (a INT)")
    with pytest.raises(duckdb.Error):
        con.execute("SELECT * FROM read_csv('/etc/hostname')")
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")


def test_row_privacy_and_nullable_columns(tmp_path):
    path = tmp_path / "rows.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT i % 3 AS g, CASE WHEN i % 4 = 0 THEN NULL "
                "ELSE i % 10 END AS x FROM range(3000) r(i)")
    truth = dict((g, (n, nx, s, a)) for g, n, nx, s, a in con.execute(
        "SELECT g, COUNT(*), COUNT(x), SUM(x), AVG(x) FROM t GROUP BY g").fetchall())
    con.close()
    catalog = {"tables": {"t": {"row_privacy": True, "columns": {
        "g": {"type": "int", "values": [0, 1, 2]},
        "x": {"type": "int", "lower": 0, "upper": 9, "nullable": True}}}}}
    conn = dpsql.connect(path, catalog=catalog, budget=(1e4, 0), alpha=1e-9, ledger=":memory:")
    ex = conn.explain("SELECT g, COUNT(*), COUNT(x), SUM(x), AVG(x) FROM t GROUP BY g",
                      epsilon=1.0)
    assert "__per_user" not in ex.sql and "__bounded" not in ex.sql
    assert [s["linf"] for s in ex.statistics] == [1, 1, 9, 5]
    assert "CASE WHEN x IS NULL THEN NULL" in ex.sql  # NULLs stay out of AVG's sum
    res = conn.execute("SELECT g, COUNT(*), COUNT(x), SUM(x), AVG(x) FROM t GROUP BY g",
                       epsilon=1e3)
    for row, acc in zip(res.rows, res.accuracy, strict=True):
        for value, width, want in zip(row[1:], acc[1:], truth[row[0]], strict=True):
            assert abs(value - float(want)) <= width + 1e-9


def test_variance_and_stddev(connect, pums_db):
    conn = connect(budget=(1e6, 0.0), alpha=1e-9)
    sql = ("SELECT sex, VARIANCE(age) AS v, VAR_POP(age) AS vp, STDDEV(age) AS sd, "
           "STDDEV_POP(income) AS sdi, STDDEV_SAMP(educ) AS sde FROM pums GROUP BY sex "
           "ORDER BY sex")
    ex = conn.explain(sql, epsilon=1.0)
    squares = [s for s in ex.statistics if s["statistic"] == "SUM((age - 50)^2)"]
    assert squares and squares[0]["linf"] == 50**2  # R · max(|L−m|, |U−m|)²
    res = conn.execute(sql, epsilon=1e5)
    truth = pums_db.execute(sql).fetchall()
    for row, acc, want in zip(res.rows, res.accuracy, truth, strict=True):
        for value, width, exact in zip(row[1:], acc[1:], want[1:], strict=True):
            assert abs(value - exact) <= width + 1e-9
    low = conn.execute(sql, epsilon=0.5)
    for row in low.rows:  # clamped to what values in [L, U] allow
        assert 0 <= row[2] <= 50**2 and 0 <= row[4] <= 250000


def test_subqueries_and_ctes_with_per_user_aggregation(connect, pums_db):
    conn = connect(budget=(1e7, 0.0), alpha=1e-9)
    sql = ("WITH t AS (SELECT pid, COUNT(*) AS n, SUM(income) AS inc FROM pums_dup "
           "GROUP BY pid) SELECT n, COUNT(*) AS people, AVG(inc) AS avg_inc FROM t "
           "GROUP BY n ORDER BY n")
    res = conn.execute(sql, epsilon=1e6, max_rows=4)
    truth = pums_db.execute(sql).fetchall()
    got = {r[0]: (r[1:], a[1:]) for r, a in zip(res.rows, res.accuracy, strict=True)}
    assert sorted(got) == [0, 1, 2, 3]  # n is capped at pums_dup's max_rows (3): domain 0..3
    for n, people, avg_inc in truth:
        if n < 3:
            (p, a), (hp, ha) = got[n]
            assert abs(p - people) <= hp and abs(a - avg_inc) <= ha
    for sql, message in {
        "SELECT AVG(n) FROM (SELECT age, COUNT(*) AS n FROM pums GROUP BY age) t":
            "must GROUP BY the user key",
        "SELECT AVG(n) FROM (SELECT pid, COUNT(*) AS n FROM pums GROUP BY pid "
        "ORDER BY n LIMIT 5) t": "ORDER inside a derived table",
        "SELECT AVG(n) FROM (SELECT COUNT(*) AS n FROM pums GROUP BY pid) t":
            "must select the user key",
        "SELECT COUNT(*) FROM pums WHERE age > (SELECT AVG(age) FROM pums)":
            "scalar subqueries",
    }.items():
        with pytest.raises(dpsql.DpsqlError) as info:
            conn.execute(sql, epsilon=1.0)
        assert message in str(info.value), sql


def test_avg_is_not_biased_by_capping_rows(connect, pums_db):
    """A user with more rows than max_rows adds their mean times max_rows to AVG's sum,
    the same rows its capped count describes (not a clamp of all their rows' sum)."""
    conn = connect(budget=(1e7, 0.0))
    sql = "SELECT sex, AVG(income) AS a FROM pums_dup GROUP BY sex ORDER BY sex"
    res = conn.execute(sql, epsilon=1e6)  # max_rows 3 binds for people with 4 rows
    for (sex, value), (_, truth) in zip(res.rows, pums_db.execute(sql).fetchall(),
                                        strict=True):
        assert abs(value - truth) / truth < 0.03, (sex, value, truth)


def test_an_invalid_outer_query_is_refused_free_every_time(connect):
    """The pre-charge check of the outer query caches its verdict; the refusal stays."""
    conn = connect()
    sql = "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex ORDER BY sex || 1 + 'x'"
    for _ in range(3):
        with pytest.raises(dpsql.UnsupportedQueryError, match="outer part of the query"):
            conn.execute(sql, epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
    ok = "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex ORDER BY sex"
    assert [r[0] for r in conn.execute(ok, epsilon=1.0).rows] == [0, 1]
    assert [r[0] for r in conn.execute(ok, epsilon=1.0).rows] == [0, 1]
