"""PEP 249 conformance of dpsql.dbapi, and its privacy semantics."""

from __future__ import annotations

import datetime
import math

import pytest
import sqlglot

import dpsql
from dpsql import dbapi, errors
from dpsql.bigquery_options import lift_dp_options
from dpsql.datasets import catalog_path, load_pums

COUNT_BY_SEX = "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex"
BY_EDUC = "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ"  # 16 public keys


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("dbapi") / "pums.duckdb"
    load_pums(path)
    return path


@pytest.fixture
def connect(db):
    opened = []

    def make(**kwargs):
        kwargs.setdefault("ledger", ":memory:")
        kwargs.setdefault("epsilon", 1.0)
        conn = dbapi.connect(str(db), catalog_path("pums"), **kwargs)
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()


# -- module interface -----------------------------------------------------------------


def test_module_globals():
    assert dbapi.apilevel == "2.0"
    assert dbapi.threadsafety == 1
    assert dbapi.paramstyle == "qmark"
    for name in ("connect", "Date", "Time", "Timestamp", "DateFromTicks", "TimeFromTicks",
                 "TimestampFromTicks", "Binary", "STRING", "BINARY", "NUMBER", "DATETIME",
                 "ROWID"):
        assert hasattr(dbapi, name), name
    assert dbapi.Date(2020, 1, 2) == datetime.date(2020, 1, 2)
    assert isinstance(dbapi.TimestampFromTicks(0), datetime.datetime)
    assert dbapi.Binary(b"x") == b"x"


def test_exception_hierarchy():
    assert issubclass(dbapi.Warning, Exception)
    assert issubclass(dbapi.Error, Exception)
    assert not issubclass(dbapi.Warning, dbapi.Error)
    assert issubclass(dbapi.InterfaceError, dbapi.Error)
    assert issubclass(dbapi.DatabaseError, dbapi.Error)
    for name in ("DataError", "OperationalError", "IntegrityError", "InternalError",
                 "ProgrammingError", "NotSupportedError"):
        assert issubclass(getattr(dbapi, name), dbapi.DatabaseError), name


@pytest.mark.parametrize("dpsql_class, pep", [
    (errors.ParseError, dbapi.ProgrammingError),
    (errors.UnsupportedQueryError, dbapi.ProgrammingError),
    (errors.UnknownTableError, dbapi.ProgrammingError),
    (errors.UnknownColumnError, dbapi.ProgrammingError),
    (errors.UnboundedExpressionError, dbapi.ProgrammingError),
    (errors.AnalysisError, dbapi.ProgrammingError),
    (errors.PrivacyParameterError, dbapi.ProgrammingError),
    (errors.BudgetExhaustedError, dbapi.OperationalError),
    (errors.BackendError, dbapi.OperationalError),
    (errors.LedgerError, dbapi.OperationalError),
    (errors.CatalogError, dbapi.InterfaceError),
    (errors.DpsqlError, dbapi.DatabaseError),
])
def test_error_mapping_table(dpsql_class, pep):
    cls = dbapi.error_class(dpsql_class)
    assert issubclass(cls, pep) and issubclass(cls, dpsql_class)
    assert dbapi.error_class(dpsql_class) is cls  # made once


def test_connection_exposes_exception_classes(connect):
    conn = connect()
    assert conn.ProgrammingError is dbapi.ProgrammingError
    assert conn.Error is dbapi.Error


# -- connect --------------------------------------------------------------------------


def test_connect_takes_dpsql_connect_arguments(db, tmp_path):
    ledger = tmp_path / "ledger.sqlite"
    conn = dbapi.connect(str(db), catalog=str(catalog_path("pums")), budget=(2.0, 1e-6),
                         ledger=ledger, analyst="alice", alpha=0.1, epsilon=0.5, delta=1e-7,
                         max_groups=2, max_rows=1)
    assert conn.analyst == "alice"
    assert "pums" in conn.catalog.tables
    cur = conn.cursor()
    assert (cur.epsilon, cur.delta, cur.max_groups, cur.max_rows) == (0.5, 1e-7, 2, 1)
    cur.execute("SELECT COUNT(*) FROM pums")
    assert cur.result.alpha == 0.1
    assert conn.budget.remaining[0] == pytest.approx(1.5)
    conn.close()
    assert ledger.exists()


