"""Row-level derived tables and CTEs (dpsql.analyze.derived.inline_row_derived).

A derived table that only filters and projects rows is written out into the query that
reads it. The promise is *equivalent SQL*: the same exact statistics (noise off) as the
query written against the base table by hand, with the same sensitivities and keys, and
no fact borrowed by name. Each soundness test names the rule it guards; breaking that
rule in derived.py (e.g. letting ``age * 1000 AS age`` keep age's bounds, moving a
LEFT-joined derived table's WHERE into the outer WHERE, or making the inner table's
hidden columns visible) makes it fail.
"""

from __future__ import annotations

import math

import pytest

import dpsql
from dpsql.analyze import analyze
from dpsql.datasets import pums_catalog
from dpsql.parse import parse
from dpsql.validate import validate
from tests.support import checked, prepare


def exact(conn, sql, epsilon=1.0, delta=1e-6, **bounds):
    """(plan, exact per-group statistics) of ``sql``: what dpsql would noise.

    The engine's own steps up to the backend (prepare, check, execute, read keys), with
    no noise and nothing charged: a test-only use of the connection's internals.
    """
    plan, expression, backend = prepare(conn, sql, epsilon, delta, bounds.get("max_groups"),
                                              bounds.get("max_rows"))
    expression, read = checked(conn, plan, expression, backend)
    if not (plan.stats or plan.selection is not None):
        return plan, []
    columns, rows = backend.execute(expression)
    rows = read(rows)
    named = sorted((tuple(zip(columns, row, strict=True)) for row in rows), key=repr)
    return plan, named


def facts(plan):
    """What the privacy analysis decided: sensitivities, keys, bounds, one row per user."""
    return ([(s.kind, s.linf, s.interval and (s.interval.lower, s.interval.upper))
             for s in plan.stats],
            [k.domain for k in plan.keys], plan.max_groups, plan.max_rows,
            plan.one_row_per_user, plan.bound_groups, plan.selection is not None)


# -- answered, and equal to the query written against the base table ---------------------

