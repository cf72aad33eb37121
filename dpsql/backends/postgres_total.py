"""PostgreSQL's allow-list of total operations (:mod:`dpsql.backends.total`).

PostgreSQL raises on integer and float overflow and underflow, bad casts and domain
errors, so arithmetic is total only in NUMERIC over bounded operands: the forms that
:mod:`dpsql.backends.postgres_dialect` writes for every operation. Each entry below
recognises one of those forms (or an operation that cannot fail at all) on the types
PostgreSQL itself binds (:data:`PG_TYPES`), with its one-line reason; anything else is
refused before the charge.
"""

from __future__ import annotations

import re
from fractions import Fraction

from sqlglot import exp

from dpsql import types as sqltypes
from dpsql.backends import postgres_dialect, total

#: Type OIDs → the names the allow-list speaks (NUMERIC is unbounded: no precision).
PG_TYPES = {16: "BOOLEAN", 20: "BIGINT", 21: "SMALLINT", 23: "INTEGER", 700: "FLOAT",
             701: "DOUBLE", 1700: "NUMERIC", 25: "VARCHAR", 1043: "VARCHAR",
             1042: "VARCHAR", 19: "VARCHAR", 1082: "DATE", 1114: "TIMESTAMP",
             1184: "TIMESTAMPTZ", 1186: "INTERVAL"}
_PG_INTEGERS = ("SMALLINT", "INTEGER", "BIGINT")
_PG_FLOATS = ("FLOAT", "DOUBLE")


def _pg_record_hash(node: exp.Expression, types) -> bool:
    """a hash of a row of values of the base types PostgreSQL hashes: ``HASH_RECORD_
    EXTENDED((v, ...), seed)`` calls each field's extended hash function, and a type
    without one (tsvector, json, money, bit, xml, point, or an owner's domain over one)
    fails at run time on the first row, after the charge (attack review). Every field
    must be a constant or typed by the engine as one of :data:`PG_TYPES`, all hashable.
    """
    if str(node.this).upper() != "HASH_RECORD_EXTENDED" or len(node.expressions) != 2:
        return False
    row = node.expressions[0]
    if not isinstance(row, exp.Tuple):
        return False
    hashable = set(PG_TYPES.values())
    return all(isinstance(v, exp.Literal) or sqltypes.base_name(types(v)) in hashable
               for v in row.expressions)


def _is_numeric(t: str | None) -> bool:
    """PostgreSQL's NUMERIC, unconstrained or with a precision."""
    return t is not None and (t == "NUMERIC" or t.startswith("NUMERIC("))


def _literal_value(node: exp.Expression):
    """The number a (possibly negated, bracketed) numeric literal writes, else None."""
    sign = 1
    while isinstance(node, exp.Paren | exp.Neg):
        if isinstance(node, exp.Neg):
            sign = -sign
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return sign * Fraction(node.this)
        except (ValueError, ZeroDivisionError):
            return None
    return None


def _constant(node: exp.Expression) -> bool:
    """Literals only: PostgreSQL folds immutable operations on constants while planning,
    so their failures (1e400 to float8) do not depend on the data."""
    return _literal_value(node) is not None or isinstance(node, exp.Null | exp.Boolean) or (
        isinstance(node, exp.Literal) and node.is_string)


_FLOAT_RANGES = {"DOUBLE": (Fraction(22250738585072014, 10**324),
                            Fraction(17976931348623157) * Fraction(10) ** 292),
                 "FLOAT": (Fraction(11754944, 10**45), Fraction(34028234) * Fraction(10) ** 31)}
_INT_BITS = {"SMALLINT": 15, "INTEGER": 31, "BIGINT": 63}


def _fits(value: Fraction, target: str) -> bool:
    """Whether a numeric constant converts to ``target`` without error (PostgreSQL does it
    while planning, which dpsql's check does not do: so it is checked here, before the
    charge).

    >>> _fits(Fraction(10) ** 400, "DOUBLE"), _fits(Fraction(1, 10**400), "DOUBLE")
    (False, False)
    >>> _fits(Fraction(2**31 - 1), "INTEGER"), _fits(Fraction(2**31), "INTEGER")
    (True, False)
    """
    if _is_numeric(target) and "(" not in target or target == "VARCHAR":
        return True
    if target in _FLOAT_RANGES:
        low, high = _FLOAT_RANGES[target]
        return value == 0 or low <= abs(value) <= high
    if target in _INT_BITS:
        bits = _INT_BITS[target]
        return -Fraction(2) ** bits - Fraction(1, 2) < value < Fraction(2) ** bits - \
            Fraction(1, 2)
    digits = total.decimal_digits(target.replace("NUMERIC", "DECIMAL"))
    if digits is not None:
        precision, scale = digits
        return abs(value) < Fraction(10) ** (precision - scale) - \
            Fraction(1, 2) * Fraction(10) ** -scale
    return False


