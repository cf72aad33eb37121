"""No data-dependent failure (issue 14, findings 9–14; DESIGN.md invariant 5).

For each finding, two neighbouring databases: D, and D′ = D plus one person whose value
triggers the failure. The real ``execute`` path runs the same query on both, and D and D′
must either both answer or both be refused before the charge — never a failure after the
charge on one of them (an error oracle leaks whatever ε was charged).

Each finding runs on DuckDB; the backend-specific ones on SQLite, Spark SQL and
PostgreSQL too (PostgreSQL when ``DPSQL_TEST_POSTGRES_URL`` and
``DPSQL_TEST_POSTGRES_ADMIN_URL`` are set, Spark when pyspark and Java are installed).
The last tests break a rewrite pass on purpose (a dropped or misplaced guard) and check
that the final-SQL check (:func:`dpsql.backends.total.check_total`) refuses the
query before the charge, and unit-test the check's failure model per backend.
"""

from __future__ import annotations

import datetime
import sqlite3

import duckdb
import pytest
from sqlglot import exp, parse_one

import dpsql
from dpsql.backends import dialects
from dpsql.backends.loaders import copy_tables
from dpsql.rewrite import statistics_query
from tests.support import BACKEND_MATRIX, HAVE_SPARK, NO_POSTGRES, PG_ADMIN_URL, PG_URL

CATALOG = {
    "dataset": "guards",
    "tables": {
        "people": {"user_key": "pid", "max_groups": 2, "max_rows": 3, "columns": {
            "pid": {"type": "int"},
            "age": {"type": "int", "lower": 0, "upper": 100},
            "name": {"type": "string", "nullable": True},
            "income": {"type": "float", "lower": 0, "upper": 500000},
            "sex": {"type": "int", "values": [0, 1]},
            "d": {"type": "date", "nullable": True},
        }},
        "pub": {"public": True, "columns": {"age": {"type": "int"},
                                            "label": {"type": "string"}}},
    },
}
#: The people table: ``age`` is a TINYINT, so that arithmetic in the column's own type
#: overflows for large ages (the shape of findings 9–11).
SCHEMA = "pid INTEGER, age TINYINT, name VARCHAR, income DOUBLE, sex INTEGER, d DATE"
#: The person only D′ has.
ATTACKER = 999


def _rows(ages, extra=None):
    rows = [(i, ages[i % len(ages)], f"n{i}", 1000.0 * i, i % 2,
             datetime.date(2000, 1, 1) + datetime.timedelta(days=i)) for i in range(1, 121)]
    if extra is not None:
        rows.append((ATTACKER, *extra))
    return rows


def _source(rows) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE people ({SCHEMA})")
    con.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.execute("CREATE TABLE pub (age INTEGER, label VARCHAR)")
    con.execute("INSERT INTO pub SELECT i, 'l' || i FROM range(100) r(i)")
    return con


@pytest.fixture
def database(tmp_path, request):
    """Factory: ``database(kind, rows, patch=None)`` → what dpsql.connect takes."""
    def make(kind, rows, patch=None):
        con = _source(rows)
        if kind == "duckdb":
            return con
        if kind == "sqlite":
            path = tmp_path / f"db{len(list(tmp_path.iterdir()))}.db"
            copy_tables(con, f"sqlite:///{path}", ["people", "pub"])
            if patch is not None:  # bytes no DuckDB string can hold (invalid UTF-8)
                raw = sqlite3.connect(path)
                raw.execute(patch)
                raw.commit()
                raw.close()
            return f"sqlite:///{path}"
        if kind == "postgres":
            if not (PG_URL and PG_ADMIN_URL):
                pytest.skip(NO_POSTGRES)
            copy_tables(con, PG_ADMIN_URL, ["people", "pub"])
            return PG_URL
        spark = request.getfixturevalue("spark_session")
        copy_tables(con, spark, ["people", "pub"])
        return spark
    return make


def neighbours(sec, database, sql, extra, *, ages=(20, 30, 40), kind="duckdb",
               epsilon=1.0, delta=1e-6, patch=None, **kwargs):
    """Runs ``sql`` on D and on D′ (D plus the attacker); returns both outcomes."""
    outs = []
    for rows, fix in ((_rows(ages), None), (_rows(ages, extra), patch)):
        conn = dpsql.connect(database(kind, rows, fix), catalog=CATALOG,
                             budget=(1e6, 0.5), ledger=":memory:")
        try:
            outs.append(sec.outcome(conn, sql, epsilon, delta, **kwargs))
        finally:
            conn.close()
    return outs


