"""The output check remembers texts that passed, and nothing else (dpsql.output_check).

A text that parsed back into one closed SELECT once does so again (sqlglot is
deterministic), so only that part is remembered, keyed by the text, the dialect and the
tables and names it was checked against. The walk of the tree that wrote the text runs
every time, and a refusal is never remembered.
"""

from __future__ import annotations

import contextlib

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
    with contextlib.suppress(TypeError):  # sqlglot[c], compiled, will not even write it
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


def _final_tree():
    """A tree like dpsql's final ones: CTEs, a window, casts, a guard."""
    return sqlglot.parse_one(
        "WITH __per_user AS (SELECT pid AS __uid, TRY(CAST(age AS DOUBLE) / 2) AS __s0 "
        "FROM pums GROUP BY pid) SELECT SUM(__s0) AS __s0, ROW_NUMBER() OVER "
        "(PARTITION BY __uid ORDER BY HASH(__uid, 7)) AS __r FROM __per_user", read="duckdb")


def test_a_consumed_tree_writes_the_text_of_its_copy():
    """checked_sql(consume=True) writes the tree itself: the same text as its copy."""
    expected = _final_tree().sql(dialect="duckdb")
    assert checked_sql(_final_tree(), "duckdb", tables={"pums"}, consume=True) == expected
    output_check._PASSED.clear()
    assert checked_sql(_final_tree(), "duckdb", tables={"pums"}) == expected


def test_a_consumed_tree_is_walked_before_it_is_written(monkeypatch):
    """The walk sees the tree as built (the write may change it), and still refuses a
    payload that would break the text open, whether or not that text passed before."""
    bad = _final_tree()
    bad.find(exp.DataType).replace(exp.DataType(
        this=exp.DataType.Type.USERDEFINED, kind="DOUBLE) / 2) AS __s0 FROM pums; SELECT (1"))
    seen = []
    closed = output_check._closed
    monkeypatch.setattr(output_check, "_closed",
                        lambda tree, *a: seen.append(tree.sql(dialect="duckdb"))
                        or closed(tree, *a))
    before = bad.sql(dialect="duckdb")
    with pytest.raises(UnsupportedQueryError, match="type USERDEFINED"):
        checked_sql(bad, "duckdb", tables={"pums"}, consume=True)
    assert seen == [before]
    assert not output_check._PASSED


def test_a_tree_with_a_parent_is_written_from_a_copy():
    """A node inside another is not consumed: it is written (and left) as it stands."""
    root = _final_tree()
    inner = root.find(exp.CTE).this
    text = inner.sql(dialect="duckdb")
    assert checked_sql(inner, "duckdb", tables={"pums"}, consume=True) == text
    assert inner.parent is not None and inner.sql(dialect="duckdb") == text


def _expression_classes():
    seen, todo = set(), [getattr(exp, "Expr", exp.Expression)]  # sqlglot 30: Expr
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            todo.extend(cls.__subclasses__())
    return seen


def test_the_walks_class_table_answers_as_isinstance_does():
    """_closed reads each node's class tests from a table: for every sqlglot class, the
    table says what the isinstance chain it replaces says (first matching branch)."""
    order = (exp.DataType, exp.Var, exp.Anonymous, exp.Identifier, exp.Table, exp.Literal)
    classes = _expression_classes()
    assert len(classes) > 500
    for cls in classes:
        statement, subquery, select, slot, branch = output_check._kind(cls)
        assert statement == issubclass(cls, output_check._STATEMENTS), cls
        assert subquery == issubclass(cls, exp.Subquery), cls
        assert select == issubclass(cls, exp.Select), cls
        assert slot == output_check._PART_SLOTS.get(cls), cls
        first = next((i + 1 for i, base in enumerate(order) if issubclass(cls, base)), 0)
        assert branch == first, cls
