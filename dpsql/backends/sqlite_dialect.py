"""SQLite's dialect transforms: a rewritten (DuckDB-flavoured) AST becomes SQL SQLite
runs without a data-dependent error (see :mod:`dpsql.backends.dialects`).

**SQLite** cannot fail on the allowed constructs: integer overflow becomes REAL,
division by zero and the math functions' domain errors give NULL, CAST never fails
(non-numeric text becomes 0, not NULL as in DuckDB's TRY_CAST). Two exceptions are
translated: ``abs(-2^63)`` (becomes ``MAX(x, -x)``) and ``SUM`` of integers, which
raises on overflow (becomes ``TOTAL``, a float: exact below 2^53). So ``TRY(x)`` is
just ``x``. SQLite has no GREATEST/LEAST: multi-argument MIN/MAX return NULL if any
argument is NULL, so ``GREATEST(x, lo)`` becomes ``MAX(COALESCE(x, lo), lo)``. No
hash function: dpsql registers its own keyed hash (``dpsql_hash``) on its connection.
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql.backends.dialects import (
    Context,
    bottom_up,
    copy_node,
    is_constant,
    num_literal,
    order_with_tiebreak,
    replace_all,
    typed_tables,
    unsupported,
)
from dpsql.sqlbuild import data_type
from dpsql.types import BOOL, DATE, DECIMAL, FLOAT, INT, STRING, TIMESTAMP
from dpsql.types import family as type_family

SQLITE_HASH = "dpsql_hash"
#: SQLite: dpsql's floating modulo, registered on its connection (C fmod; NULL on bad input).
SQLITE_FMOD = "dpsql_fmod"
#: SQLite: valid UTF-8 text, or NULL (registered on dpsql's connection; takes a BLOB).
SQLITE_UTF8 = "dpsql_utf8"
#: SQLite: dpsql's exact integer sum (an aggregate registered on its connection).
SQLITE_ISUM = "dpsql_isum"
#: ... for a sum the query returns (a top-level column): beyond 64 bits, its digits as text
SQLITE_ISUM_OUT = "dpsql_isum_out"


#: Longest text (bytes) dpsql reads from an SQLite column; longer text reads as NULL.
#: With values grown at most 10,000-fold by an expression (``Limits.max_value_length``) a
#: value stays below 164 MB, and a row of several keys below SQLite's 1e9-byte limit.
SQLITE_MAX_TEXT = 16_384

#: SQLite storage classes a column of each family holds when its value is of that type.
_SQLITE_CLASSES = {INT: ("integer",), BOOL: ("integer",), FLOAT: ("integer", "real"),
                   DECIMAL: ("integer", "real"), STRING: ("text",), DATE: ("text",),
                   TIMESTAMP: ("text",)}



def sqlite_typed_tables(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every table is read through ``(SELECT CASE WHEN typeof(c) IN (...) THEN c END AS c,
    ... FROM t) AS t``: a value whose storage class does not fit its declared type is
    read as NULL, and so is text that is not valid UTF-8 (``dpsql_utf8``) or longer than
    :data:`SQLITE_MAX_TEXT` bytes.

    SQLite keeps any value in any column (a CSV import leaves ``''`` in INTEGER columns,
    an update can store 62.5 there), while everything after the charge relies on the
    declared types: one person's ``''`` among integer keys, or a fraction in an integer
    sum, would fail the answer after the charge, an error oracle on that person. NULL is
    what such a value means (missing), the mapping is row by row and data-independent,
    and it keeps every well-typed value as it is.
    """
    def value(ref: exp.Column, dtype: str) -> exp.Expression | None:
        classes = _SQLITE_CLASSES.get(type_family(dtype))
        if classes is None:
            return None
        test = exp.In(this=exp.Typeof(this=copy_node(ref)),
                      expressions=[exp.Literal.string(c) for c in classes])
        body = ref
        if classes == ("text",):
            # at most SQLITE_MAX_TEXT bytes: an expression grows a value at most
            # max_value_length times (dpsql.limits), so no result reaches SQLite's 1e9-byte
            # limit ("string or blob too big" after the charge, on one person's long text)
            test = exp.and_(test, exp.LTE(
                this=exp.Length(this=exp.Cast(this=copy_node(ref), to=data_type("BLOB"))),
                expression=exp.Literal.number(SQLITE_MAX_TEXT)))
            # text that is not UTF-8 would be decoded on the way out: two different
            # byte strings could become one key there, so it is NULL here instead,
            # before the database groups anything
            body = exp.Anonymous(this=SQLITE_UTF8, expressions=[
                exp.Cast(this=copy_node(ref), to=data_type("BLOB"))])
        return exp.Case(ifs=[exp.If(this=test, true=body)])
    return typed_tables(expression, ctx, value)


