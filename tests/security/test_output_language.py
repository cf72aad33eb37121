"""Issue 13: analyst text can never become SQL — the closed output language.

Three layers, each tested on its own:

* the validator refuses payloads that sqlglot writes back as raw text (type names it
  does not know, bare keywords, odd names, huge literals, ``${`` for Spark);
* the output check (:mod:`dpsql.output_check`) refuses, before the charge, any final SQL
  that holds such a payload or does not parse back to one SELECT equal to itself —
  shown by making a rewrite pass inject one on purpose;
* hypothesis: queries carrying arbitrary text in every payload position are refused or
  answered, and every SQL text that reaches DuckDB parses back to one SELECT.
"""

from __future__ import annotations

import dataclasses

import duckdb
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import dpsql
import dpsql.rewrite as rewrite_module
from dpsql.datasets import pums_catalog
from dpsql.errors import ParseError, UnsupportedQueryError
from dpsql.output_check import check_sql
from tests.support import BACKEND_MATRIX as BACKENDS
from tests.support import backend_of
from tests.support import database_for as _database

SECOND = "; SELECT name FROM secret_people --"

INJECTIONS = [
    # issue 13, finding 1: a user-defined type name carrying a second statement
    'SELECT COUNT(*) FROM pums WHERE CAST(age AS "UINT8) IS NULL) GROUP BY pid) SELECT 1 '
    'AS __s0; SELECT CAST(pid AS INT) FROM pums WHERE pid = 42 --") IS NULL',
    'SELECT SUM(CAST(age AS "INT) AS __s0 FROM pums; SELECT 1 --")) FROM pums',
    # a bare keyword carrying text
    'SELECT COUNT(*) FROM pums WHERE EXTRACT("year FROM age); SELECT 1 --" FROM age) > 1',
    'SELECT COUNT(*) FROM pums WHERE EXTRACT("EPOCH" FROM age) > 1',
    # a date part as a string, which Spark's writer prints as a bare keyword (review)
    "SELECT COUNT(*) FROM pums WHERE EXTRACT('YEAR FROM age) * 0 + (SELECT MAX(age) FROM "
    "pums WHERE pid = 17) - 60 + EXTRACT(YEAR' FROM age) > 1",
    "SELECT COUNT(*) FROM pums WHERE date_trunc('month) FROM pums; SELECT (1', age) IS NULL",
    "SELECT COUNT(*) FROM pums WHERE age > age + INTERVAL (age) DAY",
    # backslashes: PostgreSQL without standard_conforming_strings reads them as escapes
    "SELECT COUNT(*) FROM pums WHERE CAST(age AS VARCHAR) = 'x\\' OR 'a' = ' OR 1 = 1 --'",
    # nested and parameterised types
    "SELECT COUNT(*) FROM pums GROUP BY CAST(age AS INT[])",
    "SELECT COUNT(*) FROM pums GROUP BY CAST(age AS STRUCT(a INT))",
    "SELECT COUNT(*) FROM pums GROUP BY CAST(age AS MAP(INT, INT))",
    "SELECT COUNT(*) FROM pums GROUP BY TRY_CAST(age AS VARIANT)",
    "SELECT COUNT(*) FROM pums GROUP BY CAST(age AS DECIMAL(99999, 2))",
    "SELECT COUNT(*) FROM pums GROUP BY CAST(age AS BLOB)",
    # odd names where a plain one is needed
    'SELECT COUNT(*) FROM pums AS "p; SELECT 1" ',
    'SELECT COUNT(*) FROM (SELECT pid, COUNT(*) AS "n""; --" FROM pums GROUP BY pid) t',
    # Spark's variable substitution and control characters
    "SELECT COUNT(*) FROM pums WHERE CAST(age AS VARCHAR) = '${env:HOME}'",
    "SELECT COUNT(*) FROM pums WHERE CAST(age AS VARCHAR) = '${system:user.name}'",
    "SELECT COUNT(*) FROM pums WHERE CAST(age AS VARCHAR) = 'a\x1b[2Kb'",
    # a literal larger than the limit
    "SELECT COUNT(*) FROM pums WHERE CAST(age AS VARCHAR) = '" + "0" * 5000 + "'",
]