def assert_agree(outs, expect=None):
    """Both answered, or both refused before the charge; never a charged failure."""
    d, d2 = outs
    for out in outs:
        assert out.kind in ("result", "refused"), out.describe()
        if out.kind == "refused":
            assert out.charged_nothing, out.describe()
    assert d.kind == d2.kind, f"D: {d.describe()}\nD′: {d2.describe()}"
    if expect is not None:
        assert d.kind == expect, d.describe()


def _person(age=30, name="x", income=1.0, sex=0, d=datetime.date(2000, 1, 1)):
    return (age, name, income, sex, d)


# -- finding 9: a key's raw expression copied after the guards ran -----------------------


def test_public_domain_key_is_guarded_where_the_domain_filter_copies_it(sec, database):
    # CASE over literals: a public domain {0, 1}; the domain filter repeats the key in
    # WHERE, and age * 2 overflows a TINYINT only for the attacker's age
    sql = ("SELECT CASE WHEN age * 2 > 150 THEN 1 ELSE 0 END AS k, COUNT(*) FROM people "
           "GROUP BY k")
    assert_agree(neighbours(sec, database, sql, _person(age=100)), "result")


def test_key_guarded_in_every_layer_with_data_keys(sec, database):
    sql = "SELECT age * 2 AS k, COUNT(*) FROM people GROUP BY k"
    assert_agree(neighbours(sec, database, sql, _person(age=100)), "result")


# -- finding 10: keys of derived tables and CTEs ---------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT SUM(n) FROM (SELECT pid, age * 2 AS k, COUNT(*) AS n FROM people "
    "GROUP BY pid, age * 2) t",
    "WITH t AS (SELECT pid, age * 2 AS k, COUNT(*) AS n FROM people GROUP BY pid, age * 2) "
    "SELECT k, COUNT(*) FROM t GROUP BY k",
    "SELECT COUNT(*) FROM (SELECT pid, COUNT(*) AS n FROM people WHERE age * 2 > 10 "
    "GROUP BY pid) t",
], ids=["derived-key", "cte-key", "derived-where"])
def test_derived_tables_and_ctes_are_guarded(sql, sec, database):
    assert_agree(neighbours(sec, database, sql, _person(age=100)), "result")


# -- finding 11: VARIANCE's squares in the column's own type ---------------------------------


@pytest.mark.parametrize("aggregate", ["VARIANCE(age)", "STDDEV(age)", "VAR_POP(age)",
                                       "AVG(age)"])
def test_variance_squares_cannot_overflow(aggregate, sec, database):
    # every age of D is the centre 50: (x - 50)² = 0 fits a TINYINT; the attacker's 100
    # gives 2500, which does not
    outs = neighbours(sec, database, f"SELECT {aggregate} FROM people",
                      _person(age=100), ages=(50,))
    assert_agree(outs, "result")


# -- finding 12: "whole-numbered" and bounds that fail in Python -----------------------------


@pytest.mark.parametrize("sql", ["SELECT SUM(age % 2.5) FROM people",
                                 "SELECT SUM(age // 2.5) FROM people",
                                 "SELECT SUM(age * 1.0) FROM people",
                                 "SELECT SUM(CAST(age AS DOUBLE) / 2) FROM people"])
def test_fractional_values_are_not_taken_for_integers(sql, sec, database):
    # D: every value whole by chance (ages that are multiples of 5); D′: 23 % 2.5 = 0.5
    outs = neighbours(sec, database, sql, _person(age=23), ages=(20, 25, 30))
    assert_agree(outs, "result")


@pytest.mark.parametrize(("sql", "epsilon"), [
    ("SELECT SUM(income * 1e300) FROM people", 1e-9),
    ("SELECT SUM(ROUND(income, 400)) FROM people", 1.0),
    ("SELECT SUM(ROUND(income, -400)) FROM people", 1.0),
])
def test_absurd_bounds_are_refused_free(sql, epsilon, sec, database):
    outs = neighbours(sec, database, sql, _person(), epsilon=epsilon)
    assert_agree(outs, "refused")
    assert isinstance(outs[0].value, dpsql.UnboundedExpressionError)


