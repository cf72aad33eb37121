"""A missing CASE branch has no type, at every call (dpsql.backends.total.operands).

Types are keyed by ``id``; a node built anew for the missing branch at each call took
the ``id`` (and so the type) of a freed typed node now and then, so the guard placement
and the totality check could judge one CASE differently (a fuzzer query refused by the
check after the placement had left the CASE unguarded).
"""

from __future__ import annotations

from sqlglot import exp, parse_one

from dpsql.backends import total


def test_a_missing_case_branch_never_takes_a_freed_nodes_type():
    case = parse_one("SELECT CASE WHEN x > 1 THEN 1 END").find(exp.Case)
    types = total.Types()
    for _ in range(500):
        for _ in range(4):  # typed nodes freed at once, as a CAST that TRY_CAST replaced
            types.set(exp.Null(), "INTEGER")
        assert types(total.operands(case)[-1]) is None


def test_the_missing_branch_stands_alone():
    case = parse_one("SELECT CASE WHEN x > 1 THEN 1 END").find(exp.Case)
    missing = total.operands(case)[-1]
    assert isinstance(missing, exp.Null) and missing.parent is None
    assert total.operands(case)[-1] is missing
