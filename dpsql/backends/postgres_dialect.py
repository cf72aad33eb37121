"""PostgreSQL's dialect transforms: a rewritten (DuckDB-flavoured) AST becomes SQL
PostgreSQL runs without a data-dependent error (see :mod:`dpsql.backends.dialects`;
the allow-list that checks the result is :mod:`dpsql.backends.postgres_total`).

**PostgreSQL** fails on integer and float overflow and underflow, bad casts, ``sqrt``
and ``ln`` outside their domain, ``exp`` overflow and negative substring lengths. Inside
``TRY(...)`` numeric arithmetic is computed in NUMERIC (no overflow) and brought back to
the DuckDB result type through a clamp whose out-of-range ends become NULL; the
functions get CASE guards; ``TRY_CAST`` becomes a guarded CAST (text is matched against
a number pattern first). Casting text to DATE/TIMESTAMP needs ``pg_input_is_valid``
(PostgreSQL 16+) and is refused on older servers. Date arithmetic is left as is: it
fails only beyond year 294276. The L0 order is ``hash_record_extended((uid, keys), seed)``.
"""

from __future__ import annotations

import decimal
import math
import re
from decimal import Decimal

from sqlglot import exp

from dpsql.backends.dialects import (
    Context,
    bottom_up,
    copy_node,
    date_literal,
    infer,
    is_constant,
    num_literal,
    order_with_tiebreak,
    python_dates,
    replace_all,
    sentinel_clamp,
    unsupported,
)
from dpsql.sqlbuild import data_type
from dpsql.types import (
    BOOL,
    DATE,
    DECIMAL,
    FLOAT,
    INT,
    INT_BITS,
    NUMERIC,
    STRING,
    TEMPORAL,
    TIMESTAMP,
)
from dpsql.types import family as type_family

#: The spaces PostgreSQL's numeric input skips (C's isspace): ``\s`` in a PostgreSQL
#: regular expression also matches Unicode spaces (U+3000) that the cast refuses.
_SPACE = r"[ \t\n\r\f\v]*"
INT_PATTERN = "^" + _SPACE + r"[-+]?[0-9]{1,255}" + _SPACE + "$"
NUM_PATTERN = ("^" + _SPACE + r"[-+]?([0-9]{1,255}(\.[0-9]{0,255})?|\.[0-9]{1,255})"
                r"([eE][-+]?[0-9]{1,3})?" + _SPACE + "$")
_TRUE = ("true", "t", "yes", "y", "on", "1")
_FALSE = ("false", "f", "no", "n", "off", "0")
_FLOAT_LIMIT = {"DOUBLE": "1.7e308", "REAL": "3.4e38", "FLOAT": "3.4e38"}


def _numeric(node: exp.Expression, ctx: Context) -> exp.Expression:
    """``node`` as NUMERIC, in which PostgreSQL's + - * / % never overflow.

    A column of unconstrained NUMERIC may hold any magnitude (131072 digits), and a
    product of two such values would overflow even NUMERIC: it is bounded first (a value
    beyond ±1e300 becomes NULL), like every NUMERIC result of the dialect layer.
    """
    if isinstance(node, exp.Literal) and not node.is_string:
        return node
    if ctx.family(node) == DECIMAL:
        if isinstance(node, exp.Column) and "(" not in (ctx.types.get(node.name.lower())
                                                        or ""):
            return sentinel_clamp(node, "-1e300", "1e300")
        return node
    return _as_numeric(node, ctx)


def _as_numeric(node: exp.Expression, ctx: Context | None) -> exp.Expression:
    """``CAST(node AS NUMERIC)``; a float through DOUBLE PRECISION first: PostgreSQL
    casts a REAL to NUMERIC with 6 significant digits (``float4_numeric``: 1234567.5
    became 1234570, a sum 19.983369 for DuckDB's 19.98336983919143), a DOUBLE
    PRECISION with 15, and REAL to DOUBLE PRECISION is exact (attack review)."""
    if ctx is not None and ctx.family(node) == FLOAT:
        node = exp.Cast(this=node, to=data_type("DOUBLE"))
    return exp.Cast(this=node, to=data_type("DECIMAL"))