@pytest.mark.parametrize("sql", INJECTIONS, ids=range(len(INJECTIONS)))
def test_payloads_sqlglot_writes_verbatim_are_refused_free(refusal_conn, sec, sql):
    out = sec.outcome(refusal_conn, sql, 1.0, 1e-6)
    assert out.kind == sec.REFUSED, out.describe()
    # sqlglot's compiled build (sqlglot[c]) cannot even parse some of them (a ParseError)
    assert isinstance(out.value, UnsupportedQueryError | ParseError), out.describe()
    assert refusal_conn.budget.spent == (0.0, 0.0)
    assert "secret" not in str(out.value).lower()


def _inject(node_factory):
    """A rewrite pass that hides a payload in the final tree, as a buggy pass might."""
    def inject(expression, plan):
        target = expression.find(exp.Column)
        target.replace(node_factory(target.copy()))
        return expression
    return inject


PAYLOADS = {
    "user-defined type": lambda c: exp.Cast(this=c, to=exp.DataType(
        this=exp.DataType.Type.USERDEFINED, kind="INT); SELECT 1; SELECT (1")),
    "bare keyword": lambda c: exp.Extract(this=exp.var("YEAR FROM pid); SELECT 1; --"),
                                          expression=c),
    "anonymous function": lambda c: exp.Anonymous(this="read_csv", expressions=[c]),
    "date part as text": lambda c: exp.Extract(
        this=exp.Literal.string("YEAR FROM pid) * 0 + (SELECT 1) + EXTRACT(YEAR"),
        expression=c),
    "scalar subquery": lambda c: exp.Add(this=c, expression=exp.select("1").from_(
        "pums").subquery()),
    "odd name": lambda c: exp.column("x; SELECT 1", quoted=False),
    "table function": lambda c: exp.In(this=c, query=exp.select("x").from_(
        "information_schema.tables")),
}


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_output_check_refuses_an_injected_payload_before_the_charge(security_db, monkeypatch,
                                                                    kind):
    conn = dpsql.connect(security_db, catalog=dpsql.datasets.pums_catalog(),
                         ledger=":memory:")
    rules = (*rewrite_module.RULES, _inject(PAYLOADS[kind]))
    monkeypatch.setattr(rewrite_module, "RULES", rules)
    monkeypatch.setattr("dpsql.engine.rewrite",
                        lambda plan, **kw: rewrite_module.rewrite(plan, rules, **kw))
    with pytest.raises(UnsupportedQueryError, match="output check"):
        conn.execute("SELECT COUNT(*) FROM pums WHERE age > 30", epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
    with pytest.raises(UnsupportedQueryError, match="output check"):
        conn.explain("SELECT COUNT(*) FROM pums WHERE age > 30", epsilon=1.0)
    conn.close()


def test_output_check_without_the_injection_answers(security_db):
    """The twin of the test above: the same query, no injection, is answered."""
    conn = dpsql.connect(security_db, catalog=dpsql.datasets.pums_catalog(),
                         ledger=":memory:")
    assert conn.execute("SELECT COUNT(*) FROM pums WHERE age > 30", epsilon=1.0).rows
    conn.close()


@pytest.mark.parametrize("sql", [
    "SELECT 1 AS x; SELECT 2 AS y",
    "SELECT 1 AS x FROM pums; DROP TABLE pums",
    "SELECT 'a'' ; SELECT 1 --' AS x FROM pums",
])
def test_check_sql_refuses_text_that_is_not_the_tree(sql):
    tree = sqlglot.parse_one("SELECT 1 AS x FROM pums")
    with pytest.raises(UnsupportedQueryError):
        check_sql(sql, tree, "duckdb", tables={"pums"})


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "sqlite", "spark"])
def test_string_literals_round_trip_in_every_dialect(dialect):
    """sqlglot's escaping of quotes and backslashes keeps a literal one literal."""
    for text in ["a'b", "a\\", "a\\'; SELECT 1 --", "''", "\\\\'", "a\nb", "%_\\%"]:
        tree = exp.select(exp.alias_(exp.Literal.string(text), "x")).from_("pums")
        sql = tree.sql(dialect=dialect)
        check_sql(sql, tree, dialect, tables={"pums"})
        assert sqlglot.parse_one(sql, read=dialect).find(exp.Literal).this == text


def test_check_sql_refuses_tables_outside_the_catalog():
    tree = sqlglot.parse_one("SELECT COUNT(*) AS x FROM secret_people")
    with pytest.raises(UnsupportedQueryError, match="not in the catalog"):
        check_sql(tree.sql(), tree, "duckdb", tables={"pums"})


