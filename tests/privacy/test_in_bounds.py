"""Sums of columns the owner declares ``in_bounds`` lose their clamp only where the data
proves it keeps every value (dpsql.in_bounds), and nothing the analyst sees changes.

The catalog: ``people`` (the user ``pid``, its PRIMARY KEY: one row each) with ``x`` (DOUBLE), ``d``
(DECIMAL) and ``i`` (INTEGER), each declared ``in_bounds`` within [0, 10]. Where every
value lies inside, the clamp is left out. Where one user's value lies outside, the
declaration is false: the clamp must stay, or that user's value reaches the sum whole,
and the tests break then (the sum moves by far more than its bound of 10).
"""

from __future__ import annotations

import math
import re

import duckdb
import pytest

import dpsql
from dpsql import in_bounds
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.catalog import load_catalog
from dpsql.errors import CatalogError, QueryCancelled

USERS = 40


def clamped(sql: str) -> bool:
    """Whether ``sql`` clamps a row's value (not a user's partial sum, ``COALESCE(SUM``,
    nor a value in grid units, ``TRY_CAST(TRY(ROUND``: those clamps stay)."""
    return re.search(r"GREATEST\((?!TRY_CAST\(TRY\(ROUND|COALESCE\(\(?(CAST\()?SUM\()",
                     sql) is not None


def _catalog(**columns) -> dict:
    base = {"pid": {"type": "int"},
            "x": {"type": "float", "lower": 0, "upper": 10, "in_bounds": True},
            "d": {"type": "float", "lower": 0, "upper": 10, "in_bounds": True},
            "i": {"type": "int", "lower": 0, "upper": 10, "in_bounds": True},
            "y": {"type": "float", "lower": 0, "upper": 10},
            "seg": {"type": "string", "values": ["A", "B"]}}
    base.update(columns)
    return {"dataset": "ib", "tables": {"people": {
        "user_key": "pid", "max_groups": 1, "max_rows": 1, "columns": base}}}


def _file(tmp_path, odd=None, name="ib.duckdb", rows_per_user=1):
    """User u holds x = d = i = y = u % 10 + 1 (inside [0, 10]) on each of its rows; with
    ``odd`` (column -> value), user 0's first row holds that value instead."""
    path = tmp_path / name
    con = duckdb.connect(str(path))
    # one row a user: the user key is the PRIMARY KEY, so each row is its user's partial
    key = "PRIMARY KEY" if rows_per_user == 1 else ""
    con.execute(f"CREATE TABLE people (pid INTEGER {key}, x DOUBLE, d DECIMAL(12, 2), "
                "i INTEGER, y DOUBLE, seg VARCHAR)")
    rows = []
    for u in range(USERS):
        for r in range(rows_per_user):
            v = u % 10 + 1
            row = {"x": float(v), "d": v, "i": v, "y": float(v)}
            if odd and u == 0 and r == 0:
                row.update(odd)
            rows.append((u, row["x"], row["d"], row["i"], row["y"], "AB"[u % 2]))
    con.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.close()
    return path


def _answer(database, sql, catalog=None):
    conn = dpsql.connect(database, catalog=catalog or _catalog(), budget=(100, 1e-5),
                         ledger=":memory:")
    try:
        result = conn.execute(sql, epsilon=10.0)
        shown = conn.explain(sql, epsilon=10.0).sql
    finally:
        conn.close()
    return [tuple(r) for r in result.rows], result.sql, shown


def _true_sum():
    return float(sum(u % 10 + 1 for u in range(USERS)))


@pytest.mark.parametrize("column", ["x", "d", "i"])
def test_a_proven_sum_runs_without_the_clamp(tmp_path, no_noise, ran, column):
    rows, sql, shown = _answer(_file(tmp_path), f"SELECT SUM({column}) AS s FROM people")
    assert not clamped(ran[-1])
    assert rows == [(pytest.approx(_true_sum()),)]
    # what the analyst sees is the SQL with the clamp, the same as explain's
    assert clamped(sql) and sql == shown