#: Dates dpsql computes with on engines whose date arithmetic can leave their range
#: (PostgreSQL, Spark) or whose drivers cannot return them (Python: years 1 to 9999).
DATE_RANGE = ("0001-01-01", "9999-12-31")
#: Largest interval literal in date arithmetic, in years (the result stays in range).
MAX_INTERVAL_YEARS = 1000



def _date_sentinel(value: exp.Expression, family: str) -> exp.Expression:
    """``value`` if strictly between 0001-01-01 and 9999-12-31, else NULL."""
    lo, hi = (date_literal(t, family) for t in DATE_RANGE)
    clamped = exp.Least(this=exp.Greatest(this=value, expressions=[copy_node(lo)]),
                        expressions=[copy_node(hi)])
    return exp.Nullif(this=exp.Nullif(this=clamped, expression=hi), expression=lo)


#: Years per interval unit (a day as 1/365 of a year, rounded up for leap years below).
_UNIT_YEARS = {"YEAR": 1.0, "MONTH": 1 / 12, "WEEK": 7 / 365, "DAY": 1 / 365,
               "HOUR": 1 / 8760, "MINUTE": 1 / 525600, "SECOND": 1 / 31536000}


def _interval_years(node: exp.Expression) -> float | None:
    """The magnitude of an interval literal in years, at least (None: not a plain
    literal of a known unit).

    >>> _interval_years(exp.Interval(this=exp.Literal.string("18"), unit=exp.Var(this="MONTH")))
    1.5
    """
    if not isinstance(node, exp.Interval) or not isinstance(node.this, exp.Literal):
        return None
    unit = (node.unit.name if node.unit is not None else "DAY").upper().rstrip("S")
    text = node.this.this.strip()
    parts = text.split()
    if len(parts) == 2:  # INTERVAL '1 day'
        text, unit = parts[0], parts[1].upper().rstrip("S")
    try:
        value = abs(float(text))
    except ValueError:
        return None
    if unit not in _UNIT_YEARS or value != value:
        return None
    return value * _UNIT_YEARS[unit] * (1 if unit != "DAY" else 366 / 365)


def _safe_dates(node: exp.Expression, ctx: Context, backend: str) -> exp.Expression:
    """Date arithmetic and truncation that cannot leave the engine's range: the date is
    kept to 0001..9999 (NULL outside), the interval to :data:`MAX_INTERVAL_YEARS`."""
    f = ctx.family
    if isinstance(node, exp.Add | exp.Sub):
        sides = [node.this, node.expression]
        temporal = [x for x in sides if f(x) in (DATE, TIMESTAMP)]
        if not temporal:
            return node
        if all(f(x) in (DATE, TIMESTAMP) for x in sides):
            # a difference: PostgreSQL refuses infinite dates and timestamps ("cannot
            # subtract infinite dates"), so each side is kept to years 1..9999 first
            for key, x in (("this", node.this), ("expression", node.expression)):
                if not is_constant(x):
                    node.set(key, _date_sentinel(x, f(x)))
            return node
        other = sides[1] if temporal[0] is sides[0] else sides[0]
        years = _interval_years(other)
        if years is None or years > MAX_INTERVAL_YEARS:
            raise unsupported(backend, "date arithmetic with other than an interval literal "
                                       f"of at most {MAX_INTERVAL_YEARS} years")
        x = temporal[0]
        if is_constant(x):
            return node
        node.set("this" if x is sides[0] else "expression", _date_sentinel(x, f(x)))
        return node
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc) \
            and f(node.this) in (DATE, TIMESTAMP) and not is_constant(node.this):
        node.set("this", _date_sentinel(node.this, f(node.this)))
    return node


#: The first and last instants of years 1..9999, as dates and as timestamps (on Spark in


