"""SQL that clients and other DP engines write, answered as SQL means it (issue 15, item 5).

Name resolution in ORDER BY and HAVING is checked against DuckDB's own answers on the
exact PUMS data: at ε = 10⁹ the noisy counts are the exact ones, and group keys are
released exactly, so the order of keys and the set of keys a HAVING keeps must be
DuckDB's.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from dpsql.datasets import pums_catalog
from dpsql.errors import AnalysisError, UnknownColumnError, UnsupportedQueryError
from dpsql.postprocess import _pow_interval

HUGE = 1e9  # noise far below one unit: counts come back exact
BUDGET = (1e12, 0.5)


#: Keys come from the data (as DuckDB's own answers do): no public domain from bounds,
#: which would add the empty decades.
DATA_KEYS = dataclasses.replace(
    pums_catalog(), budget=None,
    limits=dataclasses.replace(pums_catalog().limits, max_int_domain=0))


def answer(conn, sql, **kw):
    return conn.execute(sql, epsilon=HUGE, delta=1e-3, **kw)


def keys(rows, n):
    return [tuple(r[:n]) for r in rows]


# -- ORDER BY / HAVING: output names as DuckDB resolves them -----------------------------


@pytest.mark.parametrize("sql,nkeys", [
    # a bare ORDER BY name is the output of that name, not the input column it shadows
    ("SELECT sex AS gender, educ AS sex, COUNT(*) AS n FROM pums GROUP BY sex, educ "
     "ORDER BY sex DESC, gender LIMIT 5", 2),
    ("SELECT sex AS gender, educ AS sex, COUNT(*) AS n FROM pums GROUP BY sex, educ "
     "ORDER BY sex, gender DESC", 2),
    # nested in an expression the input column wins (DuckDB binds it as the group key)
    ("SELECT sex AS gender, educ AS sex, COUNT(*) AS n FROM pums GROUP BY sex, educ "
     "ORDER BY -sex, educ DESC LIMIT 7", 2),
    # an output named like an ungrouped input column: ORDER BY it is the output
    ("SELECT race, COUNT(*) AS age FROM pums GROUP BY race ORDER BY age DESC, race", 1),
    # qualified: always the input column
    ("SELECT sex AS gender, educ AS sex, COUNT(*) AS n FROM pums GROUP BY sex, educ "
     "ORDER BY pums.sex DESC, educ LIMIT 4", 2),
    # an expression equal to a group key is that key, whatever the names in it
    ("SELECT age // 10 AS decade, -SUM(age) AS age, COUNT(*) AS n FROM pums "
     "GROUP BY age // 10 ORDER BY age // 10 DESC", 1),
    # a plain alias in an expression
    ("SELECT race, COUNT(*) AS n FROM pums GROUP BY race ORDER BY n + race", 1),
])
def test_order_by_names_as_duckdb(connect, pums_db, sql, nkeys):
    got = answer(connect(budget=BUDGET, catalog=DATA_KEYS), sql)
    want = pums_db.execute(sql).fetchall()
    assert keys(got.rows, nkeys) == keys(want, nkeys)
    assert [r[-1] for r in got.rows] == [r[-1] for r in want]


@pytest.mark.parametrize("sql", [
    # HAVING: an input column that is a group key stays the input column...
    "SELECT sex AS gender, educ AS sex, COUNT(*) AS n FROM pums GROUP BY sex, educ "
    "HAVING sex = 1",
    "SELECT race AS r, COUNT(*) AS race FROM pums GROUP BY race HAVING race > 3",
    # ...any other name of an output is the output
    "SELECT race, SUM(income) AS income FROM pums GROUP BY race HAVING income > 3000000",
    "SELECT race, COUNT(*) AS n FROM pums GROUP BY race HAVING n > 50",
    "SELECT educ, COUNT(*) AS age FROM pums GROUP BY educ HAVING age + educ > 100",
    # an expression equal to a group key is that key, before any name is looked up
    # (DuckDB reads the name first: SUM(age) // 10 > 3, true for every decade)
    "SELECT age // 10 AS decade, SUM(age) AS age FROM pums GROUP BY age // 10 "
    "HAVING age // 10 > 3",
    "SELECT age // 10 AS decade, -SUM(age) AS age FROM pums GROUP BY age // 10 "
    "HAVING age // 10 > -500",
])
def test_having_names_as_duckdb(connect, pums_db, sql):
    got = answer(connect(budget=BUDGET, catalog=DATA_KEYS), sql)
    want = pums_db.execute(sql).fetchall()
    assert sorted(r[0] for r in got.rows) == sorted(r[0] for r in want)


def test_having_income_alias_is_answered(connect, pums_db):
    sql = ("SELECT sex, SUM(income) AS income FROM pums GROUP BY sex "
           "HAVING income > 15000000 ORDER BY income")
    got = answer(connect(budget=BUDGET), sql)
    want = pums_db.execute(sql).fetchall()
    assert [r[0] for r in got.rows] == [r[0] for r in want] == [0]
    assert got.rows[0][1] == pytest.approx(float(want[0][1]), rel=1e-6)


@pytest.mark.parametrize("sql,message", [
    # DuckDB: "column must appear in the GROUP BY clause" (the input column wins there)
    ("SELECT sex, SUM(income) AS income FROM pums GROUP BY sex ORDER BY income + 1",
     "must appear in GROUP BY"),
    ("SELECT sex AS x, race AS x, COUNT(*) FROM pums GROUP BY sex, race ORDER BY x",
     "ambiguous"),
    ("SELECT sex AS x, COUNT(*) AS x FROM pums GROUP BY sex HAVING x > 1", "ambiguous"),
])
def test_order_having_refusals(connect, sql, message):
    conn = connect(budget=BUDGET)
    with pytest.raises(UnsupportedQueryError, match=message):
        answer(conn, sql)
    assert conn.budget.spent == (0.0, 0.0)


# -- comparisons whose types cannot match -------------------------------------------------


@pytest.mark.parametrize("sql,column,types", [
    ("SELECT sex, COUNT(*) FROM pums WHERE sex = 'M' GROUP BY sex", "sex", ("int", "'M'")),
    ("SELECT COUNT(*) FROM pums WHERE income > 'high'", "income", ("float", "'high'")),
    ("SELECT COUNT(*) FROM pums WHERE race IN (1, 'two')", "race", ("int", "'two'")),
    ("SELECT COUNT(*) FROM pums WHERE age BETWEEN 'a' AND 30", "age", ("int", "'a'")),
    ("SELECT SUM(CASE WHEN 'x' <> educ THEN 1 ELSE 0 END) FROM pums", "educ", ("int", "'x'")),
    ("SELECT COUNT(*) FROM pums a JOIN pums_dup b ON a.pid = b.pid AND b.sex = 'F'", "sex",
     ("int", "'F'")),
    ("SELECT sex, COUNT(*) FROM pums GROUP BY sex HAVING sex = 'M'", "sex", ("int", "'M'")),
])
def test_mismatched_comparison_refused_free(connect, sql, column, types):
    conn = connect(budget=BUDGET)
    with pytest.raises(AnalysisError) as err:
        answer(conn, sql)
    message = str(err.value)
    assert f"column {column!r}" in message
    assert all(t in message for t in types)
    assert conn.budget.spent == (0.0, 0.0)


def test_matching_text_comparison_answered(connect, pums_db):
    # '30' is the number 30 on every backend: not a mistake
    got = answer(connect(budget=BUDGET), "SELECT COUNT(*) FROM pums WHERE age = '30'")
    assert got.rows[0][0] == pums_db.execute("SELECT COUNT(*) FROM pums WHERE age = 30"
                                               ).fetchone()[0]


# -- the spellings of other engines, end to end -----------------------------------------


def test_smartnoise_spellings_answered(connect, pums_db):
    conn = connect(budget=BUDGET)
    got = answer(conn, "SELECT TOP 2 educ, COUNT(*) AS n, VAR(age) AS v, STD(age), "
                       "POWER(AVG(age), 2) AS p FROM PUMS.PUMS GROUP BY educ ORDER BY n DESC")
    want = pums_db.execute(
        "SELECT educ, COUNT(*) AS n, VAR_SAMP(age), STDDEV_POP(age), POWER(AVG(age), 2) "
        "FROM pums GROUP BY educ ORDER BY n DESC LIMIT 2").fetchall()
    assert got.columns == ["educ", "n", "v", "STD(age)", "p"]
    assert keys(got.rows, 2) == keys(want, 2)
    for g, w in zip(got.rows, want, strict=True):
        assert g[2:] == pytest.approx(w[2:], rel=1e-4)


def test_filter_group_by_all_using_answered(connect, pums_db):
    sql = ("SELECT a.sex, COUNT(*) FILTER (WHERE a.age > 60) AS old, "
           "SUM(a.income) FILTER (WHERE a.educ >= 13) AS rich FROM pums AS a "
           "JOIN pums_dup AS b USING (pid) GROUP BY ALL ORDER BY 1")
    got = answer(connect(budget=BUDGET), sql, max_rows=4)
    want = pums_db.execute(sql).fetchall()
    assert keys(got.rows, 1) == keys(want, 1)
    assert [r[1] for r in got.rows] == [r[1] for r in want]


@pytest.mark.parametrize("sql,error,message", [
    ("SELECT TOP 5 PERCENT sex, COUNT(*) FROM pums GROUP BY sex", UnsupportedQueryError,
     "PERCENT"),
    ("SELECT TOP 5 sex, COUNT(*) FROM pums GROUP BY sex LIMIT 2", UnsupportedQueryError,
     "TOP cannot be combined"),
    ("SELECT COUNT(*) FROM census.pums", UnsupportedQueryError, "data set 'pums'"),
    ("SELECT COUNT(*) FROM pums.pums.pums", UnsupportedQueryError, "three parts"),
    ("SELECT COUNT(*) FROM pums JOIN pums_dup USING (nothing)", UnknownColumnError,
     "no table before the join"),
    ("SELECT COUNT(*) FROM pums a JOIN pums_dup b ON a.pid = b.pid JOIN pums c USING (age)",
     UnknownColumnError, "a and b both have"),
    ("SELECT COUNT(*) FROM pums RIGHT JOIN pums_dup USING (pid)", UnsupportedQueryError,
     "RIGHT JOIN"),
    ("SELECT COUNT(*) FROM pums WHERE POWER(age, 2) > 100", UnsupportedQueryError,
     "POWER"),
    ("SELECT SUM(POWER(age, 2)) FROM pums", UnsupportedQueryError, "POWER"),
    ("SELECT POWER(age, 2) AS a2, COUNT(*) FROM pums GROUP BY a2", UnsupportedQueryError,
     "not in a group key"),
    ("SELECT COUNT(*) FILTER (WHERE COUNT(*) > 1) FROM pums", UnsupportedQueryError,
     "FILTER"),
])
def test_spellings_refused_free(connect, sql, error, message):
    conn = connect(budget=BUDGET)
    with pytest.raises(error, match=message):
        answer(conn, sql)
    assert conn.budget.spent == (0.0, 0.0)


def test_power_over_aggregates_error_bar_covers_truth(connect, pums_db):
    # alpha = 1e-9: a miss would be a wrong interval, not bad luck
    got = connect(budget=BUDGET).execute(
        "SELECT POWER(AVG(age), 2) AS p, SQRT(VAR_POP(income)) AS s, "
        "POWER(COUNT(*), -1) AS inv FROM pums", epsilon=1.0, alpha=1e-9)
    true = pums_db.execute("SELECT POWER(AVG(age), 2), STDDEV_POP(income), 1 / COUNT(*) "
                           "FROM pums").fetchone()
    for value, half, exact in zip(got.rows[0], got.accuracy[0], true, strict=True):
        assert half is not None and math.isfinite(half)
        assert abs(value - exact) <= half


@pytest.mark.parametrize("base,power,want", [
    ((2.0, 3.0), 2.0, (4.0, 9.0)),
    ((-3.0, 2.0), 2.0, (0.0, 9.0)),
    ((-3.0, -2.0), 3.0, (-27.0, -8.0)),
    ((1.0, 4.0), 0.5, (1.0, 2.0)),
    ((2.0, 4.0), -1.0, (0.25, 0.5)),
    ((-1.0, 4.0), -1.0, (-math.inf, math.inf)),
    ((-1.0, 4.0), 0.5, (-math.inf, math.inf)),
    ((1e200, 1e300), 2.0, (-math.inf, math.inf)),
])
def test_pow_interval(base, power, want):
    got = _pow_interval(base, (power, power))
    assert got == pytest.approx(want)
    for x in (base[0], (base[0] + base[1]) / 2, base[1]):
        try:
            value = x ** power
        except (OverflowError, ZeroDivisionError):
            continue
        if not isinstance(value, complex) and math.isfinite(value):
            assert got[0] - 1e-9 <= value <= got[1] + 1e-9
