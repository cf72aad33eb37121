"""Value bounds of expressions by interval arithmetic over the catalog's column bounds.

Why this is sound: every rule below returns an interval that contains every value the
expression can take when each column lies inside its catalog bounds. The rewriter then
clamps the *whole* aggregated expression to the interval computed here, so the values
that reach an aggregate lie inside it even when the data break the catalog's bounds
(the catalog is never trusted for privacy; the clamp in SQL is what enforces it).

>>> from sqlglot import parse_one
>>> from dpsql.catalog import Column
>>> cols = {"age": Column("age", "int", 0, 100), "sex": Column("sex", "int", values=(0, 1))}
>>> bounds(parse_one("age * 2 - 10"), cols)
Interval(lower=-10, upper=190, integer=True)
>>> bounds(parse_one("CASE WHEN sex = 1 THEN age ELSE 0 END"), cols)
Interval(lower=0, upper=100, integer=True)
>>> bounds(parse_one("age / 4"), cols)
Interval(lower=0.0, upper=25.0, integer=False)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.catalog import Column
from dpsql.errors import UnboundedExpressionError


@dataclass(frozen=True)
class Interval:
    """A closed interval ``[lower, upper]``; ``integer`` when every value is whole."""

    lower: float
    upper: float
    integer: bool = False

    @property
    def magnitude(self) -> float:
        """Largest absolute value in the interval."""
        return max(abs(self.lower), abs(self.upper))

    def hull(self, other: Interval) -> Interval:
        return Interval(
            min(self.lower, other.lower),
            max(self.upper, other.upper),
            self.integer and other.integer,
        )


def bounds(expression: exp.Expression,
           columns: dict[str, Column] | Callable[[exp.Column], Column]) -> Interval:
    """Returns an interval containing every value of ``expression``.

    Args:
        expression: a scalar expression over normalised column references.
        columns: the catalog columns it may reference, by name, or a function that
            finds the catalog column of a (possibly qualified) column reference.

    Raises:
        UnboundedExpressionError: a column without bounds, or a construct (such as a
            division by an expression that may be zero) that has no finite bounds.
    """
    interval = _Bounds(columns).visit(expression)
    if not (math.isfinite(interval.lower) and math.isfinite(interval.upper)):
        raise UnboundedExpressionError(
            f"the bounds of {expression.sql(dialect='duckdb')[:80]!r} are not finite numbers")
    return interval


class _Bounds:
    def __init__(self, columns):
        self.lookup = columns if callable(columns) else (lambda c: columns[c.name.lower()])

    def visit(self, e: exp.Expression) -> Interval:
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise UnboundedExpressionError(
                f"cannot bound {e.sql(dialect='duckdb')!r} inside an aggregate: "
                f"{type(e).__name__.upper()} has no bounds rule"
            )
        return method(e)

    def _Column(self, e: exp.Column) -> Interval:
        col = self.lookup(e)
        if col.type == "bool":
            return Interval(0, 1, True)
        if not col.bounded:
            raise UnboundedExpressionError(
                f"column {col.name!r} has no lower/upper bounds in the catalog, so it "
                "cannot be aggregated (the data owner must declare them)"
            )
        return Interval(col.lower, col.upper, col.type == "int")

    def _Literal(self, e: exp.Literal) -> Interval:
        if e.is_string:
            raise UnboundedExpressionError(f"string literal {e.sql()} cannot be aggregated")
        value = float(e.this) if any(c in e.this for c in ".eE") else int(e.this)
        return Interval(value, value, isinstance(value, int))

    def _Boolean(self, e: exp.Boolean) -> Interval:
        value = 1 if e.this else 0
        return Interval(value, value, True)

    def _Paren(self, e: exp.Paren) -> Interval:
        return self.visit(e.this)

    def _Neg(self, e: exp.Neg) -> Interval:
        a = self.visit(e.this)
        return Interval(-a.upper, -a.lower, a.integer)

    def _Add(self, e: exp.Add) -> Interval:
        a, b = self.visit(e.this), self.visit(e.expression)
        return Interval(a.lower + b.lower, a.upper + b.upper, a.integer and b.integer)

    def _Sub(self, e: exp.Sub) -> Interval:
        a, b = self.visit(e.this), self.visit(e.expression)
        return Interval(a.lower - b.upper, a.upper - b.lower, a.integer and b.integer)

    def _Mul(self, e: exp.Mul) -> Interval:
        a, b = self.visit(e.this), self.visit(e.expression)
        products = [x * y for x in (a.lower, a.upper) for y in (b.lower, b.upper)]
        return Interval(min(products), max(products), a.integer and b.integer)

    def _Div(self, e: exp.Div) -> Interval:
        # The rewriter turns a zero divisor into NULL (ignored by aggregates), but a
        # divisor interval that contains 0 still has unbounded quotients near 0.
        a, b = self.visit(e.this), self.visit(e.expression)
        if b.lower <= 0 <= b.upper:
            raise UnboundedExpressionError(
                f"cannot bound {e.sql(dialect='duckdb')!r}: the divisor's bounds "
                f"[{b.lower}, {b.upper}] include 0"
            )
        quotients = [x / y for x in (a.lower, a.upper) for y in (b.lower, b.upper)]
        return Interval(min(quotients), max(quotients), False)

    def _Abs(self, e: exp.Abs) -> Interval:
        a = self.visit(e.this)
        low = 0 if a.lower <= 0 <= a.upper else min(abs(a.lower), abs(a.upper))
        return Interval(low, a.magnitude, a.integer)

    def _Least(self, e: exp.Least) -> Interval:
        parts = [self.visit(x) for x in [e.this, *e.expressions]]
        return Interval(
            min(p.lower for p in parts), min(p.upper for p in parts), all(p.integer for p in parts)
        )

    def _Greatest(self, e: exp.Greatest) -> Interval:
        parts = [self.visit(x) for x in [e.this, *e.expressions]]
        return Interval(
            max(p.lower for p in parts), max(p.upper for p in parts), all(p.integer for p in parts)
        )

    def _Round(self, e: exp.Round) -> Interval:
        # Rounding moves a value by at most half a unit of the last kept digit.
        a = self.visit(e.this)
        digits = e.args.get("decimals")
        if digits is None:
            places = 0
        elif isinstance(digits, exp.Literal) and digits.is_int:
            places = int(digits.this)
        else:
            raise UnboundedExpressionError(
                "ROUND inside an aggregate needs a whole-number literal for its decimals"
            )
        step = 10.0**-places
        return Interval(
            math.floor(a.lower / step) * step if places else math.floor(a.lower),
            math.ceil(a.upper / step) * step if places else math.ceil(a.upper),
            a.integer or places <= 0,
        )

    def _Floor(self, e: exp.Floor) -> Interval:
        a = self.visit(e.this)
        return Interval(math.floor(a.lower), math.floor(a.upper), True)

    def _Ceil(self, e: exp.Ceil) -> Interval:
        a = self.visit(e.this)
        return Interval(math.ceil(a.lower), math.ceil(a.upper), True)

    def _Sign(self, e: exp.Sign) -> Interval:
        return Interval(-1, 1, True)

    def _Cast(self, e: exp.Cast) -> Interval:
        a = self.visit(e.this)
        to = e.to
        if to.is_type(*exp.DataType.INTEGER_TYPES):
            # Casting to an integer rounds to the nearest whole number.
            return Interval(math.floor(a.lower), math.ceil(a.upper), True)
        if to.is_type(*exp.DataType.REAL_TYPES) or to.is_type(exp.DataType.Type.DECIMAL):
            return Interval(a.lower, a.upper, a.integer)
        raise UnboundedExpressionError(f"cannot bound a cast to {to.sql()} inside an aggregate")

    _TryCast = _Cast

    def _Null(self, e: exp.Null) -> Interval:
        raise UnboundedExpressionError(
            "NULL inside an aggregated expression is only allowed as a CASE or COALESCE "
            "result"
        )

    def _branches(self, values: list[exp.Expression]) -> Interval:
        # NULL branches add no value: aggregates ignore NULL.
        parts = [self.visit(v) for v in values if v is not None and not isinstance(v, exp.Null)]
        if not parts:
            raise UnboundedExpressionError("an aggregated CASE with only NULL results")
        out = parts[0]
        for p in parts[1:]:
            out = out.hull(p)
        return out

    def _Case(self, e: exp.Case) -> Interval:
        return self._branches([i.args.get("true") for i in e.args["ifs"]] + [e.args.get("default")])

    def _If(self, e: exp.If) -> Interval:
        return self._branches([e.args.get("true"), e.args.get("false")])

    def _Coalesce(self, e: exp.Coalesce) -> Interval:
        return self._branches([e.this, *e.expressions])

    def _Nullif(self, e: exp.Nullif) -> Interval:
        return self.visit(e.this)