def _pg_back(value: exp.Expression, family: str | None) -> exp.Expression:
    """A NUMERIC result back to the DuckDB result type; out of its range → NULL."""
    if family == INT:
        # strictly between the bounds, a value rounds to a BIGINT (half away from 0)
        return exp.Cast(this=sentinel_clamp(value, "-9223372036854775808.5",
                                             "9223372036854775807.5"),
                        to=data_type("BIGINT"))
    if family == FLOAT:
        # ROUND(.., 300): a tiny NUMERIC would underflow (an error) when cast to float8
        rounded = exp.Round(this=value, decimals=exp.Literal.number(300))
        return exp.Cast(this=sentinel_clamp(rounded, "-1.7e308", "1.7e308"),
                        to=data_type("DOUBLE"))
    # DECIMAL (or unknown): stay NUMERIC, bounded so that later steps cannot overflow
    return sentinel_clamp(value, "-1e300", "1e300")


def _pg_safe_node(node: exp.Expression, ctx: Context) -> exp.Expression:
    """One node of an expression inside TRY(...), its children already safe."""
    f = ctx.family
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.IntDiv | exp.Mod):
        fa, fb = f(node.this), f(node.expression)
        if fa in TEMPORAL or fb in TEMPORAL:
            return _safe_dates(node, ctx, "PostgreSQL")
        if fa in (STRING, BOOL) or fb in (STRING, BOOL):
            return node  # a type error while planning, refused for free
        family = infer(node, ctx.families) or DECIMAL
        a, b = _numeric(node.this, ctx), _numeric(node.expression, ctx)
        if isinstance(node, exp.Div) or (isinstance(node, exp.IntDiv) and family != INT):
            value = exp.Div(this=a, expression=b, typed=True, safe=False)
        elif isinstance(node, exp.IntDiv):
            value = exp.Anonymous(this="DIV", expressions=[a, b])
        else:
            value = type(node)(this=a, expression=b)
        return _pg_back(value, family)
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        return _safe_dates(node, ctx, "PostgreSQL")
    if isinstance(node, exp.Neg | exp.Abs):
        if f(node.this) not in (*NUMERIC, None) or (isinstance(node, exp.Neg)
                                                    and isinstance(node.this, exp.Literal)):
            return node  # a negative literal is a constant
        return _pg_back(type(node)(this=_numeric(node.this, ctx)), f(node.this) or DECIMAL)
    if isinstance(node, exp.Round):
        decimals = node.args.get("decimals")
        if decimals is not None and not (isinstance(decimals, exp.Literal)
                                         and re.fullmatch(r"[0-9]{1,3}", decimals.this)):
            raise unsupported("PostgreSQL", "ROUND with other than a small constant "
                                            "number of decimals")
        value = exp.Round(this=_numeric(node.this, ctx), decimals=decimals)
        return _pg_back(value, f(node.this) or DECIMAL)
    if isinstance(node, exp.Sqrt | exp.Ln):
        x = node.this
        test = exp.GTE if isinstance(node, exp.Sqrt) else exp.GT
        cond = test(this=copy_node(x), expression=exp.Literal.number(0))
        return exp.Case(ifs=[exp.If(this=cond, true=node)])
    if isinstance(node, exp.Exp):
        bounded = exp.Cast(this=sentinel_clamp(_numeric(node.this, ctx), "-700", "709"),
                           to=data_type("DOUBLE"))
        return exp.Exp(this=bounded)
    if isinstance(node, exp.Substring):
        # substr(text, int, int): a negative length fails, and BIGINT arguments are refused
        for key, low in (("start", "-2147483648"), ("length", "0")):
            arg = node.args.get(key)
            if arg is not None and not isinstance(arg, exp.Literal):
                clamped = exp.Least(this=exp.Greatest(this=arg, expressions=[
                    num_literal(low)]), expressions=[exp.Literal.number(2147483647)])
                node.set(key, exp.Cast(this=clamped, to=data_type("INT")))
            elif arg is not None and key == "length" and arg.this.startswith("-"):
                node.set(key, exp.Literal.number(0))
        return node
    if isinstance(node, exp.TryCast):
        return _pg_try_cast(node, ctx)
    return node