EQUIVALENT = [
    # SQLAlchemy ORM: session.query(Person).count()
    ("SELECT count(*) AS count_1 FROM (SELECT pums.pid AS pums_pid, pums.age AS pums_age "
     "FROM pums) AS anon_1",
     "SELECT count(*) AS count_1 FROM pums"),
    # ... and a filtered ORM query
    ("SELECT count(*) AS count_1 FROM (SELECT pums.pid AS pums_pid, pums.age AS pums_age "
     "FROM pums WHERE pums.age > 30) AS anon_1",
     "SELECT count(*) AS count_1 FROM pums WHERE age > 30"),
    ("SELECT count(*) FROM (SELECT p.pid, p.age FROM pums AS p) AS anon_1",
     "SELECT count(*) FROM pums"),
    ("WITH adults AS (SELECT sex, age FROM pums WHERE age >= 18) "
     "SELECT sex, COUNT(*) FROM adults GROUP BY sex",
     "SELECT sex, COUNT(*) FROM pums WHERE age >= 18 GROUP BY sex"),
    # SELECT * and t.* name the table's columns
    ("SELECT sex, AVG(income) FROM (SELECT * FROM pums WHERE age < 40) d GROUP BY sex",
     "SELECT sex, AVG(income) FROM pums WHERE age < 40 GROUP BY sex"),
    ("SELECT SUM(d.income) FROM (SELECT p.* FROM pums p) d WHERE d.race = 2",
     "SELECT SUM(income) FROM pums WHERE race = 2"),
    # renamed columns and expressions, used in WHERE, GROUP BY, aggregates
    ("SELECT g, SUM(money) FROM (SELECT sex AS g, income / 2 AS money, age AS years "
     "FROM pums) t WHERE years BETWEEN 20 AND 60 GROUP BY g",
     "SELECT sex, SUM(income / 2) FROM pums WHERE age BETWEEN 20 AND 60 GROUP BY sex"),
    # nested, the inner WHERE and the outer one both kept
    ("SELECT COUNT(*) FROM (SELECT a FROM (SELECT age AS a, sex FROM pums WHERE sex = 1) x "
     "WHERE a > 40) y WHERE a < 70",
     "SELECT COUNT(*) FROM pums WHERE sex = 1 AND age > 40 AND age < 70"),
    # a CTE named like the catalog table stands for its own definition
    ("WITH pums AS (SELECT pid, age * 10 AS age FROM pums) SELECT SUM(age) FROM pums",
     "SELECT SUM(age * 10) FROM pums"),
    # a CTE referenced twice: two sources joined on the user key
    ("WITH a AS (SELECT pid, age FROM pums_dup) "
     "SELECT COUNT(*) FROM a JOIN a AS b ON a.pid = b.pid WHERE b.age > 50",
     "SELECT COUNT(*) FROM pums_dup a JOIN pums_dup b ON a.pid = b.pid WHERE b.age > 50"),
    # joined with a catalog table on the user key; the inner alias does not leak out
    ("SELECT COUNT(*) FROM pums AS p JOIN (SELECT pid, age AS a FROM pums_dup AS p "
     "WHERE p.age > 50) d ON p.pid = d.pid WHERE p.age < 90",
     "SELECT COUNT(*) FROM pums AS p JOIN pums_dup AS d ON p.pid = d.pid "
     "WHERE d.age > 50 AND p.age < 90"),
    # LEFT-joined: its WHERE goes into the ON, not the WHERE
    ("SELECT COUNT(*), COUNT(b.pid) FROM pums p LEFT JOIN (SELECT pid FROM pums_dup "
     "WHERE age > 50) b ON p.pid = b.pid",
     "SELECT COUNT(*), COUNT(b.pid) FROM pums p LEFT JOIN pums_dup b ON p.pid = b.pid "
     "AND b.age > 50"),
    # the derived table is the preserved side of a LEFT JOIN: its WHERE filters the rows
    ("SELECT COUNT(*) FROM (SELECT pid FROM pums WHERE age > 50) p "
     "LEFT JOIN pums_dup b ON p.pid = b.pid",
     "SELECT COUNT(*) FROM pums p LEFT JOIN pums_dup b ON p.pid = b.pid WHERE p.age > 50"),
    # comma join
    ("SELECT COUNT(*) FROM (SELECT pid FROM pums WHERE sex = 0) a, pums_dup b "
     "WHERE a.pid = b.pid",
     "SELECT COUNT(*) FROM pums a JOIN pums_dup b ON a.pid = b.pid WHERE a.sex = 0"),
    # ORDER BY a name that is both the output and the derived column, read alike
    ("SELECT sex, COUNT(*) AS n FROM (SELECT sex FROM pums) d GROUP BY sex ORDER BY sex",
     "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex ORDER BY sex"),
    # joins inside, first in FROM (SQLAlchemy: session.query(A).join(B).count())
    ("SELECT count(*) FROM (SELECT a.pid, b.age FROM pums a JOIN pums_dup b "
     "ON a.pid = b.pid WHERE a.sex = 1) AS anon_1",
     "SELECT count(*) FROM pums a JOIN pums_dup b ON a.pid = b.pid WHERE a.sex = 1"),
    ("SELECT AVG(d.age) FROM (SELECT b.* FROM pums a JOIN pums_dup b ON a.pid = b.pid) d "
     "JOIN pums x ON x.pid = d.pid WHERE x.sex = 0",
     "SELECT AVG(b.age) FROM pums a JOIN pums_dup b ON a.pid = b.pid JOIN pums x "
     "ON x.pid = b.pid WHERE x.sex = 0"),
    ("SELECT COUNT(*) FROM (SELECT a.pid FROM pums a, pums_dup b WHERE a.pid = b.pid "
     "AND b.age > 40) d",
     "SELECT COUNT(*) FROM pums a JOIN pums_dup b ON a.pid = b.pid WHERE b.age > 40"),
    ("SELECT SUM(x) FROM (SELECT COALESCE(b.age, 0) AS x FROM pums a LEFT JOIN pums_dup b "
     "ON a.pid = b.pid AND b.age > 50) d",
     "SELECT SUM(COALESCE(b.age, 0)) FROM pums a LEFT JOIN pums_dup b ON a.pid = b.pid "
     "AND b.age > 50"),
    # per-user derived tables keep working, over and under row-level ones
    ("SELECT AVG(n) FROM (SELECT pid, COUNT(*) AS n FROM (SELECT pid FROM pums_dup "
     "WHERE age > 30) x GROUP BY pid) y",
     "SELECT AVG(n) FROM (SELECT pid, COUNT(*) AS n FROM pums_dup WHERE age > 30 "
     "GROUP BY pid) y"),
    ("SELECT AVG(n) FROM (SELECT n FROM (SELECT pid, COUNT(*) AS n FROM pums_dup "
     "GROUP BY pid) x WHERE n > 1) y",
     "SELECT AVG(n) FROM (SELECT pid, COUNT(*) AS n FROM pums_dup GROUP BY pid) y "
     "WHERE n > 1"),
]