def test_connect_errors_are_mapped(db, tmp_path):
    with pytest.raises(dbapi.InterfaceError) as info:
        dbapi.connect(str(db), {"tables": {"t": {"columns": {}}}}, ledger=":memory:")
    assert isinstance(info.value, dpsql.CatalogError)
    with pytest.raises(dbapi.OperationalError) as info:
        dbapi.connect(str(tmp_path / "missing.duckdb"), catalog_path("pums"), ledger=":memory:")
    assert isinstance(info.value, dpsql.BackendError)
    with pytest.raises(dbapi.OperationalError) as info:
        dbapi.connect(str(db), catalog_path("pums"), ledger=tmp_path / "no" / "ledger.sqlite")
    assert isinstance(info.value, dpsql.LedgerError)
    with pytest.raises(dbapi.ProgrammingError) as info:
        dbapi.connect(str(db), catalog_path("pums"), budget=5.0, ledger=":memory:")
    assert isinstance(info.value, dpsql.PrivacyParameterError)


# -- cursor lifecycle -----------------------------------------------------------------


def test_cursor_before_and_after_execute(connect):
    cur = connect().cursor()
    assert cur.description is None
    assert cur.rowcount == -1
    assert cur.arraysize == 1
    assert cur.accuracy is None and cur.cost is None
    assert cur.execute(COUNT_BY_SEX) is cur
    assert cur.rowcount == 2
    assert cur.cost == (1.0, 0.0)
    assert len(cur.accuracy) == 2 and cur.accuracy[0][0] is None and cur.accuracy[0][1] > 0
    assert cur.result.columns == ["sex", "n"]


def test_description_seven_tuples_and_type_codes(connect):
    cur = connect(delta=1e-6).cursor()
    cur.execute("SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex")
    assert [d[0] for d in cur.description] == ["sex", "n", "avg_income"]
    assert all(len(d) == 7 for d in cur.description)
    assert all(d[2:] == (None,) * 5 for d in cur.description)
    codes = [d[1] for d in cur.description]
    assert codes == ["BIGINT", "BIGINT", "DOUBLE"]
    assert all(code == dbapi.NUMBER for code in codes)
    assert codes[0] != dbapi.STRING and codes[0] != dbapi.DATETIME
    cur.execute("SELECT CAST(sex AS VARCHAR) AS s, COUNT(*) AS n FROM pums GROUP BY 1")
    assert cur.description[0][1] == dbapi.STRING


def test_description_of_an_empty_result_comes_from_the_catalog(connect):
    cur = connect().cursor()
    cur.execute("SELECT sex, COUNT(*) AS n, AVG(income) AS a FROM pums GROUP BY sex "
                "HAVING COUNT(*) < 0")
    assert cur.rowcount == 0 and cur.fetchall() == []
    assert [d[1] for d in cur.description] == ["BIGINT", "BIGINT", "DOUBLE"]


def test_fetch_methods_and_arraysize(connect):
    cur = connect().cursor()
    cur.execute(BY_EDUC)
    assert cur.rowcount == 16
    first = cur.fetchone()
    assert isinstance(first, tuple) and first[0] == 1
    assert [r[0] for r in cur.fetchmany()] == [2]  # arraysize 1
    cur.arraysize = 5
    assert [r[0] for r in cur.fetchmany()] == [3, 4, 5, 6, 7]
    assert [r[0] for r in cur.fetchmany(3)] == [8, 9, 10]
    assert [r[0] for r in cur.fetchall()] == [11, 12, 13, 14, 15, 16]
    assert cur.fetchone() is None
    assert cur.fetchmany(4) == [] and cur.fetchall() == []


def test_iteration(connect):
    cur = connect().cursor()
    assert [row[0] for row in cur.execute(BY_EDUC)] == list(range(1, 17))
    assert list(cur) == []


def test_fetch_without_a_result_set(connect):
    cur = connect().cursor()
    with pytest.raises(dbapi.ProgrammingError):
        cur.fetchone()
    with pytest.raises(dbapi.ProgrammingError):
        cur.execute("SELECT * FROM pums")
    assert cur.description is None and cur.rowcount == -1
    with pytest.raises(dbapi.ProgrammingError):
        cur.fetchall()