def _pg_try_cast(node: exp.Cast, ctx: Context) -> exp.Expression:
    """TRY_CAST(x AS t) → an error-free CAST: range-checked, pattern-checked text."""
    x, to = node.this, node.args["to"]
    target = to.sql(dialect="duckdb").upper()
    base = target.split("(")[0].strip()
    tf, src = type_family(target), ctx.family(x)
    cast = exp.Cast(this=x, to=to)
    if is_constant(x) or isinstance(x, exp.Null):
        return cast  # folded while planning: fails for every row or for none
    if tf == STRING or (tf == src and tf in (STRING, BOOL, DATE, TIMESTAMP)):
        return cast
    if tf == TIMESTAMP and src == DATE:  # a date beyond the timestamp range fails
        return exp.Cast(this=_date_sentinel(x, DATE), to=to)
    if tf in (DATE, TIMESTAMP) and src in (DATE, TIMESTAMP):
        return cast
    if tf == BOOL:
        if src in NUMERIC:
            return exp.NEQ(this=x, expression=exp.Literal.number(0))
        if src == STRING:
            word = exp.Lower(this=exp.Trim(this=x))
            return exp.Case(ifs=[
                exp.If(this=exp.In(this=word, expressions=[exp.Literal.string(v)
                                                           for v in _TRUE]), true=exp.true()),
                exp.If(this=exp.In(this=copy_node(word), expressions=[exp.Literal.string(v)
                                                                  for v in _FALSE]),
                       true=exp.false())])
    if tf in (DATE, TIMESTAMP) and src == STRING:
        if ctx.options.get("server_version", 0) >= 160000:
            valid = exp.Anonymous(this="PG_INPUT_IS_VALID", expressions=[
                copy_node(x), exp.Literal.string("date" if tf == DATE else "timestamp")])
            return exp.Case(ifs=[exp.If(this=valid, true=cast)])
        raise unsupported("PostgreSQL < 16", f"TRY_CAST of text to {base}")
    if tf in NUMERIC:
        if src == BOOL:
            return exp.Cast(this=exp.Cast(this=x, to=data_type("INT")), to=to)
        guard = None
        if src == STRING:
            pattern = INT_PATTERN if tf == INT else NUM_PATTERN
            guard = exp.RegexpLike(this=copy_node(x), expression=exp.Literal.string(pattern))
            value = exp.Cast(this=x, to=data_type("DECIMAL"))
        elif src in (*NUMERIC, None):
            # in NUMERIC, exactly: a float's own comparisons with the bounds would round
            # them (2147483647.5 is 2147483648 as a float4), and NaN and infinities are
            # NUMERIC values that the sentinel maps to NULL
            value = _numeric(x, ctx) if tf == INT or src != FLOAT else x
        else:
            return cast  # a type error while planning
        if tf == INT:
            bits = INT_BITS.get(base, 63)
            low, high = f"-{2 ** bits}.5", f"{2 ** bits - 1}.5"
            safe = exp.Cast(this=sentinel_clamp(value, low, high), to=to)
        elif tf == FLOAT:
            limit = _FLOAT_LIMIT.get(base, "1.7e308")
            # few enough decimals that no value underflows the target (float4: 1e-38)
            digits = 300 if limit == "1.7e308" else 37
            if src != FLOAT or limit != "1.7e308":
                value = exp.Cast(this=value, to=data_type("DECIMAL")) \
                    if src == FLOAT else value
                value = exp.Round(this=value, decimals=exp.Literal.number(digits))
            safe = exp.Cast(this=sentinel_clamp(value, f"-{limit}", limit), to=to)
        else:
            params = [p.name for p in to.expressions]
            precision, scale = (int(params[0]) if params else 18,
                                int(params[1]) if len(params) > 1 else (3 if not params else 0))
            digits = precision - scale
            limit = f"{'9' * digits or '0'}.{'9' * scale}5" if scale else f"{'9' * digits}.5"
            safe = exp.Cast(this=sentinel_clamp(value, f"-{limit}", limit), to=to)
        return safe if guard is None else exp.Case(ifs=[exp.If(this=guard, true=safe)])
    raise unsupported("PostgreSQL", f"TRY_CAST from {src or 'an unknown type'} to {base}")