@pytest.mark.parametrize("column, value", [
    ("x", 1000.0), ("x", -5.0), ("d", 1000), ("i", 1000), ("i", -3),
])
def test_a_false_declaration_keeps_the_clamp(tmp_path, no_noise, ran, column, value):
    # user 0 holds the value outside: without the clamp it reaches the sum whole
    rows, _, _ = _answer(_file(tmp_path, odd={column: value}),
                         f"SELECT SUM({column}) AS s FROM people")
    assert clamped(ran[-1])
    inside = min(max(value, 0), 10)
    assert rows == [(pytest.approx(_true_sum() - 1 + inside),)]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_value_keeps_the_clamp(tmp_path, no_noise, ran, value):
    rows, _, _ = _answer(_file(tmp_path, odd={"x": value}), "SELECT SUM(x) AS s FROM people")
    assert clamped(ran[-1])
    assert math.isfinite(rows[0][0])


def test_a_null_in_a_column_not_declared_nullable_keeps_the_clamp(tmp_path, no_noise, ran):
    # the clamp turns a NULL into its lower bound: that is a change, so it stays
    _answer(_file(tmp_path, odd={"x": None}), "SELECT SUM(x) AS s FROM people")
    assert clamped(ran[-1])


def test_a_null_in_a_nullable_column_is_inside(tmp_path, no_noise, ran):
    x = {"type": "float", "lower": 0, "upper": 10, "in_bounds": True, "nullable": True}
    rows, _, _ = _answer(_file(tmp_path, odd={"x": None}), "SELECT AVG(x) AS a FROM people",
                         catalog=_catalog(x=x))
    assert not clamped(ran[-1])
    assert rows == [(pytest.approx((_true_sum() - 1) / (USERS - 1)),)]


@pytest.mark.parametrize("sql", [
    "SELECT AVG(x) AS a FROM people",
    "SELECT AVG(d) AS a FROM people",
    "SELECT seg, SUM(x) AS s, AVG(d) AS a, SUM(i) AS t FROM people GROUP BY seg",
    "SELECT SUM(d) AS s FROM people WHERE i > 3",
    "SELECT SUM(p.x) AS s FROM people AS p",
])
def test_the_answer_is_the_same_with_the_clamp(tmp_path, no_noise, ran, sql):
    # the same data, the same query: declared (no clamp) and undeclared (clamp)
    path = _file(tmp_path)
    undeclared = _catalog(**{c: {"type": t, "lower": 0, "upper": 10}
                             for c, t in (("x", "float"), ("d", "float"), ("i", "int"))})
    with_clamp, _, _ = _answer(path, sql, catalog=undeclared)
    assert clamped(ran[-1])
    without, _, _ = _answer(path, sql)
    assert not clamped(ran[-1])
    assert [tuple(pytest.approx(v) if isinstance(v, float) else v for v in r)
            for r in without] == with_clamp


def test_a_user_with_several_rows_is_still_bounded(tmp_path, no_noise, ran):
    # max_rows 1, three rows a user: the rows' clamp goes, the user's partial clamp stays
    path = _file(tmp_path, rows_per_user=3)
    sql = "SELECT SUM(x) AS s FROM people"
    _answer(path, sql, catalog=_catalog(x={"type": "float", "lower": 0, "upper": 10}))
    assert clamped(ran[-1])
    rows, _, _ = _answer(path, sql)
    assert "__per_user" in ran[-1] and not clamped(ran[-1]) \
        and "LEAST(GREATEST(COALESCE(" in ran[-1]
    # each user's partial of 3 rows is clamped to max_rows (1) row's bounds [0, 10]
    assert rows == [(pytest.approx(sum(min(3 * (u % 10 + 1), 10) for u in range(USERS))),)]


