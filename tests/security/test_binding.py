"""``?`` parameters are bound as literals: the bound text means what DuckDB's own binding means.

:func:`dpsql.params.bind_parameters` splices the text sqlglot writes for each value's
literal into the analyst's text at the ``?`` token (it used to regenerate the whole
query through a subclass of sqlglot's dialect, which sqlglot's compiled build refuses).
These tests hold the splice to two facts, for any value of every supported type in
every position an operand can take: the bound text evaluates on DuckDB to exactly what
DuckDB's own prepared statement gives for the same parameters, and no value can become
anything but one literal (a name, an operator, a comment or a second statement).
"""

from __future__ import annotations

import datetime
import decimal
import math

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsql.errors import ParameterError
from dpsql.params import bind_parameters

# Each template has one or two '?' operands, in contexts where a spliced literal could
# bind differently than the placeholder did (unary minus, '^', '||', casts, IN lists,
# a '-' just before the '?', no spaces around it).
NUMERIC = [
    "SELECT ? AS v",
    "SELECT typeof(?) AS v",
    "SELECT ? + ? AS v",
    "SELECT atan2(?, -1) AS v",
    "SELECT 1-? AS v",
    "SELECT 1 - -? AS v",
    "SELECT ?*2 AS v",
    "SELECT 2.0^? AS v",
    "SELECT ?^2 AS v",
    "SELECT (?) AS v",
    "SELECT -? AS v",
    "SELECT ?+?AS v",
    "SELECT CAST(? AS DOUBLE) AS v",
    "SELECT 3 IN (?, ?) AS v",
    "SELECT ? BETWEEN -1 AND ? AS v",
    "SELECT [?, 1][1] AS v",
]
TEXT = [
    "SELECT ? AS v",
    "SELECT ?||'x' AS v",
    "SELECT 'a' = ? AS v",
    "SELECT length(?) AS v",
    "SELECT ? LIKE 'a%' AS v",
    "SELECT 'x'||?||? AS v",
]

finite = st.floats(allow_nan=False, allow_infinity=False)
numbers = st.one_of(st.integers(-(2**62), 2**62), finite,
                    st.decimals(allow_nan=False, allow_infinity=False, places=4,
                                min_value=-(10**12), max_value=10**12),
                    st.decimals(allow_nan=False, allow_infinity=False),  # exponents
                    st.booleans(), st.none())
texts = st.text(alphabet=st.sampled_from(list("ab?'\"\\;-/*$:%_ \n\t\u00e9\u4e2d0x")), max_size=12)


def _same(bound, expected):
    if isinstance(expected, float) and isinstance(bound, float):
        return bound == expected and math.copysign(1, bound) == math.copysign(1, expected)
    return bound == expected and type(bound) is type(expected)


def _check(db, template, values):
    try:
        expected = db.execute(template, values).fetchone()[0]
    except duckdb.Error:
        # DuckDB's own binding refuses it (e.g. an overflow): the bound text must fail
        # too (on the engine, not by reading as something else), or be refused by dpsql
        expected = duckdb.Error
    bound = bind_parameters(template, values)  # every supported value binds
    try:
        got = db.execute(bound).fetchone()[0]
    except duckdb.Error:
        got = duckdb.Error
    if expected is duckdb.Error or got is duckdb.Error:
        # types can differ (a literal binds as DECIMAL or INTEGER where DuckDB binds a
        # Python int as BIGINT): only an agreement on failing is required
        return
    assert _same(got, expected), (template, values, bound, got, expected)


@pytest.fixture(scope="module")
def db():
    con = duckdb.connect()
    yield con
    con.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(template=st.sampled_from(NUMERIC), a=numbers, b=numbers)
def test_numbers_bind_as_duckdb_binds_them(db, template, a, b):
    _check(db, template, [a, b][:template.count("?")])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(template=st.sampled_from(TEXT), a=texts, b=texts)
def test_strings_bind_as_duckdb_binds_them(db, template, a, b):
    _check(db, template, [a, b][:template.count("?")])


@pytest.mark.parametrize("value", [
    datetime.date(2020, 1, 2), datetime.datetime(2020, 1, 2, 3, 4, 5),
    datetime.time(23, 59, 1), datetime.date(1, 1, 1),
    datetime.datetime(2020, 1, 2, 3, 4, 5, 123456),
    datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    datetime.time(1, 2, 3, 4), datetime.time(1, 2, tzinfo=datetime.UTC),
])
def test_dates_bind_as_duckdb_binds_them(db, value):
    for template in ("SELECT ? AS v", "SELECT (?) AS v", "SELECT [?][1] AS v",
                     "SELECT typeof(?) AS v"):
        _check(db, template, [value])