def postgres_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → ``x``, and every operation of the query — inside TRY(...) or not,
    dpsql's own arithmetic over aggregates included — made safe (see module doc):
    PostgreSQL raises on float overflow and underflow too, so no operation may stay as
    written. :func:`dpsql.backends.total.check_total` verifies the result."""
    expression = replace_all(expression, exp.Try, lambda n: n.this)
    return bottom_up(expression, lambda n: _pg_safe_node(n, ctx))


_PG_INTEGER_PARTS = {"YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "DOW", "DOY", "QUARTER",
                     "WEEK", "DECADE", "CENTURY", "ISODOW", "ISOYEAR", "MILLENNIUM"}


#: EXTRACT and DATE_TRUNC units PostgreSQL knows, under DuckDB's other names for them.
_PG_UNIT_NAMES = {"DAYOFWEEK": "DOW", "DAYOFYEAR": "DOY", "WEEKDAY": "DOW", "YEARS": "YEAR",
                  "QUARTERS": "QUARTER", "MONTHS": "MONTH", "WEEKS": "WEEK", "DAYS": "DAY",
                  "HOURS": "HOUR", "MINUTES": "MINUTE", "SECONDS": "SECOND",
                  "MILLISECOND": "MILLISECONDS", "MICROSECOND": "MICROSECONDS",
                  "DECADES": "DECADE", "CENTURIES": "CENTURY", "MILLENNIA": "MILLENNIUM"}
_PG_EXTRACT_UNITS = {"YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DOW", "DOY", "ISODOW",
                     "ISOYEAR", "HOUR", "MINUTE", "SECOND", "MILLISECONDS", "MICROSECONDS",
                     "DECADE", "CENTURY", "MILLENNIUM", "EPOCH"}
#: Parts of the time of day: PostgreSQL refuses them for a DATE, row by row.
_PG_TIME_UNITS = {"HOUR", "MINUTE", "SECOND", "MILLISECONDS", "MICROSECONDS"}
_PG_TRUNC_UNITS = {"MICROSECONDS", "MILLISECONDS", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK",
                   "MONTH", "QUARTER", "YEAR", "DECADE", "CENTURY", "MILLENNIUM"}


def postgres_date_units(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Date-part units in PostgreSQL's words, or the query refused before the charge.

    PostgreSQL prepares ``EXTRACT(DAYOFWEEK FROM d)``, ``EXTRACT(HOUR FROM <date>)`` and
    ``DATE_TRUNC('dow', ts)`` without complaint and raises on each row it evaluates them
    for: inside a CASE, whether the query fails depends on one person's row. So DuckDB's
    other names become PostgreSQL's, the time of day of a DATE is taken from the DATE as
    a TIMESTAMP (midnight), and any other unit is refused.
    """
    def unit_of(var: exp.Expression | None, allowed: set[str], what: str) -> str:
        name = var.name.upper() if isinstance(var, exp.Var | exp.Literal) else ""
        name = _PG_UNIT_NAMES.get(name, name)
        if name not in allowed:
            raise unsupported("PostgreSQL", f"{what} with the unit {name[:20]!r}")
        return name

    def fix(node):
        if isinstance(node, exp.Extract):
            unit = unit_of(node.this, _PG_EXTRACT_UNITS, "EXTRACT")
            node.set("this", exp.var(unit))
            value = node.expression
            if unit in _PG_TIME_UNITS and ctx.family(value) == DATE:
                node.set("expression", exp.Cast(this=value, to=data_type("TIMESTAMP")))
        else:
            unit = unit_of(node.args.get("unit"), _PG_TRUNC_UNITS, "DATE_TRUNC")
            node.set("unit", exp.var(unit))
        return node
    return replace_all(expression, (exp.Extract, exp.TimestampTrunc, exp.DateTrunc), fix)