def test_context_managers(connect):
    with connect() as conn:
        with conn.cursor() as cur:
            cur.execute(COUNT_BY_SEX)
            assert cur.rowcount == 2
        assert cur.closed
        with pytest.raises(dbapi.InterfaceError):
            cur.execute(COUNT_BY_SEX)
        assert not conn.closed
    assert conn.closed


def test_closed_cursor_and_connection_raise(connect):
    conn = connect()
    cur = conn.cursor()
    cur.execute(COUNT_BY_SEX)
    cur.close()
    cur.close()  # idempotent
    for call in (cur.fetchone, cur.fetchall, cur.fetchmany, lambda: cur.execute(COUNT_BY_SEX)):
        with pytest.raises(dbapi.InterfaceError):
            call()
    other = conn.cursor()
    conn.close()
    conn.close()  # idempotent
    for call in (conn.cursor, conn.commit, conn.rollback, lambda: other.execute(COUNT_BY_SEX),
                 lambda: conn.budget):
        with pytest.raises(dbapi.InterfaceError):
            call()


def test_sizes_are_no_ops(connect):
    cur = connect().cursor()
    assert cur.setinputsizes([10]) is None
    assert cur.setoutputsize(10) is None
    assert cur.setoutputsizes(10, 0) is None


# -- errors from dpsql ---------------------------------------------------------------


@pytest.mark.parametrize("sql, pep, original", [
    ("SELECT COUNT(* FROM pums", dbapi.ProgrammingError, dpsql.ParseError),
    ("SELECT * FROM pums", dbapi.ProgrammingError, dpsql.UnsupportedQueryError),
    ("SELECT COUNT(*) FROM nowhere", dbapi.ProgrammingError, dpsql.UnknownTableError),
    ("SELECT SUM(nothing) FROM pums", dbapi.ProgrammingError, dpsql.UnknownColumnError),
    ("SELECT SUM(pid) FROM pums", dbapi.ProgrammingError, dpsql.UnboundedExpressionError),
])
def test_query_errors_are_both_classes(connect, sql, pep, original):
    conn = connect()
    with pytest.raises(pep) as info:
        conn.cursor().execute(sql)
    assert isinstance(info.value, original)
    assert isinstance(info.value, dpsql.DpsqlError)
    assert conn.budget.spent == (0.0, 0.0)


def test_parse_error_keeps_its_position(connect):
    with pytest.raises(dpsql.ParseError) as info:
        connect().cursor().execute("SELECT COUNT(*)\nFROM pums WHERE")
    assert isinstance(info.value, dbapi.ProgrammingError)
    assert info.value.line is not None and "line" in str(info.value)


def test_privacy_and_budget_errors(connect):
    conn = connect(budget=(1.0, 1e-6))
    cur = conn.cursor()
    cur.epsilon = -1.0
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute(COUNT_BY_SEX)
    assert isinstance(info.value, dpsql.PrivacyParameterError)
    cur.epsilon = None
    with pytest.raises(dbapi.ProgrammingError, match="no epsilon"):
        cur.execute(COUNT_BY_SEX)
    cur.epsilon = 0.75
    cur.execute(COUNT_BY_SEX)
    with pytest.raises(dbapi.OperationalError) as info:
        cur.execute(COUNT_BY_SEX)
    assert isinstance(info.value, dpsql.BudgetExhaustedError)
    assert conn.budget.spent == (0.75, 0.0)


# -- parameters ----------------------------------------------------------------------


def test_qmark_parameters(connect):
    conn = connect()
    cur = conn.cursor()
    cur.execute("SELECT educ, COUNT(*) AS n FROM pums WHERE age > ? AND sex = ? GROUP BY educ "
                "LIMIT ?", (18, 1, 3))
    assert cur.rowcount == 3  # the LIMIT got the third value, not the first
    assert "age > 18" in cur.result.sql and "sex = 1" in cur.result.sql
    cur.execute("SELECT COUNT(*) FROM pums WHERE age BETWEEN ? AND ?", [20, 30])
    assert "BETWEEN 20 AND 30" in cur.result.sql