def _sentinel_bounds(node: exp.Expression, types: total.Types | None = None
                     ) -> tuple[Fraction, Fraction] | None:
    """(low, high) of ``NULLIF(NULLIF(LEAST(GREATEST(v, low), high), high), low)``: the
    value lies strictly between them (or is NULL) — when the sentinel computes in
    NUMERIC, where the literal bounds are exact (in a float type they are rounded, and
    PostgreSQL may compare the NULLIFs in another float type than the LEAST: a float4
    2147483648 passes the bound 2147483647.5)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if types is not None and not _is_numeric(types(node)):
        return None
    if not (isinstance(node, exp.Nullif) and isinstance(node.this, exp.Nullif)):
        return None
    inner = node.this.this
    if not (isinstance(inner, exp.Least) and len(inner.expressions) == 1
            and isinstance(inner.this, exp.Greatest) and len(inner.this.expressions) == 1):
        return None
    low, high = _literal_value(inner.this.expressions[0]), _literal_value(inner.expressions[0])
    if low is None or high is None or _literal_value(node.expression) != low \
            or _literal_value(node.this.expression) != high:
        return None
    return low, high


def _bounded_numeric(node: exp.Expression, types: total.Types) -> bool:
    """A NUMERIC whose magnitude is at most about 1e324 (or NaN, an infinity, NULL): so
    that a product of two stays far inside NUMERIC's 131072 digits."""
    while isinstance(node, exp.Paren):
        node = node.this
    value = _literal_value(node)
    if value is not None:  # 1e99999 is a short literal: its magnitude counts
        return abs(value) <= Fraction(10) ** 324
    if _constant(node):
        return True
    if isinstance(node, exp.Cast) and types(node.this) in (*_PG_INTEGERS, *_PG_FLOATS):
        return True  # an integer or a float8 as NUMERIC: at most 1.8e308
    if isinstance(node, exp.Cast) and _is_numeric(types(node.this)):
        return _bounded_numeric(node.this, types)
    digits = total.decimal_digits(str(types(node) or "").replace("NUMERIC", "DECIMAL"))
    if digits is not None and digits[0] - digits[1] <= 309:
        return True  # NUMERIC(p, s): fewer than p - s integer digits
    bounds = _sentinel_bounds(node, types)
    if bounds is not None:
        return max(abs(bounds[0]), abs(bounds[1])) <= Fraction(10) ** 309
    if isinstance(node, exp.Sum | exp.Avg | exp.Min | exp.Max):
        # fewer than 2**48 values of at most 1.8e308: at most 5e322
        arg = node.this
        args = arg.expressions if isinstance(arg, exp.Distinct) else [arg]
        return all(_bounded_numeric(a, types) for a in args)
    if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
        return all(_bounded_numeric(a, types) for a in (node.this, *node.expressions))
    if isinstance(node, exp.Nullif):
        return _bounded_numeric(node.this, types)
    if isinstance(node, exp.Case):
        return all(_bounded_numeric(a, types) for a in total.operands(node))
    if isinstance(node, exp.Null):
        return True
    if isinstance(node, exp.Round):
        return _bounded_numeric(node.this, types)
    return False


def _pg_meet(node: exp.Expression, types: total.Types) -> bool:
    """Operands that PostgreSQL compares or chooses between without a cast that can fail:
    of one type; integers of any widths (cross-type operators); integers with NUMERIC or
    floats (exact, or rounding); REAL with DOUBLE. Constants are converted while
    planning. A NUMERIC meeting a float is not: NUMERIC to float8 overflows."""
    values = [types(o) for o in total.operands(node) if not _constant(o)]
    result = types(node) if not isinstance(node, total.COMPARISONS) else None
    if result is not None:
        values.append(result)
    # a numeric constant meeting floats is converted to one while planning, after the
    # charge here: it must fit the narrowest float involved
    floats = [t for t in values if t in _PG_FLOATS]
    target = "FLOAT" if "FLOAT" in floats else "DOUBLE"
    for o in total.operands(node):
        value = _literal_value(o)
        if floats and value is not None and not _fits(value, target):
            return False
    values = [t for t in values if t != total.NULL]
    if any(t is None for t in values):
        return False
    # NUMERICs of different precisions meet in an unconstrained NUMERIC (no coercion)
    kinds = {"NUMERIC" if _is_numeric(t) else t for t in values}
    if len(kinds) <= 1:
        return True
    if isinstance(node, total.COMPARISONS) and kinds <= {"DATE", "TIMESTAMP"}:
        return True  # cross-type operators, which never convert (13+: no overflow)
    if kinds <= set(_PG_INTEGERS):
        return True
    if kinds <= {*_PG_INTEGERS, "NUMERIC"}:
        return True
    return kinds <= {*_PG_INTEGERS, *_PG_FLOATS}