# -- finding 13: IN subqueries -------------------------------------------------------------


@pytest.mark.parametrize("sql", [
    # correlated: people.age inside the subquery is the outer (private) row's
    "SELECT COUNT(*) FROM people WHERE sex IN (SELECT p.age FROM pub p "
    "WHERE p.age = people.age * 1000)",
    # not correlated: the subquery's own expressions are guarded too
    "SELECT COUNT(*) FROM people WHERE age IN (SELECT age FROM pub WHERE age * 1000 > 5)",
    "SELECT COUNT(*) FROM people WHERE age * 2 IN (SELECT age FROM pub)",
], ids=["correlated", "inner", "outer-expression"])
def test_in_subqueries_are_guarded(sql, sec, database):
    assert_agree(neighbours(sec, database, sql, _person(age=100)))


# -- finding 14: what some backend cannot guard --------------------------------------------

#: Every backend's name (the static failure model); KINDS runs them (absent ones skip).
BACKENDS = ["duckdb", "sqlite", "postgres", "spark"]
KINDS = BACKEND_MATRIX
_ESCAPE_ORACLE = ("SELECT COUNT(*) FROM people WHERE name LIKE "
                  "CONCAT(CASE WHEN pid = 999 AND age > 50 THEN '\\' ELSE '' END, 'a')")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sql", [
    _ESCAPE_ORACLE,
    "SELECT COUNT(*) FROM people WHERE name LIKE name",
    "SELECT COUNT(*) FROM people WHERE name ILIKE UPPER(name)",
    "SELECT COUNT(*) FROM people WHERE name LIKE 'abc\\'",
    "SELECT COUNT(*) FROM people WHERE name LIKE 'a\\c%'",
    "SELECT COUNT(*) FROM people WHERE LENGTH(REPLACE(name, 'a', 'bb')) > 3",
    "SELECT COUNT(*) FROM people WHERE LENGTH(REPLACE(REPLACE(REPLACE(CASE WHEN pid = 999 "
    "THEN name ELSE '' END, 'a', '" + "x" * 900 + "'), 'x', '" + "y" * 900 + "'), 'y', '"
    + "z" * 900 + "')) > 1",
], ids=["escape-oracle", "pattern-column", "ilike-pattern", "trailing-escape",
        "misplaced-escape", "replace-grows", "replace-memory"])
def test_unguardable_functions_are_refused_free_everywhere(kind, sql, sec, database):
    outs = neighbours(sec, database, sql, _person(age=60, name="abc\\x"), kind=kind)
    assert_agree(outs, "refused")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM people WHERE name LIKE 'ab%'",
    "SELECT COUNT(*) FROM people WHERE LENGTH(REPLACE(name, 'ab', 'x')) > 1",
], ids=["constant-pattern", "shrinking-replace"])
def test_safe_patterns_answer_everywhere(kind, sql, sec, database):
    assert_agree(neighbours(sec, database, sql, _person(name="abc\\x"), kind=kind), "result")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("sql", "date"), [
    ("SELECT COUNT(*) FROM people WHERE d + INTERVAL '1' YEAR > DATE '2000-01-01'",
     datetime.date(9999, 12, 31)),
    ("SELECT COUNT(*) FROM people WHERE d - INTERVAL '30' DAY < DATE '2000-01-01'",
     datetime.date(1, 1, 1)),
    ("SELECT YEAR(d + INTERVAL '1' YEAR) AS y, COUNT(*) FROM people GROUP BY y",
     datetime.date(9999, 12, 31)),
], ids=["plus-year", "minus-days", "key"])
def test_date_arithmetic_at_the_edge_of_the_range(kind, sql, date, sec, database):
    outs = neighbours(sec, database, sql, _person(d=date), kind=kind)
    assert_agree(outs)


def test_duckdb_date_beyond_the_timestamp_range(sec, database):
    # DuckDB: a DATE + INTERVAL is a TIMESTAMP, which ends in 294247
    huge = duckdb.connect().execute("SELECT DATE '294247-06-01'").fetchone()[0]
    sql = "SELECT COUNT(*) FROM people WHERE d + INTERVAL '1' YEAR > DATE '2000-01-01'"
    assert_agree(neighbours(sec, database, sql, _person(d=huge)), "result")