@pytest.mark.parametrize(("template", "values"), [
    # attack review: a float bound as a DECIMAL literal, -0.0 losing its sign, a
    # Decimal with an exponent bound as a DOUBLE
    ("SELECT ? + ? = 0.3 AS v", [0.1, 0.2]),
    ("SELECT atan2(?, -1) AS v", [-0.0]),
    ("SELECT ? - 123456789012345678900 AS v", [decimal.Decimal("12345678901234567891E+1")]),
    ("SELECT ? > 0.0000001 AS v", [decimal.Decimal("1.00000000000000000001E-7")]),
    ("SELECT typeof(?) AS v", [decimal.Decimal("1E+40")]),
    ("SELECT typeof(?) AS v", [decimal.Decimal("-0.00")]),
])
def test_values_keep_duckdbs_meaning(db, template, values):
    _check(db, template, values)


@pytest.mark.parametrize("sql", [
    "SELECT SUM(pums.?) AS s FROM pums",     # a column named by the value
    "SELECT SUM(main.pums.?) AS s FROM pums",
    "SELECT COUNT(*) FROM pums GROUP BY ?",  # a position
    "SELECT sex, COUNT(*) FROM pums GROUP BY sex ORDER BY ? DESC",
])
def test_a_value_cannot_become_a_name_or_a_position(sql):
    with pytest.raises(ParameterError, match="only stand for a value"):
        bind_parameters(sql, ["income"] if "pums.?" in sql else [1])


@pytest.mark.parametrize(("sql", "values", "expected"), [
    # the analyst's text is kept; only the '?' tokens change
    ("SELECT COUNT(*) FROM t WHERE a = ? AND b=?", ["it's", 3],
     "SELECT COUNT(*) FROM t WHERE a = 'it''s' AND b=3"),
    # a '-' before the '?' cannot join a negative literal into a '--' comment
    ("SELECT COUNT(*) FROM t WHERE b=-?", [-3], "SELECT COUNT(*) FROM t WHERE b=-(-3)"),
    # '?' in a string, a quoted name or a comment is not a placeholder
    ("SELECT COUNT(*) FROM t WHERE a = '?' AND \"?\" = ? -- ?", [1],
     "SELECT COUNT(*) FROM t WHERE a = '?' AND \"?\" = 1 -- ?"),
    # PERCENTILE_CONT ... WITHIN GROUP keeps the standard spelling dpsql reads
    ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY x) FROM t WHERE a > ?", [1],
     "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY x) FROM t WHERE a > 1"),
])
def test_the_bound_text_is_the_analysts_text_with_literals(sql, values, expected):
    assert bind_parameters(sql, values) == expected


@pytest.mark.parametrize("value", [
    "'; DROP TABLE t; --", "' OR 1=1 --", "\\'", "?", "$1", ":x", "*/", "/*", "\x00",
])
def test_a_string_value_stays_one_literal(value):
    bound = bind_parameters("SELECT COUNT(*) FROM t WHERE a = ?", [value])
    db = duckdb.connect()
    assert db.execute(bound.replace("COUNT(*) FROM t WHERE a = ", "")).fetchone()[0] == value


def test_the_shape_check_refuses_a_literal_that_reads_back_as_more(monkeypatch):
    # break the splice on purpose: a value written without quoting must be caught by
    # the read-back, not passed on
    import dpsql.params as params

    monkeypatch.setattr(params, "_literal", lambda value, position: value)
    with pytest.raises(ParameterError, match="does not read back as a literal"):
        bind_parameters("SELECT COUNT(*) FROM t WHERE a = ?", ["1 OR b = 2"])
    with pytest.raises(ParameterError, match="does not read back as a literal"):
        bind_parameters("SELECT COUNT(*) FROM t WHERE a = ?", ["1; SELECT 2"])


def test_a_type_error_of_sqlglots_compiled_parser_is_a_parse_error(monkeypatch):
    """sqlglot[c] raises TypeError on some malformed text (a CAST to a quoted type that
    holds SQL, for one); dpsql must refuse it as unparsable, not as an internal error."""
    import dpsql.parse
    from dpsql.errors import ParseError as DpsqlParseError

    def compiled_like(*args, **kwargs):
        raise TypeError("sqlglot.expressions.datatypes.DataType object expected")

    monkeypatch.setattr(dpsql.parse, "parse_statements", compiled_like)
    with pytest.raises(DpsqlParseError, match="cannot parse SQL"):
        dpsql.parse.parse("SELECT SUM(CAST(age AS \"INT) AS x\")) FROM pums")