@pytest.mark.parametrize("value", [
    "0' OR '1'='1",
    "0'; DROP TABLE pums; --",
    "0\" OR \"1\"=\"1",
    "?",
])
def test_parameters_are_bound_as_literals(connect, value):
    conn = connect()
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) AS n FROM pums WHERE CAST(sex AS VARCHAR) = ?", [value])
    where = sqlglot.parse_one(cur.result.sql, read="duckdb").find(sqlglot.exp.EQ)
    assert where.expression.is_string and where.expression.this == value
    # no row has that value: the noisy count is near 0, not near the table's 1,000 rows
    assert cur.fetchone()[0] < 100
    cur.execute("SELECT COUNT(*) FROM pums")  # the table is still there


def test_backslashes_in_parameters_are_refused_free(connect):
    """Backends read a backslash in a literal differently (PostgreSQL without
    standard_conforming_strings: an escape), so one text could mean two queries."""
    conn = connect()
    cur = conn.cursor()
    with pytest.raises(dbapi.Error, match="backslash"):
        cur.execute("SELECT COUNT(*) AS n FROM pums WHERE CAST(sex AS VARCHAR) = ?",
                    ["0\\' OR 1=1 --"])
    assert conn.budget.spent == (0.0, 0.0)


def test_bind_parameters_goes_through_sqlglot():
    sql = dbapi.bind_parameters("SELECT COUNT(*) FROM t WHERE a = ? AND b = ? AND c = ?",
                                ["it's", None, -2.5])
    assert sql == "SELECT COUNT(*) FROM t WHERE a = 'it''s' AND b = NULL AND c = (-2.5e0)"
    assert dbapi.bind_parameters("SELECT COUNT(*) FROM t WHERE a = '?'", None) == (
        "SELECT COUNT(*) FROM t WHERE a = '?'")
    dated = dbapi.bind_parameters("SELECT COUNT(*) FROM t WHERE d > ?", [datetime.date(2020, 1, 2)])
    assert "CAST('2020-01-02' AS DATE)" in dated


@pytest.mark.parametrize("sql, params", [
    ("SELECT COUNT(*) FROM pums WHERE age > ?", None),
    ("SELECT COUNT(*) FROM pums WHERE age > ?", ()),
    ("SELECT COUNT(*) FROM pums WHERE age > ?", (1, 2)),
    ("SELECT COUNT(*) FROM pums", (1,)),
    ("SELECT COUNT(*) FROM pums WHERE age > ?", {"age": 1}),
    ("SELECT COUNT(*) FROM pums WHERE age > ?", "1"),
    ("SELECT COUNT(*) FROM pums WHERE age > :age", (1,)),
    ("SELECT COUNT(*) FROM pums WHERE age > $1", (1,)),
    ("SELECT COUNT(*) FROM pums WHERE age > ?", [object()]),
])
def test_wrong_parameters_raise_programming_error(connect, sql, params):
    conn = connect()
    with pytest.raises(dbapi.ProgrammingError):
        conn.cursor().execute(sql, params)
    assert conn.budget.spent == (0.0, 0.0)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_parameters_raise_data_error(connect, value):
    with pytest.raises(dbapi.DataError):
        connect().cursor().execute("SELECT COUNT(*) FROM pums WHERE income > ?", [value])


def test_executemany_is_refused(connect):
    conn = connect()
    with pytest.raises(dbapi.NotSupportedError, match="executemany"):
        conn.cursor().executemany("SELECT COUNT(*) FROM pums WHERE age > ?", [(1,), (2,)])
    assert conn.budget.spent == (0.0, 0.0)


# -- transactions --------------------------------------------------------------------


def test_commit_and_rollback_are_no_ops_that_refund_nothing(connect, tmp_path):
    conn = connect(ledger=tmp_path / "ledger.sqlite")
    conn.cursor().execute(COUNT_BY_SEX)
    assert conn.budget.spent == (1.0, 0.0)
    assert conn.rollback() is None
    assert conn.budget.spent == (1.0, 0.0)
    assert conn.commit() is None
    conn.close()  # no implicit rollback either
    again = connect(ledger=tmp_path / "ledger.sqlite")
    assert again.budget.spent == (1.0, 0.0)


