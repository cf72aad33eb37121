"""dpsql.tree_walk.nodes lists exactly what sqlglot's breadth-first walk yields, in
its order (the output check and guard_errors read their trees through it)."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.engine import _demo_plan
from dpsql.rewrite import rewrite
from dpsql.tree_walk import nodes


@pytest.mark.parametrize("sql", [
    "SELECT educ, COUNT(*), AVG(income) FROM pums GROUP BY educ",
    "SELECT COUNT(*) FROM pums WHERE age > 30 AND sex IN (1, 2)",
    "SELECT SUM(CASE WHEN age BETWEEN 18 AND 65 THEN income ELSE 0 END) FROM pums",
    "SELECT sex, COUNT(DISTINCT pid) FROM pums GROUP BY sex HAVING COUNT(*) > 3",
])
def test_nodes_are_the_walk(sql):
    tree = sqlglot.parse_one(sql, read="duckdb")
    assert [id(n) for n in nodes(tree)] == [id(n) for n in tree.walk()]
    final = rewrite(_demo_plan(sql, seed=3))  # dpsql's own trees: CTEs, windows, unions
    assert [id(n) for n in nodes(final)] == [id(n) for n in final.walk()]