@pytest.mark.parametrize("kind", [pytest.param("spark", marks=pytest.mark.slow), "postgres"])
def test_date_keys_beyond_python_dates(kind, sec, database):
    # the driver cannot return year 10000: the key becomes NULL instead of failing
    sql = "SELECT d + INTERVAL '1' DAY AS k, COUNT(*) FROM people GROUP BY k"
    outs = neighbours(sec, database, sql, _person(d=datetime.date(9999, 12, 31)), kind=kind)
    assert_agree(outs, "result")


@pytest.mark.slow  # starts Spark
def test_large_intervals_are_refused_where_they_could_overflow(sec, database):
    sql = "SELECT COUNT(*) FROM people WHERE d + INTERVAL '100000000' YEAR > DATE '2000-01-01'"
    for kind in ("spark", "postgres"):
        if kind == "spark" and not HAVE_SPARK or kind == "postgres" and not PG_URL:
            continue
        assert_agree(neighbours(sec, database, sql, _person(), kind=kind), "refused")


def test_sqlite_invalid_utf8_reaches_no_python_function(sec, database):
    # COUNT(DISTINCT name) ranks each user's values by dpsql's keyed hash, a Python
    # function: text with invalid UTF-8 would make it raise on the attacker's row only
    patch = f"UPDATE people SET name = CAST(X'FF61' AS TEXT) WHERE pid = {ATTACKER}"
    sql = "SELECT COUNT(DISTINCT name) FROM people"
    assert_agree(neighbours(sec, database, sql, _person(), kind="sqlite", patch=patch),
                 "result")
    sql = "SELECT sex, SUM(age % 2.5) FROM people GROUP BY sex"  # dpsql_fmod
    patch = f"UPDATE people SET age = CAST(X'FF61' AS TEXT) WHERE pid = {ATTACKER}"
    assert_agree(neighbours(sec, database, sql, _person(), kind="sqlite", patch=patch),
                 "result")


# -- the check of the final SQL: a broken pass is refused before the charge -------------------


def _conn(database, rows=None):
    return dpsql.connect(database("duckdb", rows or _rows((20, 30, 40), _person(age=100))),
                         catalog=CATALOG, budget=(1e6, 0.5), ledger=":memory:")


def test_a_dropped_guard_is_refused_before_the_charge(sec, database, monkeypatch):
    """The check does not trust the placement: with no guard placed, the allow-list
    check of the final tree refuses what may fail (DuckDB places guards in the backend,
    :mod:`dpsql.backends.total`)."""
    from dpsql.backends import total

    monkeypatch.setattr(total, "place_guards", lambda tree, *a, **k: tree)
    conn = _conn(database)
    out = sec.outcome(conn, "SELECT SUM(age * 2) FROM people", 1.0, 0.0)
    assert out.kind == "refused", out.describe()
    assert "could fail on some data" in str(out.value)
    assert conn.budget.spent == (0.0, 0.0)
    # the same query with the guard: answered
    monkeypatch.undo()
    assert sec.outcome(conn, "SELECT SUM(age * 2) FROM people", 1.0, 0.0).kind == "result"


def test_a_guard_placed_too_high_is_refused_before_the_charge(sec, database, monkeypatch):
    """TRY around a CASE that repeats a failing subexpression: DuckDB computes the
    repeated ``age * 2`` once, outside the TRY (seen on DuckDB 2.0), so the check wants
    a TRY directly around every node that can fail."""
    from dpsql.backends import total

    place = total.place_guards

    def high_guard(tree, allow, types, refuse):
        place(tree, allow, types, refuse)
        for node in list(tree.find_all(exp.Try)):
            node.replace(node.this)  # strip the per-node guards ...
        for case in list(tree.find_all(exp.Case)):
            if case.find(exp.Mul):   # ... and guard the whole CASE instead
                case.replace(exp.Try(this=case.copy()))
        return tree

    monkeypatch.setattr(total, "place_guards", high_guard)
    conn = _conn(database)
    sql = "SELECT SUM(CASE WHEN sex = 1 THEN age * 2 ELSE 0 END) FROM people"
    out = sec.outcome(conn, sql, 1.0, 0.0)
    assert out.kind == "refused", out.describe()
    assert conn.budget.spent == (0.0, 0.0)