@pytest.mark.parametrize("sql", [
    "SELECT SUM(y) AS s FROM people",  # y is not declared
    "SELECT SUM(x + y) AS s FROM people",  # an expression, even of declared columns:
    "SELECT SUM(x * i) AS s FROM people",  # only a bare column's clamp goes
    "SELECT SUM(ABS(x)) AS s FROM people",
    "SELECT SUM(CASE WHEN i > 5 THEN x ELSE 0 END) AS s FROM people",
    "SELECT SUM(a.x + b.x) AS s FROM people AS a JOIN people AS b ON a.pid = b.pid",
    "SELECT SUM(s) AS s FROM (SELECT pid, SUM(x) AS s FROM people GROUP BY pid) AS p",
])
def test_what_the_proof_does_not_cover_keeps_the_clamp(tmp_path, no_noise, ran, sql):
    _answer(_file(tmp_path), sql)
    assert clamped(ran[-1])


def test_the_analyst_sees_the_same_either_way(tmp_path, no_noise):
    def texts(odd, name):
        _, sql, shown = _answer(_file(tmp_path, odd, name), "SELECT SUM(x) AS s FROM people")
        return sql, shown

    assert texts(None, "a.duckdb") == texts({"x": 1000.0}, "b.duckdb")


def test_a_view_keeps_the_clamp(tmp_path, no_noise, ran):
    path = _file(tmp_path)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE people RENAME TO people_t")
    con.execute("CREATE VIEW people AS SELECT * FROM people_t")
    con.close()
    _answer(path, "SELECT SUM(x) AS s FROM people")
    assert clamped(ran[-1])


def test_a_callers_connection_keeps_the_clamp(tmp_path, no_noise, ran):
    con = duckdb.connect(str(_file(tmp_path)))
    _answer(con, "SELECT SUM(x) AS s FROM people")
    con.close()
    assert clamped(ran[-1])


def test_a_failing_check_keeps_the_clamp(tmp_path, no_noise, ran, monkeypatch):
    def fail(self, query):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(DuckDBBackend, "frozen_row", fail)
    rows, _, _ = _answer(_file(tmp_path), "SELECT SUM(x) AS s FROM people")
    assert clamped(ran[-1]) and rows == [(pytest.approx(_true_sum()),)]


