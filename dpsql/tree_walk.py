"""A tree's nodes in sqlglot's breadth-first order, as one list.

``Expr.walk()`` (breadth-first) yields the same nodes in the same order, through a
generator per node (``iter_expressions``); the checks that read every node of dpsql's
final trees (the output check, the last rewrite pass) take them as a list instead, in
about half the time. Order and membership are sqlglot's exactly: the root, then each
node's children in the order of its ``args``, a list's items in order, what is not a
node skipped (:func:`nodes` mirrors ``Expr.bfs`` and ``Expr.iter_expressions``). The
tree must not change while the list is read (the callers only read it).

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT a + 1 AS b FROM t WHERE c IN (1, 2)")
>>> nodes(tree) == list(tree.walk())
True
"""

from __future__ import annotations

from sqlglot import exp

#: What ``iter_expressions`` counts as a node (sqlglot 30's base class; Expression
#: before it)
_Expr = getattr(exp, "Expr", exp.Expression)


def nodes(tree: exp.Expression) -> list[exp.Expression]:
    """Every node of ``tree``, breadth-first, as ``list(tree.walk())``."""
    out = [tree]
    append = out.append
    i = 0
    while i < len(out):
        for vs in out[i].args.values():
            if isinstance(vs, list):
                for v in vs:
                    if isinstance(v, _Expr):
                        append(v)
            elif isinstance(vs, _Expr):
                append(vs)
        i += 1
    return out