def test_a_pass_copying_a_raw_expression_after_the_guards_is_refused(sec, database,
                                                                     monkeypatch):
    """Finding 9's shape: a step after the placement adds an unguarded copy of a key to
    WHERE; the check of the final tree refuses it."""
    from dpsql.backends import total

    place = total.place_guards

    def copy_after(tree, allow, types, refuse):
        place(tree, allow, types, refuse)
        for select in tree.find_all(exp.Select):
            from_ = select.args.get("from_")
            if from_ is not None and from_.this.name == "people":
                select.where(parse_one("age * 2 IN (0, 1)"), copy=False)
        return tree

    monkeypatch.setattr(total, "place_guards", copy_after)
    conn = _conn(database)
    out = sec.outcome(conn, "SELECT COUNT(*) FROM people", 1.0, 0.0)
    assert out.kind == "refused", out.describe()
    assert conn.budget.spent == (0.0, 0.0)


# -- the allow-list check of each backend, on trees ---------------------------------------------


def _backend(kind, database):
    from dpsql.backends import open_backend

    return open_backend(database(kind, _rows((20, 30, 40))))


def _problems(backend, sql: str):
    """What the final check finds in ``sql`` as written (no guards placed), typed by the
    backend's engine."""
    from dpsql.backends import total

    tree = parse_one(sql, read="duckdb")
    return total.problems(tree, backend.allow, backend.engine_types(tree))


@pytest.mark.parametrize(("sql", "backends"), [
    # integer overflow: DuckDB raises; SQLite widens to REAL
    ("SELECT COUNT(*) FROM people WHERE age * 2 > 1", ("duckdb",)),
    # TRY is DuckDB's guard only (other engines' layers write their own forms)
    ("SELECT SUM(TRY(age * 2)) FROM people", ("sqlite",)),
    # a comparison that converts text per row (DuckDB); SQLite orders any values
    ("SELECT COUNT(*) FROM people WHERE name = 5", ("duckdb",)),
    # a TRY above the failing node: DuckDB computes repeated subexpressions apart
    ("SELECT COUNT(*) FROM people WHERE TRY(age * 2 + 1) > 1", ("duckdb", "sqlite")),
    # a pattern from the data
    ("SELECT COUNT(*) FROM people WHERE name LIKE name", ("duckdb", "sqlite")),
    # a REPLACE that lengthens
    ("SELECT COUNT(*) FROM people WHERE REPLACE(name, 'a', 'bb') = 'x'", ("duckdb", "sqlite")),
    # SQLite's SUM of integers raises on overflow (its dialect layer writes TOTAL)
    ("SELECT SUM(age) FROM people", ("sqlite",)),
    # ABS of the smallest integer raises on both (SQLite's layer writes MAX(x, -x))
    ("SELECT SUM(ABS(age)) FROM people", ("duckdb", "sqlite")),
    # date arithmetic beyond DuckDB's range
    ("SELECT COUNT(*) FROM people WHERE d + INTERVAL '1' YEAR > DATE '2000-01-01'",
     ("duckdb", "sqlite")),
])
def test_allow_list_check_per_backend(sql, backends, database):
    """The final check of each engine, on a tree as written: DuckDB and SQLite here
    (PostgreSQL and Spark check the tree their dialect layers write, which the engine
    tests and the totality fuzzer cover)."""
    for kind in ("duckdb", "sqlite"):
        found = _problems(_backend(kind, database), sql)
        if kind in backends:
            assert found, (kind, sql)
        else:
            assert not found, (kind, sql, found)


def test_check_total_raises_an_uncharged_backend_error(database):
    from dpsql.backends import total

    backend = _backend("duckdb", database)
    tree = parse_one("SELECT COUNT(*) FROM people WHERE age * 2 > 1", read="duckdb")
    with pytest.raises(dpsql.BackendError, match="could fail on some data") as info:
        total.check_total(tree, backend.allow, backend.engine_types(tree))
    assert info.value.charged is False
    guarded = parse_one("SELECT COUNT(*) FROM people WHERE TRY(age * 2) > 1", read="duckdb")
    total.check_total(guarded, backend.allow, backend.engine_types(guarded))