# -- privacy options -----------------------------------------------------------------


def test_cursor_privacy_options(connect):
    conn = connect(epsilon=0.5)
    cur = conn.cursor()
    assert cur.epsilon == 0.5 and cur.delta == 0.0
    cur.execute(COUNT_BY_SEX)
    one_group = cur.accuracy[0][1]
    cur.epsilon, cur.max_groups = 0.25, 2
    cur.execute(COUNT_BY_SEX)
    assert cur.cost == (0.25, 0.0)
    assert cur.accuracy[0][1] > one_group  # half the epsilon, twice the groups
    conn.epsilon = 0.125
    assert conn.cursor().epsilon == 0.125  # new cursors copy the connection's defaults
    assert cur.epsilon == 0.25
    assert conn.budget.spent == (0.75, 0.0)


def test_delta_on_the_cursor_allows_data_keys(connect):
    cur = connect().cursor()
    with pytest.raises(dbapi.ProgrammingError):
        cur.execute("SELECT income // 1000, COUNT(*) FROM pums GROUP BY 1")  # delta 0: no selection
    cur.delta = 1e-6
    cur.execute("SELECT income // 1000, COUNT(*) FROM pums GROUP BY 1")
    assert cur.cost == (1.0, 1e-6)


def test_bigquery_options_clause_is_honoured_and_charged(connect):
    conn = connect(epsilon=1.0)
    cur = conn.cursor()
    cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25, delta = 1e-6, "
                "max_groups_contributed = 2) age, COUNT(*) AS n FROM pums GROUP BY age")
    # age's bounds are a public domain: all 101 ages, no partition selection, no delta
    assert len(cur.fetchall()) == 101
    assert cur.cost == (0.25, 0.0)
    assert conn.budget.spent == (0.25, 0.0)
    assert [d[0] for d in cur.description] == ["age", "n"]
    assert cur.epsilon == 1.0  # the clause applies to its query only
    cur.execute("select with differential_privacy options(EPSILON=0.125) COUNT(*) FROM pums "
                "WHERE age > ?", [30])
    assert cur.cost == (0.125, 0.0)
    assert conn.budget.spent == (0.375, 0.0)


def test_bigquery_options_errors_charge_nothing(connect):
    conn = connect()
    cur = conn.cursor()
    with pytest.raises(dbapi.ProgrammingError, match="privacy_unit_column"):
        cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (privacy_unit_column = pid) "
                    "COUNT(*) FROM pums")
    with pytest.raises(dbapi.ProgrammingError):
        cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = lots) COUNT(*) FROM pums")
    with pytest.raises(dbapi.ProgrammingError):
        cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = -1) COUNT(*) FROM pums")
    assert conn.budget.spent == (0.0, 0.0)


def test_lift_dp_options():
    sql, opts = lift_dp_options(
        "  -- note\n SELECT /* x */ WITH  DIFFERENTIAL_PRIVACY OPTIONS ( epsilon=.5 , "
        "delta=1E-6, max_groups_contributed=+2, max_rows_contributed = 3 ) COUNT(*) FROM t")
    assert opts == {"epsilon": 0.5, "delta": 1e-6, "max_groups": 2, "max_rows": 3}
    assert sqlglot.parse_one(sql).sql(comments=False) == "SELECT COUNT(*) FROM t"
    for untouched in ("SELECT with_dp FROM t", "SELECT COUNT(*) FROM t WITH DIFFERENTIAL_PRIVACY",
                      "WITH x AS (SELECT 1) SELECT * FROM x", "SELECT 'WITH DIFFERENTIAL_PRIVACY'"):
        assert lift_dp_options(untouched) == (untouched, {})
    with pytest.raises(dpsql.ParseError, match="twice"):
        lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon=1, epsilon=2) 1")
    with pytest.raises(dpsql.ParseError):
        lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon=(1)) 1")
    with pytest.raises(dpsql.ParseError):
        lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon=1e999) 1")
    with pytest.raises(dpsql.UnsupportedQueryError):
        lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (kappa=1) 1")
