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
    try:
        interval = _Bounds(columns).visit(expression)
    except (OverflowError, ZeroDivisionError, ValueError) as exc:
        raise UnboundedExpressionError(
            f"cannot bound {expression.sql(dialect='duckdb')[:80]!r}: its interval "
            f"arithmetic fails ({type(exc).__name__})") from None
    if not (math.isfinite(interval.lower) and math.isfinite(interval.upper)):
        raise UnboundedExpressionError(
            f"the bounds of {expression.sql(dialect='duckdb')[:80]!r} are not finite numbers")
    if interval.magnitude > MAX_MAGNITUDE:
        raise UnboundedExpressionError(
            f"the bounds of {expression.sql(dialect='duckdb')[:80]!r} reach "
            f"{interval.magnitude:.3g}; dpsql aggregates values of magnitude up to "
            f"{MAX_MAGNITUDE:g} (noise scales and sums beyond it overflow)")
    if interval.integer and interval.magnitude > MAX_WHOLE:
        # beyond 2**53 the engines' doubles no longer hold every whole number, and an
        # integer statistic's sums could overflow 64-bit partials: treat it as real
        interval = Interval(interval.lower, interval.upper, False)
    return interval


#: Largest magnitude of an aggregated value's bounds (far beyond any real data).
MAX_MAGNITUDE = 1e250
#: Whole numbers larger than this are not treated as integers (2**53: exact in doubles).
MAX_WHOLE = 2.0**53
#: Most decimals ROUND may keep (or drop, negative) in an aggregated expression.
MAX_ROUND_DIGITS = 300


#: Parts of a date or time with a fixed range (EXTRACT's names); YEAR comes from the
#: date column's catalog bounds instead.
DATE_PARTS = {"MONTH": (1, 12), "DAY": (1, 31), "QUARTER": (1, 4), "DOW": (0, 6),
              "DAYOFWEEK": (0, 6), "ISODOW": (1, 7), "DOY": (1, 366),
              "DAYOFYEAR": (1, 366), "WEEK": (1, 53), "HOUR": (0, 23),
              "MINUTE": (0, 59), "SECOND": (0, 59)}
#: Functions that are EXTRACT of one part.
PART_FUNCTIONS = {exp.Year: "YEAR", exp.Month: "MONTH", exp.Day: "DAY",
                  exp.DayOfMonth: "DAY", exp.Quarter: "QUARTER", exp.DayOfWeek: "DOW",
                  exp.DayOfYear: "DOY", exp.Week: "WEEK", exp.WeekOfYear: "WEEK"}