def _pg_arith(node: exp.Expression, types: total.Types) -> bool:
    """NUMERIC + - * of bounded NUMERICs: at most 1e618 in magnitude, far inside
    NUMERIC's range; NaN and infinities propagate (PostgreSQL 14+), never raise."""
    return _is_numeric(types(node)) and all(
        _bounded_numeric(o, types) for o in (node.this, node.expression))


def _nonzero(node: exp.Expression, types: total.Types) -> bool:
    """A divisor that is never 0: a non-zero literal, ``NULLIF(x, 0)``, or one of these
    cast exactly to an unconstrained NUMERIC. No other cast is looked through: a cast
    can round a non-zero value to 0 (``CAST(0.1 AS INT)``, a tiny value to
    ``NUMERIC(p, 0)``)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Cast):
        return types(node) == "NUMERIC" and (
            _is_numeric(types(node.this)) or types(node.this) in (*_PG_INTEGERS, *_PG_FLOATS)
        ) and _nonzero(node.this, types)
    value = _literal_value(node)
    if value is not None:
        return value != 0
    return isinstance(node, exp.Nullif) and _literal_value(node.expression) == 0


def _pg_division(node: exp.Expression, types: total.Types) -> bool:
    """NUMERIC division (and remainder, DIV) by a divisor that is never 0: a bounded
    dividend over any non-zero NUMERIC stays within NUMERIC's range."""
    if isinstance(node, exp.Anonymous):
        if len(node.expressions) != 2:
            return False
        a, b = node.expressions
    else:
        a, b = node.this, node.expression
    return _is_numeric(types(node)) and _bounded_numeric(a, types) and _nonzero(b, types) and \
        (_is_numeric(types(b)) or types(b) in (*_PG_INTEGERS, total.NULL))


def _pg_cast(node: exp.Expression, types: total.Types) -> bool:
    source, target = types(node.this), types(node)
    if source is None or target is None:
        return False
    if source in (target, total.NULL):
        return True
    if _constant(node.this):
        # a constant: PostgreSQL converts it while planning, which dpsql's check does
        # not do, so its conversion is checked here; text to a date or timestamp is not
        # even folded (it depends on DateStyle): the literal must be a valid ISO date
        if target in ("DATE", "TIMESTAMP"):
            return isinstance(node.this, exp.Literal) and _iso_date(node.this.this)
        value = _literal_value(node.this)
        if value is None and isinstance(node.this, exp.Literal) and \
                re.fullmatch(r"-?[0-9]{1,30}(\.[0-9]{1,30})?", node.this.this):
            value = Fraction(node.this.this)
        if value is not None:
            return _fits(value, target)
        return target == "VARCHAR" or isinstance(node.this, exp.Null)
    if target == "VARCHAR":
        return _is_numeric(source) or source in (*_PG_INTEGERS, *_PG_FLOATS, "BOOLEAN",
                                                 "VARCHAR", "DATE", "TIMESTAMP")
    if target in _PG_INTEGERS and source in _PG_INTEGERS:
        return _PG_INTEGERS.index(source) <= _PG_INTEGERS.index(target)
    if target == "NUMERIC":
        if source in (*_PG_INTEGERS, *_PG_FLOATS):
            return True  # exact; NaN and infinities are NUMERIC values (14+)
        if source == "VARCHAR":
            return _pattern_guarded(node)
        return False
    if target == "DOUBLE" and source in (*_PG_INTEGERS, "FLOAT"):
        return True
    target_digits = total.decimal_digits(target.replace("NUMERIC", "DECIMAL"))
    if (_is_numeric(source) or source in _PG_INTEGERS) and target_digits is not None:
        # to NUMERIC(p, s): strictly inside ±(10**(p-s) - 10**-s / 2), it rounds into it
        bounds = _sentinel_bounds(node.this, types)
        precision, scale = target_digits
        limit = Fraction(10) ** (precision - scale) - Fraction(1, 2) * Fraction(10) ** -scale
        return bounds is not None and -limit <= bounds[0] and bounds[1] <= limit
    if _is_numeric(source) and target in (*_PG_INTEGERS, "DOUBLE", "FLOAT"):
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Extract | exp.Year | exp.Month | exp.Day):
            return target == "BIGINT"  # a date part of a date kept to years 1..9999
        bounds = _sentinel_bounds(inner, types)
        if bounds is None:
            return False
        low, high = bounds
        if target in _PG_INTEGERS:
            bits = {"SMALLINT": 15, "INTEGER": 31, "BIGINT": 63}[target]
            # strictly inside (-2**b - 0.5, 2**b - 0.5): rounds into the type
            return low >= -Fraction(2) ** bits - Fraction(1, 2) and \
                high <= Fraction(2) ** bits - Fraction(1, 2)
        # a float: in range, and rounded to few enough decimals not to underflow
        limit, decimals = _FLOAT_TARGETS[target]
        value = inner.this.this.this.this  # NULLIF(NULLIF(LEAST(GREATEST(value, ..
        while isinstance(value, exp.Paren):
            value = value.this
        places = _literal_value(value.args.get("decimals") or exp.Null()) \
            if isinstance(value, exp.Round) else None
        # a float8 as NUMERIC goes back to float8 exactly (no underflow)
        exact = target == "DOUBLE" and isinstance(value, exp.Cast) and \
            types(value.this) == "DOUBLE"
        return -limit <= low and high <= limit and (
            exact or places is not None and places <= decimals)
    return False


