"""Pass (the last): refuse what no engine's guard can catch.

Whether a query fails after the charge is an oracle on the data (``CASE WHEN pid = 5
AND age > 50 THEN <fails> END``), so nothing the backend runs may fail on some rows.
The guards themselves are placed by the backend, on the exact tree it runs, typed by
the engine (:mod:`dpsql.backends.total`: every operation off the backend's allow-list
of total operations is guarded or refused, and the result is proved total). This pass
refuses, before the charge and for every engine alike, the constructs whose failure no
guard catches or whose meaning differs between engines:

* a LIKE pattern that is not a constant string, holds a backslash (an escape character
  on PostgreSQL and Spark, not on DuckDB and SQLite) or is longer than
  :data:`MAX_PATTERN` characters (SQLite fails long patterns), and LIKE ... ESCAPE;
* a REPLACE that can lengthen strings (running out of memory is not an error a guard
  catches, and nested REPLACEs grow geometrically);
* an ``IN (SELECT ...)`` that is not a bare ``column IN (SELECT column FROM public ...)``
  conjunct of WHERE.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.errors import UnsupportedQueryError
from dpsql.tree_walk import nodes

#: Longest LIKE pattern and REPLACE search string (SQLite refuses patterns past 50,000
#: bytes; a short bound keeps matching cheap everywhere).
MAX_PATTERN = 1_000


def guard_errors(expression: exp.Select, plan: Plan) -> exp.Select:
    """Refuses (before the charge) what no guard of any engine can catch.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite.statistics_query import statistics_query
    >>> plan = _demo_plan("SELECT COUNT(*) FROM pums WHERE CAST(educ AS VARCHAR) LIKE educ")
    >>> try:
    ...     guard_errors(statistics_query(plan), plan)
    ... except UnsupportedQueryError as exc:
    ...     print(str(exc)[:41])
    LIKE pattern must be a constant string: a
    """
    for node in nodes(expression):  # breadth-first, as walk()
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            _check_in_subquery(node)
        reason = unguardable(node)
        if reason is not None:
            raise refuse(reason)
    return expression


def like_pattern_problem(pattern: exp.Expression) -> str | None:
    """Why a LIKE pattern could fail or mean different things on some engine, or None.

    >>> like_pattern_problem(exp.Literal.string("a%"))
    >>> like_pattern_problem(exp.Literal.string("a\\\\"))[:34]
    'LIKE pattern contains a backslash,'
    """
    while isinstance(pattern, exp.Paren):
        pattern = pattern.this
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        return ("LIKE pattern must be a constant string: a pattern computed from the data "
                "can fail on some values (a misplaced escape character)")
    if "\\" in pattern.this:
        return ("LIKE pattern contains a backslash, which some engines read as an escape "
                "character (and fail on when misplaced)")
    if len(pattern.this) > MAX_PATTERN:
        return f"LIKE pattern is longer than {MAX_PATTERN} characters"
    return None


def unguardable(node: exp.Expression) -> str | None:
    """Why ``node`` can fail in a way no guard catches on some engine, or None."""
    if isinstance(node, exp.Like | exp.ILike):
        return like_pattern_problem(node.expression)
    if isinstance(node, exp.Escape):
        return "LIKE ... ESCAPE is not supported"
    if isinstance(node, exp.Replace):
        search, repl = node.expression, node.args.get("replacement")
        if not (isinstance(search, exp.Literal) and search.is_string
                and isinstance(repl, exp.Literal) and repl.is_string):
            return "REPLACE needs constant search and replacement strings"
        if not search.this or len(repl.this) > len(search.this) \
                or len(search.this) > MAX_PATTERN:
            return ("REPLACE must not lengthen strings: the replacement may be no longer "
                    "than the (non-empty) search string, so that no value can grow "
                    "without bound")
    return None


def refuse(reason: str) -> UnsupportedQueryError:
    """The error of a construct no engine can run without a data-dependent failure."""
    return UnsupportedQueryError(
        f"{reason}; dpsql refuses it because whether the query fails would depend on the "
        "data")


def _check_in_subquery(node: exp.In) -> None:
    """An analyst's ``IN (SELECT ...)`` must be ``column IN (SELECT column FROM public ...)``,
    a conjunct of WHERE: then the set is public data and the test cannot fail per row
    (dpsql's own ``__uid IN (SELECT __uid FROM __over)`` reads its own CTE)."""
    query = node.args["query"]
    inner = query.this if isinstance(query, exp.Subquery) else query
    from_ = inner.args.get("from_") if isinstance(inner, exp.Select) else None
    if from_ is not None and isinstance(from_.this, exp.Table) \
            and from_.this.name.startswith("__"):
        return
    conjunct: exp.Expression = node
    while isinstance(conjunct.parent, exp.Paren | exp.And):  # (a AND b) AND c too
        conjunct = conjunct.parent
    if isinstance(node.this, exp.Column) and isinstance(conjunct.parent, exp.Where):
        return
    raise UnsupportedQueryError(
        "a subquery in WHERE must be a bare `column IN (SELECT column FROM public_table ...)` "
        "condition, joined to the rest with AND")


__all__ = ["guard_errors", "like_pattern_problem", "unguardable"]