def postgres_extract(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """EXTRACT returns NUMERIC in PostgreSQL 14+, BIGINT in DuckDB: cast the integer parts
    back, so that keys such as ``YEAR(d)`` come out as integers."""
    def fix(node):
        unit = type(node).__name__.upper() if isinstance(node, exp.Year | exp.Month | exp.Day) \
            else node.this.name.upper()
        if unit not in _PG_INTEGER_PARTS:
            return node
        # the part of an infinite date is Infinity, which fails the cast on the rows
        # that hold one: the date is kept to years 1..9999 (NULL outside) first
        slot = "expression" if isinstance(node, exp.Extract) else "this"
        value = node.args.get(slot)
        family = ctx.family(value)
        if value is not None and family in (DATE, TIMESTAMP) and not is_constant(value):
            node.set(slot, _date_sentinel(value, family))
        return exp.Cast(this=node, to=data_type("BIGINT"))
    return replace_all(expression, (exp.Year, exp.Month, exp.Day, exp.Extract), fix)


def postgres_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """The keyed hash of the L0 order and of the distinct-value cap:
    ``HASH_RECORD_EXTENDED((uid, keys...), seed)``.

    The hashed values come from a GROUP BY, which keeps whichever of its equal values it
    met first, and PostgreSQL spells some equal values differently (``-0`` and ``0``,
    NUMERIC ``1.0`` and ``1.00``). The hash of their text depended on the order the rows
    are stored in, and every user holding both spellings flipped the same way (attack
    review: ``COUNT(DISTINCT y)`` moved from 101 to 225 with one user added); making the
    text canonical by dpsql's guess of the type missed a derived MIN and an alias named
    like another table's column. ``HASH_RECORD_EXTENDED`` hashes each field with its
    type's own extended hash function, the one PostgreSQL's hash aggregation relies on,
    which gives equal values one hash by construction, whatever their spelling. A type
    without one (json) fails when the statement is planned: before the charge.
    """
    def make(uid, keys, seed):
        # a row constructor (a, b): one value is padded with a constant 0, as (a) would
        # be a bracketed value, not a row
        values = [copy_node(v) for v in (uid, *keys)]
        if len(values) == 1:
            values.append(exp.Literal.number(0))
        row = exp.Tuple(expressions=values)
        return exp.Anonymous(this="HASH_RECORD_EXTENDED", expressions=[row, seed])
    return order_with_tiebreak(expression, make)


def postgres_sums(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every SUM and AVG adds NUMERICs: PostgreSQL's float8 sum raises on overflow (a
    double total past 1.8e308), while a NUMERIC sum of fewer than 2**48 values of at
    most 1.8e308 (any float8, any bounded form) stays far inside NUMERIC's 131072 digits,
    and NaN and infinities are NUMERIC values (PostgreSQL 14+). Integer sums were exact
    NUMERIC sums already.

    A clamped summand is clamped again after the cast (:func:`_numeric_value`): the
    cast of a float keeps 15 (float8) or 6 (float4) significant digits and can round
    past the bound. The statistics query's sums end in such a clamp to their
    sensitivity (:mod:`dpsql.rewrite.bound_summands`), whatever their summand's shape.
    """
    def numeric(e: exp.Expression) -> exp.Expression:
        if isinstance(e, exp.Cast) and e.to.this == exp.DataType.Type.DECIMAL \
                and not e.to.expressions:  # the guard model's widening (total.py)
            e = e.this
        return _numeric_value(e, ctx)

    def fix(node):
        arg = node.this
        if isinstance(arg, exp.Distinct):
            arg.set("expressions", [numeric(e) for e in arg.expressions])
        else:
            node.set("this", numeric(arg))
        return node
    return replace_all(expression, (exp.Sum, exp.Avg), fix)


def _numeric_value(value: exp.Expression, ctx: Context | None = None) -> exp.Expression:
    """``CAST(value AS NUMERIC)``, clamped again in NUMERIC where ``value`` is dpsql's
    clamp (:func:`dpsql.sqlbuild.clamp`), with or without its NULL guard.

    In NUMERIC, LEAST and GREATEST compare exactly, and the bounds are decimals inside
    the analysis' interval (:func:`_inward`), so the summed value lies in it whatever
    the casts rounded. A NULL stays NULL (PostgreSQL's GREATEST skips NULL arguments):
    the guard's NULL branch is left alone, and an unguarded clamp has literal
    arguments, so it is never NULL.

    >>> from sqlglot import parse_one
    >>> _numeric_value(parse_one("LEAST(GREATEST(x, 0), 0.5e0)")).sql()
    'LEAST(GREATEST(CAST(LEAST(GREATEST(x, 0), 0.5e0) AS DECIMAL), 0), 0.5)'
    >>> _numeric_value(parse_one("x * 2")).sql()
    'CAST(x * 2 AS DECIMAL)'
    """
    if isinstance(value, exp.Case) and _null_guard(value):
        value.set("default", _numeric_value(value.args["default"], ctx))
        return value
    cast = _as_numeric(value, ctx)
    bounds = _clamp_bounds(value)
    if bounds is None:
        return cast
    low, high = _inward(*bounds)
    return exp.Least(this=exp.Greatest(this=cast, expressions=[low], ignore_nulls=True),
                     expressions=[high], ignore_nulls=True)


def _null_guard(case: exp.Case) -> bool:
    """``CASE WHEN v IS NULL THEN NULL ELSE d END`` (the clamp's NULL guard)."""
    ifs = case.args.get("ifs") or []
    return len(ifs) == 1 and isinstance(ifs[0].this, exp.Is) \
        and isinstance(ifs[0].args.get("true"), exp.Null) \
        and case.args.get("default") is not None and case.this is None


def _clamp_bounds(value: exp.Expression) -> tuple[float, float] | None:
    """The interval of dpsql's clamp ``LEAST(GREATEST(v, L), U)`` with literal bounds;
    None for anything else."""
    if isinstance(value, exp.Least) and len(value.expressions) == 1 \
            and isinstance(value.this, exp.Greatest) and len(value.this.expressions) == 1:
        low = _float_literal(value.this.expressions[0])
        high = _float_literal(value.expressions[0])
        if low is not None and high is not None and low <= high:
            return low, high
    return None


def _float_literal(node: exp.Expression) -> float | None:
    """The float a numeric literal (or its negation) means to the analysis."""
    sign = 1.0
    if isinstance(node, exp.Neg):
        node, sign = node.this, -1.0
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = sign * float(node.this)
        except ValueError:
            return None
        return value if math.isfinite(value) else None
    return None


def _ROUNDING(rounding: str) -> decimal.Context:  # noqa: N802 - a context, as decimal names
    return decimal.Context(prec=17, rounding=rounding, Emax=decimal.MAX_EMAX,
                           Emin=decimal.MIN_EMIN, traps=[], flags=[])


def _inward(low: float, high: float) -> tuple[exp.Expression, exp.Expression]:
    """NUMERIC literals for ``[low, high]``: 17 significant digits rounded inwards,
    so the interval lies inside the analysis' (an exact expansion has up to 767 digits,
    and each would widen every NUMERIC sum's scale); the exact expansions where rounding
    would leave the interval empty.

    >>> [e.sql() for e in _inward(0.1, 1e300)]
    ['0.10000000000000001', '1.0000000000000000E+300']
    >>> [e.sql() for e in _inward(0.1, 0.1)][1]
    '0.1000000000000000055511151231257827021181583404541015625'
    """
    # exact, whatever the caller's context (Decimal(float) signals FloatOperation
    # there; from_float does not), and contexts of their own (a bare Context copies
    # the traps of a DefaultContext the application may have changed)
    exact = Decimal.from_float(low), Decimal.from_float(high)
    rounded = (_ROUNDING(decimal.ROUND_CEILING).plus(exact[0]),
               _ROUNDING(decimal.ROUND_FLOOR).plus(exact[1]))
    return tuple(_literal(d) for d in (rounded if rounded[0] <= rounded[1] else exact))


def _literal(value: Decimal) -> exp.Expression:
    literal = exp.Literal.number(str(value.copy_abs()))
    return exp.Neg(this=literal) if value < 0 else literal


#: Functions sqlglot does not model that these transforms write (each on
#: :data:`dpsql.output_check.FUNCTIONS`).
FUNCTIONS = frozenset({"hash_record_extended", "pg_input_is_valid", "div"})

POSTGRES = (postgres_try, postgres_date_units, postgres_extract, python_dates, postgres_sums)