#: float targets: (largest magnitude, most decimals a value may keep without underflow)
_FLOAT_TARGETS = {"DOUBLE": (Fraction(17, 10) * Fraction(10) ** 308, 300),
                  "FLOAT": (Fraction(34, 10) * Fraction(10) ** 38, 37)}


def _iso_date(text: str, infinite: bool = True) -> bool:
    """A date or timestamp literal PostgreSQL reads in any DateStyle, years 1..9999.

    >>> _iso_date("1995-09-01"), _iso_date("2024-02-30"), _iso_date("2000-01-01 10:00:00")
    (True, False, True)
    """
    import datetime

    if text.strip().lower() in ("infinity", "-infinity"):
        return infinite  # special values, read the same in every DateStyle
    try:
        if len(text) == 10:
            datetime.date.fromisoformat(text)
        elif re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?",
                          text):
            datetime.datetime.fromisoformat(text)
        else:
            return False
    except ValueError:
        return False
    return True


def _pattern_guarded(node: exp.Cast) -> bool:
    """``CASE WHEN x ~ '<number pattern>' THEN ... CAST(x AS NUMERIC) ...``: the pattern
    admits only text PostgreSQL's numeric input reads (C-locale spaces, digits)."""
    child, parent = node, node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        if isinstance(parent, exp.If) and parent.args.get("true") is child:
            cond = parent.this
            return (isinstance(cond, exp.RegexpLike) and cond.this == node.this
                    and isinstance(cond.expression, exp.Literal)
                    and cond.expression.this in (postgres_dialect.INT_PATTERN,
                                                 postgres_dialect.NUM_PATTERN))
        child, parent = parent, parent.parent
    return False


def _kept_in_years(node: exp.Expression) -> bool:
    """A date or timestamp kept to years 1..9999 (NULL outside): a date sentinel, a
    ``CASE WHEN v BETWEEN <year 1> AND <year 9999> THEN v END``, or a constant."""
    while isinstance(node, exp.Paren):
        node = node.this
    literal = node.this if isinstance(node, exp.Cast) else node
    if isinstance(literal, exp.Null):
        return True
    if isinstance(literal, exp.Literal):
        # a date literal in years 1..9999; not 'infinity', which a difference refuses
        return literal.is_string and _iso_date(literal.this, infinite=False)
    bounds = node if isinstance(node, exp.Nullif) else None
    if bounds is not None and isinstance(node.this, exp.Nullif):
        inner = node.this.this
        return isinstance(inner, exp.Least) and isinstance(inner.this, exp.Greatest) and all(
            isinstance(e, exp.Cast) and _constant(e.this)
            for e in (inner.expressions[0], inner.this.expressions[0]))
    if isinstance(node, exp.Case) and len(node.args.get("ifs") or []) == 1 \
            and node.args.get("default") is None:
        cond = node.args["ifs"][0].this
        return isinstance(cond, exp.Between) and all(
            isinstance(e, exp.Cast) and _constant(e.this)
            for e in (cond.args["low"], cond.args["high"]))
    return False