class _Bounds:
    def __init__(self, columns):
        self.lookup = columns if callable(columns) else (lambda c: columns[c.name.lower()])

    def visit(self, e: exp.Expression) -> Interval:
        if type(e) in PART_FUNCTIONS:  # YEAR(d), MONTH(d), ...: EXTRACT's rules
            return self._part(PART_FUNCTIONS[type(e)], e.this)
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
        if col.type in ("date", "timestamp", "string"):
            raise UnboundedExpressionError(
                f"column {col.name!r} is a {col.type} and cannot be aggregated as a number"
                + ("; aggregate a part of it such as YEAR(...) or MONTH(...)"
                   if col.type != "string" else ""))
        if not col.bounded:
            raise UnboundedExpressionError(
                f"column {col.name!r} has no lower/upper bounds in the catalog, so it "
                "cannot be aggregated (the data owner must declare them)"
            )
        return Interval(col.lower, col.upper, col.type == "int")

    def _Literal(self, e: exp.Literal) -> Interval:
        if e.is_string:
            raise UnboundedExpressionError(f"string literal {e.sql()} cannot be aggregated")
        # whole-numbered only when written as an integer: a DECIMAL literal (2.0) or a
        # float (1e3) makes the engines compute in DECIMAL or DOUBLE
        whole = e.this.isdigit()
        value = int(e.this) if whole else float(e.this)
        return Interval(value, value, whole)

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
        negative = isinstance(digits, exp.Neg)
        if negative:
            digits = digits.this
        if digits is None:
            places = 0
        elif isinstance(digits, exp.Literal) and digits.is_int:
            places = -int(digits.this) if negative else int(digits.this)
        else:
            raise UnboundedExpressionError(
                "ROUND inside an aggregate needs a whole-number literal for its decimals"
            )
        if abs(places) > MAX_ROUND_DIGITS:
            raise UnboundedExpressionError(
                f"ROUND to {places} decimals: at most {MAX_ROUND_DIGITS} (either way) can "
                "be bounded")
        if places > 15:  # finer than a double's precision: the value barely moves
            half = 0.5 * 10.0**-places
            return Interval(a.lower - half, a.upper + half, a.integer)
        step = 10.0**-places
        return Interval(
            math.floor(a.lower / step) * step if places else math.floor(a.lower),
            math.ceil(a.upper / step) * step if places else math.ceil(a.upper),
            # whole only when rounded to whole units, or already whole (a DOUBLE
            # rounded to -1 places is whole; one rounded to 2 places need not be)
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

    # Monotone functions map the bounds; a value outside their domain (sqrt of a
    # negative) is an error that guard_errors turns into NULL, which aggregates ignore.

    def _Sqrt(self, e: exp.Sqrt) -> Interval:
        a = self.visit(e.this)
        return Interval(math.sqrt(max(a.lower, 0)), math.sqrt(max(a.upper, 0)), False)

    def _Ln(self, e: exp.Ln) -> Interval:
        a = self.visit(e.this)
        if a.upper <= 0:
            raise UnboundedExpressionError(
                f"cannot bound {e.sql(dialect='duckdb')!r}: its argument is never positive")
        if a.lower <= 0:
            raise UnboundedExpressionError(
                f"cannot bound {e.sql(dialect='duckdb')!r}: LN tends to -infinity near 0 "
                f"and the argument's bounds [{a.lower}, {a.upper}] reach 0")
        return Interval(math.log(a.lower), math.log(a.upper), False)

    def _Exp(self, e: exp.Exp) -> Interval:
        a = self.visit(e.this)
        try:
            return Interval(math.exp(a.lower), math.exp(a.upper), False)
        except OverflowError:
            raise UnboundedExpressionError(
                f"the bounds of {e.sql(dialect='duckdb')!r} overflow") from None

    def _IntDiv(self, e: exp.IntDiv) -> Interval:
        # x // c for a literal c: between floor and ceiling of x / c (engines round
        # integer division either way)
        a, c = self.visit(e.this), self._literal_divisor(e)
        q = sorted((a.lower / c, a.upper / c))
        if not (a.integer and self._divisor_is_whole(e)):
            # // of a DECIMAL or DOUBLE divides exactly (DuckDB, SQLite): not whole
            return Interval(q[0], q[1], False)
        return Interval(math.floor(q[0]), math.ceil(q[1]), True)

    def _Mod(self, e: exp.Mod) -> Interval:
        # |x % c| < |c|, with the sign of x (DuckDB, PostgreSQL, SQLite, Spark)
        a, c = self.visit(e.this), abs(self._literal_divisor(e))
        whole = a.integer and self._divisor_is_whole(e)
        span = c - 1 if whole else c
        return Interval(max(a.lower, -span) if a.lower < 0 else 0,
                        min(a.upper, span) if a.upper > 0 else 0, whole)

    def _divisor_is_whole(self, e: exp.Expression) -> bool:
        d = e.expression
        if isinstance(d, exp.Nullif):
            d = d.this
        return self.visit(d).integer

    def _literal_divisor(self, e: exp.Expression) -> float:
        d = e.expression
        if isinstance(d, exp.Nullif):  # guard_errors' NULLIF(c, 0)
            d = d.this
        value = self.visit(d)
        if value.lower != value.upper or value.lower == 0:
            raise UnboundedExpressionError(
                f"cannot bound {e.sql(dialect='duckdb')!r}: the divisor must be a non-zero "
                "number literal")
        return value.lower

    # Parts of dates: fixed ranges, and the year from the column's date bounds.

    def _part(self, part: str, arg: exp.Expression) -> Interval:
        if part in DATE_PARTS:
            return Interval(*DATE_PARTS[part], True)
        if part == "YEAR":
            low, high = self._dates(arg)
            return Interval(low.year, high.year, True)
        raise UnboundedExpressionError(f"cannot bound EXTRACT({part} FROM ...)")

    def _dates(self, e: exp.Expression):
        if isinstance(e, exp.TimestampTrunc | exp.DateTrunc | exp.Paren | exp.Cast
                      | exp.TryCast):
            return self._dates(e.this)
        if isinstance(e, exp.Column):
            col = self.lookup(e)
            if col.type == "date" and col.bounded:
                return col.lower, col.upper
        raise UnboundedExpressionError(
            f"cannot bound the year of {e.sql(dialect='duckdb')!r}: give the date column "
            "lower and upper dates in the catalog")

    def _Extract(self, e: exp.Extract) -> Interval:
        return self._part(e.this.name.upper(), e.expression)