@pytest.mark.parametrize(("derived", "base"), EQUIVALENT)
def test_a_row_level_derived_table_is_the_same_query(conn, derived, base):
    plan_d, rows_d = exact(conn, derived)
    plan_b, rows_b = exact(conn, base)
    assert facts(plan_d) == facts(plan_b)
    assert rows_d == rows_b
    assert rows_d  # something was computed


def test_answered_through_the_engine_with_the_names_written(conn):
    res = conn.execute("SELECT SUM(a), g FROM (SELECT age AS a, sex AS g FROM pums) d "
                       "GROUP BY g", epsilon=1.0)
    assert res.columns == ["SUM(a)", "g"]
    assert [r[1] for r in res.rows] == [0, 1]
    res = conn.execute("SELECT count(*) AS count_1 FROM (SELECT pums.pid AS pums_pid "
                       "FROM pums) AS anon_1", epsilon=1.0)
    assert res.columns == ["count_1"] and res.cost == (1.0, 0.0)


def test_exact_answers_match_duckdb(conn, pums_db):
    """Noise off, the derived query's statistics are DuckDB's own answers on the data."""
    _, rows = exact(conn, "WITH adults AS (SELECT sex, age FROM pums WHERE age >= 18) "
                          "SELECT sex, COUNT(*) FROM adults GROUP BY sex")
    want = pums_db.execute("SELECT sex, COUNT(*) FROM pums WHERE age >= 18 GROUP BY sex "
                           "ORDER BY sex").fetchall()
    assert [(r[0][1], r[1][1]) for r in rows] == want
    plan, rows = exact(conn, "SELECT COUNT(*) FROM pums p LEFT JOIN (SELECT pid FROM "
                             "pums_dup WHERE age > 50) b ON p.pid = b.pid")
    # each user's rows are capped at max_rows (the per-user bound), as dpsql does
    want = pums_db.execute(
        "SELECT SUM(LEAST(n, ?)) FROM (SELECT p.pid, COUNT(*) AS n FROM pums p LEFT JOIN "
        "(SELECT pid FROM pums_dup WHERE age > 50) b ON p.pid = b.pid GROUP BY p.pid)",
        [plan.max_rows]).fetchone()[0]
    assert rows[0][0][1] == want
    assert rows[0][0][1] > 1000  # every pums row is kept: the WHERE is in the ON


# -- soundness: expressions go through the normal analysis ----------------------------------

def _plan(sql, delta=1e-6):
    return analyze(validate(parse(sql)), pums_catalog(), 1.0, delta, seed=0)


def test_an_expression_does_not_keep_the_columns_bounds(conn, pums_db):
    """``age * 1000 AS age``: bounds [0, 100000], not age's [0, 100]."""
    plan, rows = exact(conn, "SELECT SUM(age) FROM (SELECT pid, age * 1000 AS age "
                             "FROM pums) d")
    (stat,) = plan.stats
    assert (stat.interval.lower, stat.interval.upper) == (0, 100_000)
    assert stat.linf == 100_000
    # clamped to age's bounds instead, the exact sum would be 1000 times too small
    want = pums_db.execute("SELECT SUM(age * 1000) FROM pums").fetchone()[0]
    assert rows[0][0][1] == want