def _pg_dates(node: exp.Expression, types: total.Types) -> bool:
    """Date arithmetic, differences, parts and truncation of dates kept to years 1..9999,
    with intervals that are constants: the results stay inside PostgreSQL's range."""
    if isinstance(node, exp.Extract):
        return _kept_in_years(node.expression)
    if isinstance(node, exp.Year | exp.Month | exp.Day | exp.TimestampTrunc | exp.DateTrunc):
        return _kept_in_years(node.this)
    sides = [node.this, node.expression]
    temporal = [x for x in sides if types(x) in ("DATE", "TIMESTAMP")]
    if not temporal or not all(_kept_in_years(x) for x in temporal):
        return False
    others = [x for x in sides if x not in temporal]
    return all(isinstance(x, exp.Interval) and total.constant_interval(x, types)
               for x in others)


def _pg_sum(node: exp.Expression, types: total.Types) -> bool:
    """SUM/AVG of NUMERICs or integers: NUMERIC accumulators (see postgres_sums)."""
    arg = node.this
    if isinstance(arg, exp.Distinct):
        return all(_is_numeric(types(e)) or types(e) in (*_PG_INTEGERS, total.NULL)
                   for e in arg.expressions)
    return _is_numeric(types(arg)) or types(arg) in (*_PG_INTEGERS, total.NULL)


def _pg_text(node: exp.Expression, types: total.Types) -> bool:
    return all(types(o) in ("VARCHAR", total.NULL) or _constant(o)
               for o in total.operands(node))


def _pg_like(node: exp.Expression, types: total.Types) -> bool:
    """A constant pattern (no backslash: see ``like_pattern_problem``) over text."""
    pattern = node.expression
    return types(node.this) in ("VARCHAR", total.NULL) and isinstance(pattern, exp.Literal) \
        and pattern.is_string and "\\" not in pattern.this


def _pg_regexp(node: exp.Expression, types: total.Types) -> bool:
    pattern = node.expression
    return types(node.this) in ("VARCHAR", total.NULL) and isinstance(pattern, exp.Literal) \
        and pattern.this in (postgres_dialect.INT_PATTERN, postgres_dialect.NUM_PATTERN)


def _pg_unary(node: exp.Expression, types: total.Types) -> bool:
    """Sign and rounding of a NUMERIC (never overflows: no fixed precision), sign of a
    float (IEEE negation and absolute value do not overflow)."""
    if isinstance(node, exp.Round):
        places = node.args.get("decimals")
        return _is_numeric(types(node.this)) and (
            places is None or (_literal_value(places) is not None
                               and abs(_literal_value(places)) <= 1000))
    return _is_numeric(types(node.this)) or types(node.this) in _PG_FLOATS


def _pg_number(node: exp.Expression, types: total.Types) -> bool:
    """SIGN, FLOOR, CEIL of a number: exact, never out of range."""
    return _is_numeric(types(node.this)) or types(node.this) in (*_PG_INTEGERS, *_PG_FLOATS,
                                                                   total.NULL)


