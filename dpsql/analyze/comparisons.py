"""Comparisons whose two sides cannot have the same type: a mistake, refused for free.

``WHERE sex = 'M'`` over an integer column compares numbers with a text that is no
number. The backends disagree on what that means (DuckDB fails on the cast, which the
error guards turn into NULL, so no row matches; PostgreSQL refuses the query; SQLite
compares storage classes and matches nothing), and no reading gives the analyst what
they meant. Answering it would charge the budget for a query that can only return
empty groups, so it is refused before the charge, naming the column and both types.

Only what can never match is refused: a number column against a text that is not a
number, a boolean column against a text that is no truth value, a date or timestamp
column against a number or a text without a digit. ``age = '30'`` is left alone: every
backend reads that text as the number 30; so is a text column against a number (DuckDB
and SQLite compare ``'1'`` and ``1`` as equal).
The check reads the catalog and the query only, never data.

>>> from sqlglot import parse_one
>>> from dpsql.analyze.scope import build_scope
>>> from dpsql.datasets import pums_catalog
>>> q = parse_one("SELECT COUNT(*) FROM pums WHERE sex = 'M'")
>>> try:
...     check_comparisons(q, build_scope(q, pums_catalog())[0])
... except AnalysisError as exc:
...     print(str(exc)[:69])
sex = 'M' compares column 'sex' (int) with the text 'M', which is not
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql.analyze.scope import Scope
from dpsql.catalog import Column
from dpsql.errors import AnalysisError, UnknownColumnError, UnknownTableError

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ)
_NUMBER = re.compile(r"\s*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*")
_FLOAT_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan"}
_TRUTH = {"true", "false", "t", "f", "yes", "no", "y", "n", "1", "0", "on", "off"}
_TEMPORAL_WORDS = {"infinity", "-infinity", "epoch"}
_EXAMPLE = {"int": "1", "float": "1.5", "bool": "TRUE", "date": "DATE '2000-01-31'",
            "timestamp": "TIMESTAMP '2000-01-31 12:00:00'", "string": "'text'"}


def check_comparisons(select: exp.Select, scope: Scope) -> None:
    """Refuses a comparison of a catalog column with a literal of a type it never equals.

    ``select`` is the analysed SELECT (columns resolved against ``scope``); the JOIN
    conditions in ``scope`` are checked too. Derived tables and IN subqueries are
    checked by their own analysis.

    Raises:
        AnalysisError: names the comparison, the column, its type and the literal.
    """
    roots = [select] + [s.on for s in scope.sources if s.on is not None and not s.hidden]
    for root in roots:
        for node in root.find_all(*_COMPARISONS, exp.Between, exp.In):
            if node.find_ancestor(exp.Subquery) is not None:
                continue
            if isinstance(node, exp.In):
                if node.args.get("query") is not None:
                    continue
                pairs = [(node.this, e) for e in node.expressions]
            elif isinstance(node, exp.Between):
                pairs = [(node.this, node.args.get("low")), (node.this, node.args.get("high"))]
            else:
                pairs = [(node.this, node.expression), (node.expression, node.this)]
            for side, other in pairs:
                column = _catalog_column(side, scope)
                literal = other.unnest() if other is not None else None
                if column is not None and isinstance(literal, exp.Literal) and not _can_match(
                        column, literal):
                    _refuse(node, side.unnest(), column, literal)


def _catalog_column(side: exp.Expression, scope: Scope) -> Column | None:
    side = side.unnest()
    if not isinstance(side, exp.Column) or side.name.startswith("__"):
        return None
    try:
        return scope.column(side)
    except (KeyError, UnknownTableError, UnknownColumnError):
        return None


def _can_match(column: Column, literal: exp.Literal) -> bool:
    text = literal.this
    if not literal.is_string:  # a number: a text column may hold its digits
        return column.type not in ("date", "timestamp")
    if column.type in ("int", "float"):
        return bool(_NUMBER.fullmatch(text)) or (
            column.type == "float" and text.strip().lower() in _FLOAT_WORDS)
    if column.type == "bool":
        return text.strip().lower() in _TRUTH
    if column.type in ("date", "timestamp"):
        return any(ch.isdigit() for ch in text) or text.strip().lower() in _TEMPORAL_WORDS
    return True  # a text column against a text


def _refuse(node: exp.Expression, side: exp.Column, column: Column,
            literal: exp.Literal) -> None:
    shown = node.sql(dialect="duckdb")
    shown = shown if len(shown) <= 60 else shown[:60] + "..."
    value = literal.sql(dialect="duckdb")
    value = value if len(value) <= 30 else value[:30] + "..."
    kind = f"the text {value}" if literal.is_string else f"the number {value}"
    what = {"int": "number", "float": "number", "bool": "truth value",
            "date": "date", "timestamp": "timestamp", "string": "text"}[column.type]
    raise AnalysisError(
        f"{shown} compares column {column.name!r} ({column.type}) with {kind}, which is "
        f"not a {what}: it can never be true; compare it with a {what} (e.g. "
        f"{side.sql(dialect='duckdb')} = {_EXAMPLE[column.type]})")
