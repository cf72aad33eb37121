"""The output check remembers texts that passed, and nothing else (dpsql.output_check).

A text that parsed back into one closed SELECT once does so again (sqlglot is
deterministic), so only that part is remembered, keyed by the text, the dialect and the
tables and names it was checked against. The walk of the tree that wrote the text runs
every time, and a refusal is never remembered.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dpsql import output_check
from dpsql.errors import UnsupportedQueryError
from dpsql.output_check import check_sql, checked_sql


@pytest.fixture(autouse=True)
def _fresh_memo():
    output_check._PASSED.clear()
    yield
    output_check._PASSED.clear()


def test_a_text_that_passed_is_not_reparsed(monkeypatch):
    tree = sqlglot.parse_one("SELECT COUNT(*) AS __s0 FROM pums WHERE age > 5")
    sql = checked_sql(tree, "duckdb", tables={"pums"})
    calls = []
    same = output_check._same
    monkeypatch.setattr(output_check, "_same", lambda *a: calls.append(a) or same(*a))
    check_sql(sql, tree, "duckdb", tables={"pums"})
    assert checked_sql(tree.copy(), "duckdb", tables={"pums"}) == sql
    assert calls == []


def test_the_tables_are_part_of_what_is_remembered():
    tree = sqlglot.parse_one("SELECT COUNT(*) AS __s0 FROM pums")
    check_sql(tree.sql(dialect="duckdb"), tree, "duckdb", tables={"pums"})
    with pytest.raises(UnsupportedQueryError, match="not in the catalog"):
        check_sql(tree.sql(dialect="duckdb"), tree, "duckdb", tables={"other"})


def test_the_tree_is_walked_even_when_its_text_passed_before():
    good = sqlglot.parse_one("SELECT 5 AS __s0 FROM pums")
    sql = checked_sql(good, "duckdb", tables={"pums"})
    bad = good.copy()
    bad.find(exp.Literal).set("this", 5)  # not text: the walk refuses it
    assert bad.sql(dialect="duckdb") == sql
    with pytest.raises(UnsupportedQueryError, match="literal that is not text"):
        check_sql(sql, bad, "duckdb", tables={"pums"})
    with pytest.raises(UnsupportedQueryError, match="literal that is not text"):
        checked_sql(bad, "duckdb", tables={"pums"})


def test_a_refusal_is_not_remembered(monkeypatch):
    bad = sqlglot.parse_one("SELECT CAST(age AS INT) AS __s0 FROM pums")
    bad.find(exp.DataType).replace(exp.DataType(
        this=exp.DataType.Type.USERDEFINED, kind="INT) AS __s0 FROM pums; SELECT (1"))
    for _ in range(2):
        with pytest.raises(UnsupportedQueryError):
            check_sql(bad.sql(dialect="duckdb"), bad, "duckdb", tables={"pums"})
    assert not output_check._PASSED


def test_a_text_that_is_not_the_trees_is_refused_even_if_it_passed():
    tree = sqlglot.parse_one("SELECT COUNT(*) AS __s0 FROM pums")
    other = sqlglot.parse_one("SELECT COUNT(*) AS __s1 FROM pums")
    check_sql(other.sql(dialect="duckdb"), other, "duckdb", tables={"pums"})
    with pytest.raises(UnsupportedQueryError, match="not the tree's"):
        check_sql(other.sql(dialect="duckdb"), tree, "duckdb", tables={"pums"})