def test_every_backend_writes_only_what_its_check_accepts(tmp_path):
    """Rewritten queries pass each backend's whole path: guards placed, dialect forms
    written, the final tree proved total (to_sql raises otherwise)."""
    from dpsql.backends import open_backend
    from dpsql.datasets import load_pums
    from dpsql.engine import _demo_plan
    from dpsql.rewrite import rewrite

    pums_file = tmp_path / "pums.duckdb"
    load_pums(pums_file)
    source = duckdb.connect(str(pums_file), read_only=True)
    copy_tables(source, f"sqlite:///{tmp_path / 'pums.db'}", ["pums", "pums_dup"])
    source.close()
    for database in (str(pums_file), f"sqlite:///{tmp_path / 'pums.db'}"):
        backend = open_backend(database)
        for sql in ("SELECT sex, AVG(income), VARIANCE(age) FROM pums_dup GROUP BY sex",
                    "SELECT age // 10 AS d, SUM(income % 7.5) FROM pums GROUP BY d",
                    "SELECT COUNT(DISTINCT educ) FROM pums_dup WHERE SQRT(age) > 2"):
            assert backend.to_sql(rewrite(_demo_plan(sql, max_rows=3))), (database, sql)
        backend.close()


def test_statistics_query_alone_is_guarded_by_the_backend(database):
    """Without any pass, the plain statistics query has operations that may fail; the
    backend guards them (or refuses), and the result passes the check."""
    from dpsql.backends import total
    from dpsql.engine import _demo_plan

    backend = _backend("duckdb", database)
    plan = _demo_plan("SELECT SUM(age * 2) FROM pums WHERE CAST(educ AS INT) > 1")
    tree = statistics_query(plan)
    for table in tree.find_all(exp.Table):
        table.set("this", exp.to_identifier("people"))
    for column in tree.find_all(exp.Column):
        if column.name == "educ":
            column.set("this", exp.to_identifier("name"))
    assert _problems(backend, tree.sql(dialect="duckdb"))
    sql = backend.to_sql(tree)
    assert "TRY" in sql
    final = parse_one(sql, read="duckdb")
    assert not total.problems(final, backend.allow, backend.engine_types(final))


def test_sqlite_invalid_utf8_key_is_returned(sec, database):
    patch = f"UPDATE people SET name = CAST(X'FF61' AS TEXT) WHERE pid = {ATTACKER}"
    sql = "SELECT name, COUNT(*) FROM people GROUP BY name"
    assert_agree(neighbours(sec, database, sql, _person(), kind="sqlite", patch=patch,
                            delta=0.4))


def test_sqlite_long_text_reads_as_null(sec, database):
    """Text past dialects.SQLITE_MAX_TEXT bytes reads as NULL, so that no expression of
    at most max_value_length growth reaches SQLite's 1e9-byte limit after the charge (a
    1,024-leaf `name || name` tree over one person's 1 MB name failed there)."""
    from dpsql.limits import Limits

    assert Limits().max_value_length * dialects.SQLITE_MAX_TEXT * 6 < 10**9
    long = "x" * (dialects.SQLITE_MAX_TEXT + 1)
    patch = f"UPDATE people SET name = '{long}' WHERE pid = {ATTACKER}"
    sql = "SELECT COUNT(*) FROM people WHERE name IS NULL"
    d, d2 = neighbours(sec, database, sql, _person(), kind="sqlite", patch=patch,
                       epsilon=1e6)
    assert d.kind == d2.kind == "result", (d.describe(), d2.describe())
    assert d2.value.rows[0][0] - d.value.rows[0][0] == 1  # the long name is NULL


@pytest.mark.slow  # Spark: a JVM
def test_spark_shared_subexpression_stays_inside_its_guards(sec, database):
    """Spark's common-subexpression elimination computed the implicit CAST of a DATE
    shared by two TRY_ADDs once, outside both: one person's far date failed the query
    after the charge (attack review of the Spark port). SAFE_CONF switches it off."""
    far = "CASE WHEN pid = 999 AND age > 50 THEN 1000000 ELSE 0 END"
    x = f"(d + INTERVAL 1 YEAR * {far})"
    sql = (f"SELECT COUNT(*) FROM people WHERE {x} + INTERVAL 1 HOUR IS NULL "
           f"AND {x} + INTERVAL 2 HOUR IS NULL")
    assert_agree(neighbours(sec, database, sql, _person(age=60), kind="spark"))