def test_a_cancel_during_the_check_stops_the_query_uncharged(tmp_path, monkeypatch):
    def cancel(self, query):
        raise QueryCancelled()

    monkeypatch.setattr(DuckDBBackend, "frozen_row", cancel)
    conn = dpsql.connect(_file(tmp_path), catalog=_catalog(), budget=(100, 1e-5),
                         ledger=":memory:")
    with pytest.raises(QueryCancelled):
        conn.execute("SELECT SUM(x) AS s FROM people", epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
    conn.close()


def test_one_check_per_table_and_connection(tmp_path, no_noise, ran):
    conn = dpsql.connect(_file(tmp_path), catalog=_catalog(), budget=(100, 1e-5),
                         ledger=":memory:")
    try:
        before = len(ran)
        conn.execute("SELECT SUM(x) AS s, SUM(d) AS t, AVG(i) AS a FROM people", epsilon=1.0)
        checks = [s for s in ran[before:] if "COUNT(CASE WHEN" in s]
        assert len(checks) == 1 and checks[0].count("COUNT(CASE WHEN") == 3
        conn.execute("SELECT SUM(x) AS s FROM people WHERE i > 2", epsilon=1.0)
        assert not [s for s in ran[before + 2:] if "COUNT(CASE WHEN" in s]
    finally:
        conn.close()


@pytest.mark.parametrize("sql", [
    "SELECT SUM(CASE WHEN x = 3 THEN NULL ELSE i END) AS s FROM people",
    "SELECT SUM(i) AS s FROM people WHERE x = 3",
    "SELECT AVG(d) AS a FROM people",
])
def test_the_check_counts_the_owners_fact_never_the_analysts(tmp_path, no_noise, ran, sql):
    # attack review: counting the rows on which the analyst's own summand changed under
    # its clamp made the clamp go exactly when no row held x = 3 (CASE ... THEN NULL:
    # the clamp turns NULL into 0), and the query's time told it; the check is now the
    # catalog's bounds of every declared column, whatever the query
    conn = dpsql.connect(_file(tmp_path), catalog=_catalog(), budget=(100, 1e-5),
                         ledger=":memory:")
    try:
        conn.execute(sql, epsilon=1.0)
    finally:
        conn.close()
    checks = [s for s in ran if "COUNT(CASE WHEN" in s]
    # none where no sum is of a bare declared column (the CASE), else the catalog's own
    # (each in its own type: DOUBLE against the float bounds, DECIMAL and INTEGER exactly)
    assert checks in ([], [
        'SELECT COUNT(CASE WHEN COALESCE("x" BETWEEN 0 AND 10, FALSE) THEN NULL ELSE 1 END)'
        ' AS n0, COUNT(CASE WHEN COALESCE("d" >= 0.00 AND "d" <= 10.00, FALSE) THEN NULL '
        'ELSE 1 END) AS n1, COUNT(CASE WHEN COALESCE("i" >= 0 AND "i" <= 10, FALSE) THEN '
        'NULL ELSE 1 END) AS n2 FROM "people"'])


@pytest.mark.parametrize("guess", [3, 11])  # 3 is held by some row, 11 by none
def test_a_predicate_of_the_analyst_never_moves_a_clamp(tmp_path, no_noise, ran, guess):
    _answer(_file(tmp_path), f"SELECT SUM(CASE WHEN x = {guess} THEN NULL ELSE i END) AS s "
                             "FROM people")
    assert clamped(ran[-1])


def test_check_declared_reports_each_column(tmp_path):
    table = load_catalog(_catalog()).table("people")
    backend = DuckDBBackend(_file(tmp_path, odd={"d": 11}))
    assert in_bounds.check_declared(backend, table) == {"x": True, "d": False, "i": True}
    backend.close()


@pytest.mark.parametrize("column, message", [
    ({"type": "float", "in_bounds": True}, "give them"),
    ({"type": "string", "in_bounds": True}, "give them"),
    ({"type": "date", "lower": "2000-01-01", "upper": "2001-01-01", "in_bounds": True},
     "number column"),
    ({"type": "int", "lower": 0, "upper": 1, "in_bounds": "yes"}, "true or false"),
])
def test_the_catalog_refuses_a_bad_declaration(column, message):
    with pytest.raises(CatalogError, match=message):
        load_catalog(_catalog(x=column))


@pytest.mark.parametrize("sqltype, lower, upper, inside, outside", [
    # attack review: compared with DOUBLE literals, a DECIMAL half an ulp past the bound
    # passed, and on the exact DECIMAL path one user then moved the sum by 3 > L∞ 2
    ("DECIMAL(20, 1)", 2**53, 2**53 + 4, 2**53 + 2, 2**53 + 5),
    ("DECIMAL(18, 2)", 0, 1000000000000000.5, 1, "1000000000000000.55"),
    # a literal of more places than the column's is rounded to them by DuckDB (0.5 -> 1)
    ("DECIMAL(38, 0)", 0, 0.5, 0, 1),
])
def test_a_decimal_is_compared_with_its_bounds_exactly(tmp_path, no_noise, ran, sqltype,
                                                       lower, upper, inside, outside):
    path = tmp_path / "dec.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE people (pid INTEGER PRIMARY KEY, v {sqltype})")
    con.executemany(f"INSERT INTO people VALUES (?, CAST(? AS {sqltype}))",
                    [(u, str(inside)) for u in range(20)] + [(20, str(outside))])
    con.close()
    catalog = {"dataset": "ib", "tables": {"people": {
        "user_key": "pid", "max_groups": 1, "max_rows": 1, "columns": {
            "pid": {"type": "int"},
            "v": {"type": "float", "lower": lower, "upper": upper, "in_bounds": True}}}}}
    _answer(path, "SELECT AVG(v) AS a FROM people", catalog=catalog)
    assert clamped(ran[-1])
    backend = DuckDBBackend(path)
    assert in_bounds.check_declared(backend, load_catalog(catalog).table("people")) == \
        {"v": False}
    backend.close()