def test_an_expression_named_like_the_user_key_is_not_the_user_key():
    for body in ("pid + 0", "pid % 2", "CASE WHEN age > 50 THEN pid ELSE 0 END"):
        # a join on it proves nothing about users
        with pytest.raises(dpsql.UnsupportedQueryError, match="without matching their users"):
            _plan(f"SELECT COUNT(*) FROM (SELECT {body} AS pid FROM pums_dup) a "
                  "JOIN pums b ON a.pid = b.pid")
        # a distinct count of it is a distinct count of values, not of users
        plan = _plan(f"SELECT COUNT(DISTINCT pid) FROM (SELECT {body} AS pid FROM pums) d")
        assert [s.kind for s in plan.stats] == ["distinct"]
    # the column itself, renamed, is the user key
    plan = _plan("SELECT COUNT(DISTINCT person) FROM (SELECT pid AS person FROM pums) d")
    assert [s.kind for s in plan.stats] == ["users"]
    _plan("SELECT COUNT(*) FROM (SELECT pid AS p FROM pums_dup) a JOIN pums b ON a.p = b.pid")


def test_an_expression_does_not_keep_the_columns_domain():
    """``sex + 5 AS sex``: keys 5 and 6 (the image of sex's domain), never sex's 0 and 1."""
    plan = _plan("SELECT sex, COUNT(*) FROM (SELECT sex + 5 AS sex FROM pums) d GROUP BY sex")
    assert [k.domain for k in plan.keys] == [(5, 6)]
    plan = _plan("SELECT sex, COUNT(*) FROM (SELECT age AS sex FROM pums) d GROUP BY sex")
    assert plan.keys[0].domain != (0, 1)
    assert plan.keys[0].expr.name == "age"


def test_hidden_columns_of_the_inner_table_stay_hidden():
    for sql in ("SELECT COUNT(*) FROM (SELECT sex FROM pums) d WHERE age > 3",
                "SELECT SUM(d.income) FROM (SELECT sex FROM pums) d",
                "SELECT COUNT(*) FROM (SELECT sex FROM pums) d GROUP BY race"):
        with pytest.raises(dpsql.UnknownColumnError, match="income|age|race"):
            _plan(sql)
    # nor does the inner alias: p is not in the outer FROM
    with pytest.raises(dpsql.UnknownTableError):
        _plan("SELECT SUM(p.age) FROM (SELECT p.age FROM pums p) d")


def test_a_name_two_sources_could_own_is_refused():
    # pums_dup's age and the derived table's hidden pums.age: SQL binds to pums_dup,
    # written out it would be ambiguous, so it is qualified
    plan = _plan("SELECT SUM(age) FROM (SELECT pid FROM pums) a JOIN pums_dup b "
                 "ON a.pid = b.pid")
    assert plan.stats[0].arg.table == "b"
    with pytest.raises(dpsql.UnknownColumnError, match="ambiguous"):
        _plan("SELECT SUM(age) FROM (SELECT pid, age FROM pums) a JOIN pums_dup b "
              "ON a.pid = b.pid")
    with pytest.raises(dpsql.UnknownColumnError, match="ambiguous"):
        _plan("SELECT COUNT(*) FROM (SELECT sex AS s, age AS s FROM pums) d WHERE s > 1")


def test_order_by_an_output_name_that_is_also_a_derived_column_is_refused():
    with pytest.raises(dpsql.UnsupportedQueryError, match="both an output column"):
        _plan("SELECT sex AS age, COUNT(*) FROM (SELECT sex, age FROM pums) d "
              "GROUP BY sex ORDER BY age")