def sqlite_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → ``x``: SQLite's arithmetic, casts and math functions cannot fail."""
    return replace_all(expression, exp.Try, lambda n: n.this)


def sqlite_functions(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``ABS(x)`` → ``MAX(x, -x)``: SQLite's abs(-2^63) raises 'integer overflow'.
    ``FLOOR(x)`` → ``-CEIL(-x)``: SQLAlchemy replaces SQLite's floor() by Python's
    math.floor, which fails on large values ("string or blob too big")."""
    def fix(node):
        x = node.this
        negated = exp.Neg(this=exp.paren(copy_node(x), copy=False))
        if isinstance(node, exp.Abs):
            return exp.Max(this=x, expressions=[negated])
        return exp.Neg(this=exp.Ceil(this=negated))
    return replace_all(expression, (exp.Abs, exp.Floor), fix)



def sqlite_greatest_least(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """GREATEST/LEAST (which skip NULLs) → multi-argument MAX/MIN (which do not)."""
    def fix(node):
        args = [node.this, *node.expressions]
        kind = exp.Max if isinstance(node, exp.Greatest) else exp.Min
        constants = [a for a in args if is_constant(a)]
        others = [a for a in args if not is_constant(a)]
        if constants and len(others) <= 1:
            # GREATEST(x, lo) → MAX(COALESCE(x, lo), lo): x appears once
            guarded = [exp.Coalesce(this=x, expressions=[copy_node(constants[0])]) for x in others]
            items = guarded + constants
        else:  # each argument first once, falling back on the others when NULL
            items = [exp.Coalesce(this=a, expressions=[copy_node(b) for b in args if b is not a])
                     for a in args]
        if len(items) == 1:
            return items[0]
        return kind(this=items[0], expressions=items[1:])
    return bottom_up(expression, lambda n: fix(n) if isinstance(n, exp.Greatest | exp.Least)
                      else n)


def sqlite_arithmetic(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``a // b`` → ``a / b`` (SQLite divides integers by truncation, like DuckDB's ``//``,
    and reals exactly, like DuckDB's ``//`` on doubles); ``%`` on non-integers → ``MOD``
    (SQLite's ``%`` truncates both operands to integers first)."""
    def fix(node):
        if isinstance(node, exp.IntDiv):
            return exp.Div(this=node.this, expression=node.expression, typed=True, safe=False)
        if isinstance(node, exp.Mod):
            if ctx.family(node.this) == INT and ctx.family(node.expression) == INT:
                return node
            # dpsql's own function: sqlglot reads SQLite's MOD() back as `%`, which the
            # output check (dpsql.output_check) would see as a different query
            # REAL arguments: text (maybe invalid UTF-8) never reaches the Python function
            real = data_type("DOUBLE")
            return exp.Anonymous(this=SQLITE_FMOD, expressions=[
                exp.Cast(this=node.this, to=real), exp.Cast(this=node.expression, to=real)])
        return node
    return bottom_up(expression, fix)


def sqlite_strings(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``CONCAT(a, b)`` (NULL as '') → ``COALESCE(a, '') || COALESCE(b, '')``: SQLite < 3.44
    has no CONCAT."""
    def fix(node):
        parts = [exp.Coalesce(this=e, expressions=[exp.Literal.string("")])
                 for e in node.expressions]
        out = parts[0]
        for p in parts[1:]:
            out = exp.DPipe(this=out, expression=p)
        return exp.paren(out, copy=False)
    return replace_all(expression, exp.Concat, fix)


_SQLITE_PARTS = {"YEAR": "%Y", "MONTH": "%m", "DAY": "%d", "HOUR": "%H", "MINUTE": "%M",
                 "DOY": "%j", "DAYOFYEAR": "%j", "DOW": "%w", "DAYOFWEEK": "%w",
                 "SECOND": "%S", "WEEK": "%W"}
_SQLITE_UNITS = {"DAY": "days", "MONTH": "months", "YEAR": "years", "HOUR": "hours",
                 "MINUTE": "minutes", "SECOND": "seconds"}


def _sqlite_trunc(unit: str, value: exp.Expression, family: str | None) -> exp.Expression:
    """``DATE_TRUNC(unit, x)`` in SQLite's date functions, as text of ``x``'s own form.

    SQLite holds dates as ISO text and compares them as text, so the truncated value
    keeps the form of its input: ``DATE(d, 'start of month')`` writes ``YYYY-MM-01`` for
    a DATE (equal to ``DATE '2024-03-01'`` as in DuckDB, where the TIMESTAMP that
    ``date_trunc`` returns equals that DATE), ``DATETIME(t, 'start of month')`` and
    ``STRFTIME('%Y-%m-%d %H:00:00', t)`` write ``YYYY-MM-DD HH:MM:SS`` for a timestamp
    (what a TIMESTAMP column holds). A week starts on
    Monday (ISO, as in DuckDB): ``weekday 0`` moves to the next Sunday (or stays on
    one), six days back is that week's Monday. A quarter goes back ``(month − 1) % 3``
    months from the first of the month. SQLite's date functions return NULL for text
    that is not a date (or a year outside 0..9999) and never raise, so the translation
    is total.
    """
    def call(name: str, *args: exp.Expression) -> exp.Expression:
        return exp.Anonymous(this=name, expressions=list(args))

    def text(t: str) -> exp.Expression:
        return exp.Literal.string(t)

    formats = {"HOUR": "%Y-%m-%d %H:00:00", "MINUTE": "%Y-%m-%d %H:%M:00",
               "SECOND": "%Y-%m-%d %H:%M:%S"}
    starts = {"YEAR": "start of year", "MONTH": "start of month", "DAY": "start of day"}
    func = "DATE" if family == DATE else "DATETIME"
    if unit in formats:
        return call("STRFTIME", text(formats[unit] if func == "DATETIME" else "%Y-%m-%d"),
                    value)
    if unit in starts:
        return call(func, value, text(starts[unit]))
    if unit == "WEEK":
        return call(func, value, text("start of day"), text("weekday 0"), text("-6 days"))
    if unit == "QUARTER":
        month = exp.Cast(this=call("STRFTIME", text("%m"), copy_node(value)),
                         to=data_type("BIGINT"))
        back = exp.Mod(this=exp.paren(exp.Sub(this=month, expression=exp.Literal.number(1))),
                       expression=exp.Literal.number(3))
        shift = exp.DPipe(this=exp.DPipe(this=text("-"), expression=exp.paren(back)),
                          expression=text(" months"))
        return call(func, value, text("start of month"), shift)
    raise unsupported("SQLite", f"DATE_TRUNC with the unit {unit[:20]!r}")


def sqlite_dates(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Dates are ISO text in SQLite: YEAR(d) → ``CAST(STRFTIME('%Y', d) AS INTEGER)``,
    ``d ± INTERVAL 'n' UNIT`` → ``DATE(d, '±n units')`` (DATETIME for timestamps),
    ``DATE_TRUNC('month', d)`` → ``DATETIME(d, 'start of month')`` (:func:`_sqlite_trunc`)."""
    def part(unit: str, value: exp.Expression) -> exp.Expression:
        fmt = _SQLITE_PARTS.get(unit.upper())
        if fmt is None:
            raise unsupported("SQLite", f"EXTRACT({unit} ...)")
        return exp.Cast(this=exp.Anonymous(this="STRFTIME", expressions=[
            exp.Literal.string(fmt), value]), to=data_type("BIGINT"))

    def fix(node):
        if isinstance(node, exp.DateStrToDate | exp.TsOrDsToDate):
            # DATE(x): the ISO date x names, or NULL (SQLite's CAST AS DATE would read
            # '2024-01-05' as the number 2024)
            return exp.Anonymous(this="DATE", expressions=[node.this])
        if isinstance(node, exp.Year | exp.Month | exp.Day):
            return part(type(node).__name__, node.this)
        if isinstance(node, exp.DayOfWeek | exp.DayOfYear):
            return part("DOW" if isinstance(node, exp.DayOfWeek) else "DOY", node.this)
        if isinstance(node, exp.Extract):
            return part(node.this.name, node.expression)
        if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
            unit = node.args.get("unit")
            name = unit.name.upper() if isinstance(unit, exp.Var | exp.Literal) else ""
            return _sqlite_trunc(name.rstrip("S"), node.this, ctx.family(node.this))
        if isinstance(node, exp.Add | exp.Sub) and isinstance(node.expression, exp.Interval):
            interval = node.expression
            unit = (interval.unit.name if interval.unit else "DAY").upper().rstrip("S")
            amount = interval.this.name if interval.this is not None else ""
            if unit not in _SQLITE_UNITS or not re.fullmatch(r"-?[0-9]+", amount.strip()):
                raise unsupported("SQLite", f"the interval {interval.sql()}")
            n = int(amount) * (-1 if isinstance(node, exp.Sub) else 1)
            modifier = exp.Literal.string(f"{n:+d} {_SQLITE_UNITS[unit]}")
            func = "DATE" if ctx.family(node.this) == DATE else "DATETIME"
            return exp.Anonymous(this=func, expressions=[node.this, modifier])
        return node
    return bottom_up(expression, fix)


def _decimal(node: exp.Expression):
    import decimal

    if isinstance(node, exp.Paren):
        return _decimal(node.this)
    if isinstance(node, exp.Neg):
        value = _decimal(node.this)
        return None if value is None else -value
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return decimal.Decimal(node.this)
        except decimal.InvalidOperation:
            return None
    return None


def sqlite_fold_decimals(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``0.06 + 0.01`` → ``0.07``: DuckDB computes decimal literals exactly, SQLite in
    binary floating point (0.06 + 0.01 = 0.06999999999999999), so fold them exactly."""
    def fix(node):
        if not isinstance(node, exp.Add | exp.Sub | exp.Mul):
            return node
        a, b = _decimal(node.this), _decimal(node.expression)
        if a is None or b is None or (a == a.to_integral_value() and b == b.to_integral_value()):
            return node
        value = a + b if isinstance(node, exp.Add) else a - b if isinstance(node, exp.Sub) \
            else a * b
        return num_literal(str(value))
    return bottom_up(expression, fix)


#: Casts whose value in SQLite is an INTEGER (or NULL).
_INTEGER_CASTS = ("INT", "INTEGER", "BIGINT", "SMALLINT", "TINYINT")


def _whole(node: exp.Expression) -> bool:
    """Whether every value ``node`` takes is certainly an INTEGER or NULL in SQLite, by
    its shape alone: integer literals, casts to INTEGER, and MIN, MAX, COALESCE, CASE
    and negation of such (the grid sums' clamped units after
    :func:`sqlite_greatest_least`). Nothing is taken on a column's word, and one branch
    of unknown type makes the whole unknown: ``dpsql_isum`` rounds a fraction, which
    would move a summand past its clamp.

    >>> import sqlglot
    >>> units = "MIN(COALESCE(CAST(x AS INTEGER), -3), 3)"
    >>> _whole(sqlglot.parse_one(f"CASE WHEN c THEN NULL ELSE {units} END"))
    True
    >>> _whole(sqlglot.parse_one("MIN(COALESCE(x, -3), 3)"))
    False
    """
    if isinstance(node, exp.Paren | exp.Neg):
        return _whole(node.this)
    if isinstance(node, exp.Null):
        return True
    if isinstance(node, exp.Literal):
        return not node.is_string and node.this.isdigit()
    if isinstance(node, exp.Cast):  # TRY_CAST too
        return node.to.this.name in _INTEGER_CASTS
    if isinstance(node, exp.Min | exp.Max | exp.Coalesce):
        return all(_whole(e) for e in (node.this, *node.expressions))
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        return all(_whole(i.args.get("true")) for i in node.args.get("ifs") or []) and (
            default is None or _whole(default))
    return False


def _outputs(expression: exp.Expression) -> set[int]:
    """The SELECTs whose columns are the query's own (by identity): the query, and the
    query inside a wrapper that passes its columns through as they are, or cast
    (:func:`dpsql.keys.keys_as_text`: a date key fetched as text; missed, a grouped
    total there came back rounded to a double: attack review).

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT CAST(k.a AS TEXT) AS a, k.s AS s FROM (SELECT a, "
    ...                       "SUM(x) AS s FROM t GROUP BY a) AS k")
    >>> len(_outputs(q))
    2
    """
    found: set[int] = set()
    node = expression
    while isinstance(node, exp.Select):
        found.add(id(node))
        source = node.args.get("from_")
        if source is None or not isinstance(source.this, exp.Subquery) or any(
                node.args.get(k) for k in ("joins", "where", "group", "having", "with_")):
            break
        if not all(isinstance(i, exp.Alias) and isinstance(
                i.this.this if isinstance(i.this, exp.Cast) else i.this, exp.Column)
                for i in node.expressions):
            break
        node = source.this.this
    return found


def sqlite_sums(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``SUM`` of integers → ``dpsql_isum``, any other ``SUM`` → ``TOTAL``.

    SQLite's SUM of integers raises on overflow, and TOTAL is a float sum that never
    fails but rounds beyond 2^53 in an order that depends on how the rows are stored
    (a user's integer values near 2^53 summed to different partials forwards and
    backwards: attack review). ``dpsql_isum`` (:class:`dpsql.backends.sqlite.ExactSum`)
    adds integers exactly in Python, never fails, and returns the total (a float beyond
    2^63, which SQL after it compares and scales as a number); grid units
    (:mod:`dpsql.rewrite.grid_sums`) and exact sums (:func:`dpsql.sqlbuild.fine_sum`) are
    integers. A sum the query returns as one of its own columns, read by nothing but
    dpsql's noise stage, is ``dpsql_isum_out``: the same, but beyond 2^63 its exact
    digits as text (:class:`dpsql.backends.sqlite.ExactSumOut`), which the noise stage
    reads back exactly (:func:`dpsql.noise.read_units`): rounded to the nearest double,
    a gridded total beyond 2^63 fine units could round past a grid line the exact total
    stays short of. TOTAL gives 0.0 instead of NULL when there is nothing to add, which
    every statistic reads as 0 anyway."""
    outputs = _outputs(expression)

    def fix(node):
        if ctx.family(node.this) == INT or _whole(node.this):
            out = isinstance(node.parent, exp.Alias) and id(node.parent.parent) in outputs
            return exp.Anonymous(this=SQLITE_ISUM_OUT if out else SQLITE_ISUM,
                                 expressions=[node.this])
        return exp.Anonymous(this="TOTAL", expressions=[node.this])
    return replace_all(expression, exp.Sum, fix)



def _blob(value: exp.Expression) -> exp.Expression:
    """A value as BLOB: SQLite hands text to a Python function decoded as UTF-8 (an error
    on invalid bytes, which any column may hold whatever its declared type); a BLOB
    arrives as bytes."""
    return exp.Cast(this=value, to=data_type("BLOB"))


def sqlite_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """The keyed hash of the L0 order and of the distinct-value cap. A number is hashed
    as a REAL, whatever its column or expression: the value comes from a GROUP BY, which
    keeps whichever of its equal values it met first, and SQLite holds equal values as
    INTEGER and REAL (``3`` and ``3.0`` in a NUMERIC or untyped column, ``ROUND(i)``
    beside ``i``, an integer expression that overflowed to REAL ``-2^63``), whose text
    differs; hashed as stored, the choice depended on the rows' storage order and every
    user holding both flipped the same way (attack review). The test is SQLite's own
    ``TYPEOF`` of the value, not dpsql's guess of its type, which missed some of these.
    Equal numbers are one REAL; different numbers that print alike tie, and the tie is
    broken by the values themselves (:func:`~dpsql.backends.dialects.order_with_tiebreak`).
    """
    def canonical(value):
        number = exp.In(this=exp.Typeof(this=copy_node(value)),
                        expressions=[exp.Literal.string("integer"), exp.Literal.string("real")])
        real = exp.Cast(this=copy_node(value), to=data_type("REAL"))
        return _blob(exp.Case(ifs=[exp.If(this=number, true=real)], default=value))

    return order_with_tiebreak(expression, lambda uid, keys, seed: exp.Anonymous(
        this=SQLITE_HASH, expressions=[seed, canonical(uid), *(canonical(k) for k in keys)]))


#: Functions sqlglot does not model that these transforms write (each on
#: :data:`dpsql.output_check.FUNCTIONS`): dpsql's own, TOTAL and the date functions.
FUNCTIONS = frozenset({SQLITE_HASH, SQLITE_FMOD, SQLITE_UTF8, SQLITE_ISUM, SQLITE_ISUM_OUT,
                       "total",
                       "strftime", "date", "datetime"})

SQLITE = (sqlite_typed_tables, sqlite_try, sqlite_fold_decimals, sqlite_functions,
          sqlite_greatest_least, sqlite_arithmetic, sqlite_strings, sqlite_dates,
          sqlite_sums, sqlite_hash)