def _pg_domain(node: exp.Expression, types: total.Types) -> bool:
    """``CASE WHEN x >= 0 THEN SQRT(x) END`` (``x > 0`` for LN): the dialect layer's guard
    keeps the argument inside the function's domain."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if not isinstance(parent, exp.If) or parent.args.get("true") is not node and not (
            isinstance(parent.args.get("true"), exp.Paren)
            and parent.args["true"].this is node):
        return False
    cond = parent.this
    test = (exp.GTE, exp.GT) if isinstance(node, exp.Sqrt) else (exp.GT,)
    return isinstance(cond, test) and cond.this == node.this \
        and _literal_value(cond.expression) == 0


def _pg_exp(node: exp.Expression, types: total.Types) -> bool:
    """EXP of a float8 kept to [-700, 709]: no overflow, no underflow."""
    arg = node.this
    while isinstance(arg, exp.Paren):
        arg = arg.this
    bounds = _sentinel_bounds(arg.this, types) if isinstance(arg, exp.Cast) else None
    return bounds is not None and bounds[0] >= -700 and bounds[1] <= 709


def _pg_substring(node: exp.Expression, types: total.Types) -> bool:
    """substr(text, int, int) fails only on a negative length: the length is absent, a
    literal of at least 0, or kept to [0, 2**31 - 1] by the dialect layer."""
    if types(node.this) not in ("VARCHAR", total.NULL):
        return False
    length = node.args.get("length")
    if length is None:
        return True
    value = _literal_value(length)
    if value is not None:
        return value >= 0
    inner = length.this if isinstance(length, exp.Cast) else None
    return isinstance(inner, exp.Least) and isinstance(inner.this, exp.Greatest) and \
        _literal_value(inner.this.expressions[0]) == 0


def _pg_left(node: exp.Expression, types: total.Types) -> bool:
    """left/right(text, int): any integer count (negative counts from the other end)."""
    return types(node.this) in ("VARCHAR", total.NULL) and \
        types(node.expression) in ("SMALLINT", "INTEGER", total.NULL)


_E = total.Entry
#: PostgreSQL's operations that cannot fail, whatever the rows hold (PostgreSQL 14+).
#: PostgreSQL raises on integer and float overflow and underflow, so arithmetic is
#: total only in NUMERIC over bounded operands (the forms the dialect layer writes for
#: every operation, :func:`dpsql.backends.postgres_dialect.postgres_try`); there is no TRY,
#: so what is not on this list after those transforms is refused before the charge.
TOTAL = total.AllowList("PostgreSQL", (
    _E(total.COMPARISONS, _pg_meet,
       "operands of one type, integers with integers, NUMERIC or floats: cross-type "
       "operators or exact conversions; constants converted while planning"),
    _E((exp.Is,), total.is_test, total.is_test.__doc__.split(";")[0]),
    _E((exp.And, exp.Or, exp.Not), total.all_operands("BOOLEAN"), "boolean logic"),
    _E((exp.Case, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif),
       lambda n, t: total.searched_case(n, t) and _pg_meet(n, t),
       "chooses one operand, each of the result's type or converting to it exactly"),
    _E((exp.Add, exp.Sub, exp.Mul), _pg_arith, _pg_arith.__doc__.split(":")[0]),
    _E((exp.Div, exp.Mod), _pg_division, "NUMERIC division by a non-zero divisor"),
    _E((exp.Anonymous,), lambda n, t: str(n.this).upper() == "DIV" and _pg_division(n, t),
       "NUMERIC integer quotient by a non-zero divisor"),
    _E((exp.Neg, exp.Abs, exp.Round), _pg_unary, _pg_unary.__doc__.split(" (")[0]),
    _E((exp.Neg,), total.negated_literal, "a negative constant"),
    _E((exp.Interval,), total.constant_interval, "a constant interval"),
    _E((exp.Cast,), _pg_cast,
       "to text; integers widening, to NUMERIC or float8; float4 to float8; text to "
       "NUMERIC under the number pattern; bounded NUMERICs back to their type"),
    _E((exp.Add, exp.Sub, exp.Extract, exp.Year, exp.Month, exp.Day, exp.TimestampTrunc,
        exp.DateTrunc), _pg_dates,
       "dates kept to years 1..9999 with constant intervals stay in range"),
    _E((exp.Lower, exp.Upper, exp.Length, exp.Concat, exp.DPipe, exp.Trim, exp.Replace),
       _pg_text, "text functions over text (REPLACE never lengthens: see validate)"),
    _E((exp.Substring,), _pg_substring, _pg_substring.__doc__.split(":")[0]),
    _E((exp.Left, exp.Right), _pg_left, _pg_left.__doc__.split(":")[0]),
    _E((exp.Sign, exp.Floor, exp.Ceil), _pg_number, _pg_number.__doc__.split(":")[0]),
    _E((exp.Sqrt, exp.Ln), _pg_domain, "an argument kept inside the function's domain"),
    _E((exp.Exp,), _pg_exp, _pg_exp.__doc__.split(":")[0]),
    _E((exp.Like, exp.ILike), _pg_like, "a constant pattern without escapes over text"),
    _E((exp.RegexpLike,), _pg_regexp, "dpsql's own number patterns over text"),
    _E((exp.Count,), total.always, "counts rows"),
    _E((exp.Min, exp.Max), total.always, "picks one of the values"),
    _E((exp.Sum, exp.Avg), _pg_sum, _pg_sum.__doc__.split(":")[0]),
    _E((exp.RowNumber,), total.always, "numbers rows"),
    _E((exp.Anonymous,), _pg_record_hash, _pg_record_hash.__doc__.split(":")[0]),
), guards=(), sum_as="DECIMAL", refuse_unwrappable=False,
   nullif_divisors=True)
