"""Habits analysts bring from DuckDB, pandas and polars, answered (issue 22, item 6).

* ``Result`` answers DuckDB's method names: ``fetchall()``, ``fetchdf()``, ``pl()``,
  ``fetch_arrow_table()``; its table forms (``df``, ``arrow``, ``pl()``) carry the same
  error columns, and ``error_columns=False`` drops them.
* ``conn.execute(sql, params, epsilon=...)`` binds ``?`` as the DB-API does; ε is
  keyword-only, and a number where the parameters go is refused, naming ``epsilon=``,
  before anything is charged. ``explain`` and ``epsilon_for`` take the same shape.
"""

from __future__ import annotations

import decimal
import inspect

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import dpsql
from dpsql import dbapi

QUERY = "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex"
COLUMNS = ["sex", "n", "n_error", "avg_income", "avg_income_error", "confidence"]


@pytest.fixture
def result(connect):
    return connect().execute(QUERY, epsilon=1.0)


def test_every_table_form_has_the_error_columns_of_df(result):
    assert list(result.df.columns) == COLUMNS
    assert result.arrow.column_names == COLUMNS
    assert result.fetch_arrow_table().column_names == COLUMNS
    frame = result.pl()
    assert isinstance(frame, pl.DataFrame) and frame.columns == COLUMNS
    pd.testing.assert_frame_equal(result.fetchdf(), result.df)
    # the same numbers in every form: pandas, polars and Arrow read one error table
    columns, rows = result.error_table()
    assert [tuple(r) for r in frame.iter_rows()] == rows
    assert [tuple(r.values()) for r in result.arrow.to_pylist()] == rows
    assert [row[2] for row in rows] == [acc[1] for acc in result.accuracy]
    meta = result.arrow.schema.metadata
    assert float(meta[b"dpsql.epsilon"]) == 1.0 and float(meta[b"dpsql.confidence"]) == 0.95


def test_error_columns_false_gives_the_output_columns_only(result):
    assert result.fetch_arrow_table(error_columns=False).column_names == ["sex", "n",
                                                                         "avg_income"]
    assert result.pl(error_columns=False).columns == ["sex", "n", "avg_income"]
    values = result.fetchdf(error_columns=False)
    assert list(values.columns) == ["sex", "n", "avg_income"]
    assert [tuple(r) for r in values.itertuples(index=False)] == result.rows


def test_fetchall_is_the_rows(result):
    assert result.fetchall() == result.rows
    assert result.fetchall() is not result.rows  # a copy: the Result stays as it was


def test_df_is_a_plain_dataframe_property(result):
    """``df`` stays a property holding a plain pandas DataFrame (see Result.df: a
    callable subclass would break assert_frame_equal and exact-type checks)."""
    assert type(result.df) is pd.DataFrame
    with pytest.raises(TypeError, match="not callable"):
        result.df()
    assert type(result.fetchdf()) is pd.DataFrame


def test_arrow_keeps_types_and_nulls(connect):
    res = connect().execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", epsilon=1.0)
    table = res.arrow
    assert table.schema.field("n").type == pa.int64()
    assert table.schema.field("n_error").type == pa.int64()
    assert table.schema.field("confidence").type == pa.float64()
    probe = connect().execute("SELECT * FROM pums WHERE 1 = 0")  # no error bars at all
    assert probe.arrow.num_rows == 0 and "confidence" not in probe.arrow.column_names


def test_execute_binds_parameters(connect):
    conn = connect()
    res = conn.execute("SELECT sex, COUNT(*) AS n FROM pums WHERE age >= ? GROUP BY sex",
                       [18], epsilon=0.5)
    assert "age >= 18" in res.sql and res.cost == (0.5, 0.0)
    assert conn.budget.spent == (0.5, 0.0)
    # a tuple, a quote inside a value, and BigQuery's clause next to a parameter
    res = conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25) COUNT(*) "
                       "FROM pums WHERE CAST(sex AS VARCHAR) <> ?", ("it's",))
    assert "'it''s'" in res.sql and res.cost == (0.25, 0.0)


@pytest.mark.parametrize("params, error", [
    ([], dpsql.ParameterError),                      # one '?', no value
    ([1, 2], dpsql.ParameterError),                  # one '?', two values
    ({"age": 1}, dpsql.ParameterError),              # qmark only
    ("18", dpsql.ParameterError),                    # a string is not a sequence of values
    ([object()], dpsql.ParameterError),              # no literal for it
    ([float("nan")], dpsql.ParameterError),          # not a finite number
])
def test_wrong_parameters_are_refused_before_the_charge(connect, params, error):
    conn = connect()
    with pytest.raises(error):
        conn.execute("SELECT COUNT(*) FROM pums WHERE age > ?", params, epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)


def test_the_dbapi_and_the_python_api_bind_alike(connect):
    """One binder: the DB-API's errors are the same errors under PEP 249 classes."""
    assert dbapi.bind_parameters("SELECT COUNT(*) FROM t WHERE a = ?", ["x"]) == \
        dpsql.params.bind_parameters("SELECT COUNT(*) FROM t WHERE a = ?", ["x"])
    with pytest.raises(dbapi.DataError) as info:
        dbapi.bind_parameters("SELECT COUNT(*) FROM t WHERE a > ?", [float("inf")])
    assert isinstance(info.value, dpsql.ParameterError)


@pytest.mark.parametrize("number", [30, 0.5, decimal.Decimal("1"), np.float64(2.0), True])
def test_a_number_where_the_parameters_go_is_refused(connect, number):
    conn = connect()
    with pytest.raises(dpsql.PrivacyParameterError, match=r"epsilon=") as info:
        conn.execute("SELECT COUNT(*) FROM pums", number)
    assert "nothing was charged" in str(info.value)
    assert conn.budget.spent == (0.0, 0.0)
    with pytest.raises(dpsql.PrivacyParameterError, match=r"conn\.explain\(sql, epsilon="):
        conn.explain("SELECT COUNT(*) FROM pums", number)
    with pytest.raises(dpsql.PrivacyParameterError,
                       match=r"conn\.epsilon_for\(sql, half_width="):
        conn.epsilon_for("SELECT COUNT(*) FROM pums", number)


def test_execute_explain_and_epsilon_for_take_the_same_shape(connect):
    for method, keyword in (("execute", "epsilon"), ("explain", "epsilon"),
                            ("epsilon_for", "half_width")):
        params = inspect.signature(getattr(dpsql.Connection, method)).parameters
        assert list(params)[:3] == ["self", "sql", "params"], method
        assert params[keyword].kind is inspect.Parameter.KEYWORD_ONLY, method
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[3:])
    conn = connect()
    bound = "SELECT COUNT(*) FROM pums WHERE age >= ?"
    literal = "SELECT COUNT(*) FROM pums WHERE age >= 18"
    assert conn.explain(bound, [18], epsilon=1.0).sql == conn.explain(literal, epsilon=1.0).sql
    assert conn.epsilon_for(bound, [18], half_width=10) == conn.epsilon_for(literal,
                                                                           half_width=10)
    with pytest.raises(TypeError):
        conn.execute(literal, None, 1.0)  # ε is keyword-only: never a third positional
    assert conn.budget.spent == (0.0, 0.0)
