"""Scalar functions on group keys, in filters and inside aggregates, with their rules.

Keys: a public domain derived from the catalog and the query alone
(:mod:`dpsql.analyze.domains`) releases every key with no δ; otherwise keys go through
partition selection. Aggregated values: bounds by the rules of
:mod:`dpsql.analyze.bounds`, enforced by the clamp.
"""

from __future__ import annotations

import dataclasses
import datetime

import duckdb
import pytest
from sqlglot import parse_one

import dpsql
from dpsql.analyze.bounds import bounds
from dpsql.analyze.domains import domain
from dpsql.catalog import Column, load_catalog

D0, D1 = datetime.date(2020, 1, 1), datetime.date(2021, 12, 31)
COLS = {
    "d": Column("d", "date", D0, D1),
    "age": Column("age", "int", 0, 100),
    "state": Column("state", "string", values=("ca", "ny", "tx")),
    "code": Column("code", "int", values=(1, 2, 3), nullable=True),
    "name": Column("name", "string"),
    "income": Column("income", "float", 0, 500000),
}


def _domain(sql):
    return domain(parse_one(sql, read="duckdb"), lambda c: COLS[c.name])


@pytest.mark.parametrize(("sql", "expected"), [
    ("state", ("ca", "ny", "tx")),
    ("UPPER(state)", ("CA", "NY", "TX")),
    ("COALESCE(code, 0)", (0, 1, 2, 3)),
    ("code", (1, 2, 3, None)),
    ("CASE WHEN age < 30 THEN 'young' ELSE 'old' END", ("old", "young")),
    ("CASE WHEN age < 30 THEN 1 WHEN age < 60 THEN 2 END", (1, 2, None)),
    ("MONTH(d)", tuple(range(1, 13))),
    ("EXTRACT(quarter FROM d)", (1, 2, 3, 4)),
    ("YEAR(d)", (2020, 2021)),
    ("LEFT(state, 1) || '-'", ("c-", "n-", "t-")),
])
def test_public_domains_of_key_expressions(sql, expected):
    assert _domain(sql) == expected


def test_date_trunc_over_bounded_dates_lists_every_month():
    months = _domain("date_trunc('month', d)")
    assert len(months) == 24 and str(months[0]).startswith("2020-01-01")


@pytest.mark.parametrize("sql", [
    "income", "income // 1000", "name", "UPPER(name)",
    "CASE WHEN age < 30 THEN name ELSE 'old' END",  # a result read from the data
    "CASE WHEN age < 30 THEN 1 ELSE 'x' END",  # mixed types: the engine decides
])
def test_keys_without_a_public_domain_come_from_the_data(sql):
    assert _domain(sql) is None


@pytest.mark.parametrize(("sql", "lower", "upper"), [
    ("age // 10", 0, 10), ("age % 7", 0, 6), ("(age - 50) % 7", -6, 6),
    ("SQRT(age)", 0, 10), ("YEAR(d)", 2020, 2021), ("EXTRACT(month FROM d)", 1, 12),
    ("DAYOFWEEK(d)", 0, 6), ("EXP(age / 100)", 1, 2.718281828459045),
])
def test_bound_rules(sql, lower, upper):
    b = bounds(parse_one(sql, read="duckdb"), COLS)
    assert (b.lower, b.upper) == pytest.approx((lower, upper))


@pytest.mark.parametrize(("sql", "message"), [
    ("LN(age)", "reach 0"), ("age % age", "non-zero number literal"),
    ("YEAR(CAST(name AS DATE))", "lower and upper dates"), ("d", "is a date"),
    ("EXP(age * 10)", "overflow"),
])
def test_unbounded_functions_are_refused(sql, message):
    with pytest.raises(dpsql.UnboundedExpressionError, match=message):
        bounds(parse_one(sql, read="duckdb"), COLS)


def test_catalog_date_bounds():
    doc = {"tables": {"t": {"user_key": "u", "columns": {
        "u": "int", "d": {"type": "date", "lower": "2020-01-01", "upper": D1}}}}}
    col = load_catalog(doc).table("t").column("d")
    assert (col.lower, col.upper) == (D0, D1)
    doc["tables"]["t"]["columns"]["d"]["lower"] = "2023-01-01"
    with pytest.raises(dpsql.CatalogError, match="later than upper"):
        load_catalog(doc)
    doc["tables"]["t"]["columns"]["d"]["lower"] = "January"
    with pytest.raises(dpsql.CatalogError, match="expected a date"):
        load_catalog(doc)


def test_a_case_key_with_literal_results_needs_no_delta(connect, pums_db):
    c, con = connect(budget=(1e9, 0.5)), pums_db
    sql = ("SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'old' "
           "END AS grp, COUNT(*) AS n FROM pums_dup GROUP BY grp ORDER BY grp")
    res = c.execute(sql, epsilon=1e4, max_rows=4)  # delta = 0: no partition selection
    assert res.cost[1] == 0.0
    assert [(g, round(n)) for g, n in res.rows] == con.execute(sql).fetchall()


def test_string_functions_on_keys_and_filters(connect, pums_db):
    c, con = connect(budget=(1e9, 0.5)), pums_db
    sql = ("SELECT UPPER(CONCAT('r', CAST(race AS VARCHAR))) AS r, COUNT(*) AS n FROM pums "
           "WHERE LENGTH(CAST(income AS VARCHAR)) > 3 AND TRIM(' x ') = 'x' "
           "GROUP BY r ORDER BY r")
    res = c.execute(sql, epsilon=1e4)  # race has a public domain, so its image is one too
    assert res.cost[1] == 0.0
    assert [(r, round(n)) for r, n in res.rows] == con.execute(sql).fetchall()


def test_tpch_date_keys_are_public(tmp_path):
    pytest.importorskip("pyarrow")
    from dpsql.datasets import catalog_path, load_tpch

    path = tmp_path / "tpch.duckdb"
    try:
        load_tpch(path, 0.01)
    except Exception as exc:  # tpchgen-cli absent
        pytest.skip(f"TPC-H data cannot be generated here: {exc}")
    catalog = dataclasses.replace(load_catalog(catalog_path("tpch")), budget=(1e9, 0.5))
    c = dpsql.connect(path, catalog=catalog, ledger=":memory:")
    sql = ("SELECT date_trunc('year', o_orderdate) AS y, EXTRACT(quarter FROM o_orderdate) "
           "AS q, COUNT(*) AS n, SUM(YEAR(o_orderdate) - 1990) AS s FROM orders "
           "GROUP BY y, q ORDER BY y, q")
    res = c.execute(sql, epsilon=1e5, max_rows=1000, max_groups=28, alpha=1e-6)
    c.close()
    assert res.cost[1] == 0.0 and len(res.rows) == 7 * 4  # every (year, quarter) in bounds
    plain = duckdb.connect(str(path), read_only=True).execute(sql).fetchall()
    got = {(str(y)[:4], q): (row, acc) for row, acc in zip(res.rows, res.accuracy,
                                                              strict=True) for y, q in [row[:2]]}
    for y, q, n, s in plain:  # bounds do not bind: within the error bars of the noise
        (_, _, dn, ds), (_, _, hn, hs) = got[(str(y)[:4], q)]
        assert abs(dn - n) <= hn and abs(ds - s) <= hs