def test_joins_inside_are_checked_and_their_names_stay_inside():
    # the FROM analysis checks the inner join as if the analyst wrote it outside
    with pytest.raises(dpsql.UnsupportedQueryError, match="without matching their users"):
        _plan("SELECT COUNT(*) FROM (SELECT a.pid FROM pums a JOIN pums_dup b "
              "ON a.age = b.age) d")
    # the new names of the inner tables cannot be written outside
    with pytest.raises(dpsql.UnknownTableError):
        _plan("SELECT AVG(d_b.age) FROM (SELECT b.* FROM pums a JOIN pums_dup b "
              "ON a.pid = b.pid) d")
    with pytest.raises(dpsql.UnsupportedQueryError, match="already uses"):
        _plan("SELECT COUNT(*) FROM (SELECT a.pid FROM pums a JOIN pums_dup b "
              "ON a.pid = b.pid) d JOIN pums d_a ON d_a.pid = d.pid")
    # joined in, (A JOIN B) is not A JOIN B: refused
    with pytest.raises(dpsql.UnsupportedQueryError, match="first in FROM"):
        _plan("SELECT COUNT(*) FROM pums x JOIN (SELECT b.pid FROM pums a JOIN pums_dup b "
              "ON a.pid = b.pid) d ON x.pid = d.pid")
    with pytest.raises(dpsql.UnknownColumnError, match="ambiguous"):
        _plan("SELECT AVG(age) FROM (SELECT * FROM pums a JOIN pums_dup b "
              "ON a.pid = b.pid) d")


def test_a_correlated_derived_table_is_refused():
    with pytest.raises(dpsql.UnsupportedQueryError, match="may not read the outer query"):
        _plan("SELECT COUNT(*) FROM pums p JOIN (SELECT pid FROM pums_dup "
              "WHERE age > p.age) d ON p.pid = d.pid")


def test_a_left_joined_expression_is_refused():
    """It is NULL where nothing matched; written out (``1``, ``COALESCE``) it need not be."""
    for body in ("1", "COALESCE(age, 0)", "age IS NULL"):
        with pytest.raises(dpsql.UnsupportedQueryError, match="LEFT JOIN"):
            _plan(f"SELECT COUNT(b.x) FROM pums p LEFT JOIN (SELECT pid, {body} AS x "
                  "FROM pums_dup) b ON p.pid = b.pid")


def test_not_row_level_is_left_to_the_per_user_rules():
    for sql, match in (
            ("SELECT COUNT(*) FROM (SELECT age FROM pums LIMIT 3) d", "LIMIT"),
            ("SELECT COUNT(*) FROM (SELECT age, COUNT(*) AS n FROM pums GROUP BY age) d",
             "GROUP BY the user key"),
            ("SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM pums) d",
             "GROUP BY the user key")):
        with pytest.raises(dpsql.UnsupportedQueryError, match=match):
            _plan(sql)


def test_written_out_size_is_bounded():
    """Each level doubles the previous one's expression: refused, fast, before any copy."""
    sql = ("SELECT SUM(a) FROM " + "(SELECT a + a AS a FROM " * 30
           + "(SELECT age AS a FROM pums) d" + " ".join(f") d{i}" for i in range(30)))
    with pytest.raises(dpsql.UnsupportedQueryError, match="max_nodes"):
        _plan(sql)


def test_refused_and_answered_queries_are_charged_as_usual(conn):
    before = conn.budget.spent
    with pytest.raises(dpsql.UnknownColumnError):
        conn.execute("SELECT COUNT(*) FROM (SELECT sex FROM pums) d WHERE age > 3",
                     epsilon=1.0)
    assert conn.budget.spent == before
    res = conn.execute("SELECT COUNT(*) FROM (SELECT * FROM pums) d", epsilon=0.5)
    assert math.isclose(conn.budget.spent[0], before[0] + 0.5) and res.cost == (0.5, 0.0)


@pytest.mark.parametrize("sql", [
    # * over another derived table or a CTE would skip its projections (age * 0)
    "SELECT SUM(age) FROM (SELECT * FROM (SELECT pid, age * 0 AS age FROM pums) a) b",
    "WITH a AS (SELECT pid, age * 0 AS age FROM pums), b AS (SELECT * FROM a) "
    "SELECT SUM(age) FROM b",
    # renamed by position: the catalog's column order need not be the table's
    "SELECT SUM(b) FROM (SELECT * FROM pums) AS d(a, b, c, e, f, g, h)",
    # GROUP BY ALL over * groups by every column (it removes duplicate rows)
    "SELECT COUNT(*) FROM (SELECT * FROM pums_dup GROUP BY ALL) t",
])
def test_star_only_over_catalog_tables_as_they_are(conn, sql):
    with pytest.raises(dpsql.UnsupportedQueryError):
        conn.execute(sql, epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