# -- hypothesis: arbitrary text in every payload position --------------------------------

_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                max_size=40)
_TEMPLATES = [
    'SELECT COUNT(*) FROM pums WHERE CAST(age AS "{}") IS NULL',
    "SELECT COUNT(*) FROM pums WHERE TRY_CAST(age AS {}) IS NULL",
    'SELECT COUNT(*) FROM pums WHERE EXTRACT("{}" FROM age) > 1',
    "SELECT COUNT(*) FROM pums WHERE EXTRACT({} FROM age) > 1",
    "SELECT COUNT(*) FROM pums WHERE CAST(age AS VARCHAR) = '{}'",
    'SELECT COUNT(*) AS "{}" FROM pums',
    'SELECT COUNT(*) FROM pums AS "{}"',
    'SELECT SUM(n) FROM (SELECT pid, COUNT(*) AS "{}" FROM pums GROUP BY pid) t',
    "SELECT COUNT(*) FROM pums WHERE date_trunc('{}', age) IS NULL",
    "SELECT COUNT(*) FROM pums WHERE age > INTERVAL '1' {}",
    "SELECT COUNT(*) FROM pums GROUP BY sex HAVING COUNT(*) > '{}'",
]


@pytest.fixture(scope="module")
def recording_conn(security_db):
    """A rich connection whose DuckDB calls are recorded (SQL text as sent)."""
    import dataclasses

    catalog = dataclasses.replace(dpsql.datasets.pums_catalog(), budget=None)
    conn = dpsql.connect(security_db, catalog=catalog, budget=(1e9, 0.9), ledger=":memory:")
    yield conn
    conn.close()


@pytest.mark.slow  # fuzzing (hypothesis)
@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(template=st.sampled_from(_TEMPLATES), text=_TEXT)
def test_fuzz_payload_positions(recording_conn, monkeypatch, template, text):
    sent: list[str] = []
    real_to_sql = type(backend_of(recording_conn)).to_sql

    def spy(self, expression):
        sql = real_to_sql(self, expression)
        sent.append(sql)
        return sql

    monkeypatch.setattr(type(backend_of(recording_conn)), "to_sql", spy)
    sql = template.format(text.replace("\x00", ""))
    try:
        recording_conn.execute(sql, epsilon=1.0, delta=1e-6)
    except dpsql.DpsqlError as exc:
        assert not exc.charged or isinstance(exc, dpsql.BackendError), exc
    for final in sent:  # every text that went to DuckDB: one SELECT, itself again
        statements = duckdb.connect().extract_statements(final)
        assert len(statements) == 1
        parsed = sqlglot.parse(final, read="duckdb")
        assert len(parsed) == 1 and isinstance(parsed[0], exp.Select)
        assert parsed[0].sql(dialect="duckdb") == final


# -- every backend: the output check runs in each backend's own dialect --------------------

def _pums_catalog():
    return dataclasses.replace(pums_catalog(), budget=None)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("payload", ["user-defined type", "date part as text", "odd name",
                                     "scalar subquery"])
def test_every_backend_refuses_an_injected_payload_free(kind, payload, backends,
                                                        monkeypatch):
    conn = dpsql.connect(_database(kind, backends), catalog=_pums_catalog(),
                         budget=(10.0, 1e-5), ledger=":memory:")
    try:
        rules = (*rewrite_module.RULES, _inject(PAYLOADS[payload]))
        monkeypatch.setattr("dpsql.engine.rewrite",
                            lambda plan, **kw: rewrite_module.rewrite(plan, rules, **kw))
        # the output check refuses it, or the backend's dialect layer before it: free
        with pytest.raises((UnsupportedQueryError, dpsql.BackendError)) as info:
            conn.execute("SELECT sex, COUNT(*) FROM pums WHERE age > 30 GROUP BY sex",
                         epsilon=1.0)
        assert info.value.charged is False
        assert conn.budget.spent == (0.0, 0.0)
        monkeypatch.undo()
        res = conn.execute("SELECT sex, COUNT(*) FROM pums WHERE age > 30 GROUP BY sex",
                           epsilon=1.0)
        assert [r[0] for r in res.rows] == [0, 1]
    finally:
        conn.close()
