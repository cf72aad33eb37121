"""Outer arithmetic over released values, in Python, where it is provably DuckDB's.

TPC-H's q14 releases two noisy sums and answers ``100.00 * SUM(...) / SUM(...)``; the
outer query runs in a fresh scratch DuckDB (:mod:`dpsql.scratch`), which costs a few
milliseconds a query (taking the database, registering the table, binding). Here the
same arithmetic is done in Python, only where the result is DuckDB's bit for bit, and
None is said otherwise, so the caller falls back to the scratch database, whose
semantics are the reference. Provably DuckDB's:

* the expression is ``+``, ``-``, ``*``, ``/``, unary minus and brackets over released
  columns and numeric literals, and every operation has a DOUBLE operand. DuckDB then
  casts the other operand to DOUBLE and computes one IEEE-754 double operation per
  node (one vectorised operator each, so no fused multiply-add), as Python does;
* a DOUBLE operand is a released float (an Arrow ``double``, as DuckDB scans it) or a
  literal with an exponent (``1e2``, DOUBLE in DuckDB); the other operand is a released
  integer or an integer literal below 2**53 in magnitude (exact as a double both ways),
  or a decimal literal (DECIMAL in DuckDB) whose digits are below 2**53 and whose
  scale is at most 22: DuckDB's cast divides the integer of its digits by a power of
  ten, both exact doubles, so it is correctly rounded, as Python's ``float(Decimal)``;
* every value on the way is finite and no divisor is zero (DuckDB's IEEE division
  gives ``inf``, Python raises; NaN and infinities are left to DuckDB). A NULL operand
  (None) is left to DuckDB too.

Operations on two exact operands (``COUNT(*) * 2`` is a BIGINT in DuckDB, ``1 / 3`` a
DOUBLE from two integers) and everything else (functions, CASE, comparisons) are left
to DuckDB. All of it is post-processing of released values: free under DP, and nothing
here can fail (any exception means "not here").

>>> from sqlglot import parse_one
>>> e = parse_one("100.00 * __a0 / __a1", read="duckdb")
>>> evaluate(e, {"__a0": 3.0, "__a1": 12.0})
25.0
>>> evaluate(parse_one("__a0 / __a1", read="duckdb"), {"__a0": 1.0, "__a1": 0.0}) is None
True
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from sqlglot import exp

_EXACT_INT = 2**53
_OPS = {exp.Add: lambda a, b: a + b, exp.Sub: lambda a, b: a - b,
        exp.Mul: lambda a, b: a * b, exp.Div: lambda a, b: a / b}


class _NotHere(Exception):
    """The expression or its values are left to DuckDB."""


def evaluate(expression: exp.Expression, row: dict) -> float | None:
    """The expression's value on one row of released values (``row``: column name to
    value, as the scratch table holds them), or None where DuckDB must compute it."""
    try:
        kind, value = _value(expression, row)
    except (_NotHere, ArithmeticError, TypeError, ValueError, InvalidOperation):
        return None
    return value if kind == "double" else None


def _value(node: exp.Expression, row: dict) -> tuple[str, object]:
    """``("double", float)`` or ``("exact", int | Decimal)`` (a BIGINT or DECIMAL)."""
    if isinstance(node, exp.Paren):
        return _value(node.this, row)
    if isinstance(node, exp.Neg):
        kind, value = _value(node.this, row)
        return kind, -value
    if isinstance(node, exp.Column) and not node.table:
        return _released(row[node.name])
    if isinstance(node, exp.Literal) and not node.is_string:
        return _literal(node.this)
    op = _OPS.get(type(node))
    if op is None:
        raise _NotHere
    (ka, a), (kb, b) = _value(node.this, row), _value(node.expression, row)
    if ka != "double" and kb != "double":
        raise _NotHere  # exact arithmetic (DECIMAL, BIGINT), or DuckDB's own division
    a, b = _double(ka, a), _double(kb, b)
    if isinstance(node, exp.Div) and b == 0:
        raise _NotHere
    out = op(a, b)
    if not math.isfinite(out):
        raise _NotHere
    return "double", out


def _released(value) -> tuple[str, object]:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotHere
        return "double", value
    if isinstance(value, int) and not isinstance(value, bool):
        return "exact", value
    raise _NotHere  # NULL, text, dates, Decimal: DuckDB's


def _literal(text: str) -> tuple[str, object]:
    if "e" in text.lower():
        value = float(text)
        if not math.isfinite(value):
            raise _NotHere
        return "double", value
    return "exact", Decimal(text) if "." in text else int(text)


def _double(kind: str, value) -> float:
    """An operand as the DOUBLE DuckDB casts it to (module docstring), or _NotHere."""
    if kind == "double":
        return value
    if isinstance(value, int):
        if abs(value) >= _EXACT_INT:
            raise _NotHere
        return float(value)
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int) or exponent < -22 or exponent > 0 \
            or int("".join(map(str, digits)) or "0") >= _EXACT_INT:
        raise _NotHere
    return float(value)
