"""DuckDB's allow-list of total operations (:mod:`dpsql.backends.total`).

Each entry recognises an operation that cannot fail on DuckDB for the argument types
DuckDB itself binds (:mod:`dpsql.backends.probe_types`), with its one-line reason and,
where it needs one, its proof; anything else is wrapped in ``TRY``/``TRY_CAST`` or
refused before the charge. Every entry is exercised by the extreme-value fuzzer
(``tests/privacy/totality.py``); the DECIMAL entries also by
``tests/security/test_decimal_totality.py``.
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql.backends import total

_NUMBERS = (*total.INTEGERS, *total.FLOATS)


#: The widest DECIMAL whose SUM cannot overflow: DuckDB sums a DECIMAL(p,s) into a 128-bit
#: integer (checked only against 2**127) and returns DECIMAL(38,s); fewer than 2**48 rows
#: (:data:`total.MAX_ROWS`) of |R| <= 10**23 - 1 stay below 2**48 * 10**23 < 2.9 * 10**37,
#: inside DECIMAL(38) and far inside 2**127 (24 digits would not: 2.8 * 10**38).
SUM_DECIMAL_DIGITS = 23


def _sum_argument(node: exp.Expression, types: total.Types) -> bool:
    """SUM/AVG accumulate integers of up to 64 bits in a 128-bit HUGEINT and DECIMALs of up
    to 23 digits in DECIMAL(38): fewer than 2**48 rows (:data:`total.MAX_ROWS`) cannot
    overflow either (:data:`SUM_DECIMAL_DIGITS`); floating-point sums give inf, never an
    error."""
    arg = node.this
    if isinstance(arg, exp.Distinct):
        return False
    t = types(arg)
    digits = total.decimal_digits(t)
    return (t in ("TINYINT", "UTINYINT", "SMALLINT", "USMALLINT", "INTEGER", "UINTEGER",
                  "BIGINT", "BOOLEAN", total.NULL) or total.is_float(t)
            or (digits is not None and digits[0] <= SUM_DECIMAL_DIGITS))


def _like(node: exp.Expression, types: total.Types) -> bool:
    pattern = node.expression
    return types(node.this) in ("VARCHAR", total.NULL) and isinstance(pattern, exp.Literal) \
        and pattern.is_string


def _to_text(source: str | None) -> bool:
    return total.is_integer(source) or total.is_float(source) or source in (
        "VARCHAR", "BOOLEAN", "DATE", "TIMESTAMP") or total.base(source) == "DECIMAL"


def _to_double(source: str | None) -> bool:
    return total.is_integer(source) or total.is_float(source) or \
        total.base(source) == "DECIMAL"


# DECIMAL arithmetic (issue 23). How DuckDB binds it (src/function/scalar/operator/
# arithmetic.cpp, checked on DuckDB 2.0.1): an integer operand counts as DECIMAL(w,0) with w
# its type's width (TINYINT 3, SMALLINT 5, INTEGER 10, BIGINT 19, HUGEINT 38); every value of
# a DECIMAL(P,S) result is stored as an integer R of at most P digits, |R| <= 10**P - 1.
# * ``+``/``-``: the result is DECIMAL(max(s_i) + max(p_i - s_i) + 1, max(s_i)); past 38
#   digits it is cut to 38 and the sum is checked (error: "Overflow in addition of
#   DECIMAL(38)"). ``DECIMAL(38,2) + DECIMAL(38,2)`` can fail.
# * ``*``: the result is DECIMAL(p1 + p2, s1 + s2), but when both operands have at most 18
#   digits and the sum is over 18, it is cut to DECIMAL(18, s1 + s2) (DuckDB avoids 128-bit
#   arithmetic) and the product checked against 10**18 - 1; past 38 cut to 38 and checked;
#   a scale past 38 is refused while binding. So DECIMAL(15,2) * DECIMAL(15,2) is a
#   DECIMAL(18,4) that fails on 9999999999999.99 squared: the width the result *has* decides,
#   not p1 + p2 <= 38. Nothing turns a DECIMAL overflow into DOUBLE.
# The entries below read the result type the engine gave the node (probe_types), so a cut
# width is seen as it is, and each operand's digit bound (:func:`_decimal_bound`).


def _decimal_bound(node: exp.Expression, types: total.Types) -> tuple[int, int] | None:
    """(p, s) such that every value of ``node`` is an integer R times 10**-s with
    |R| <= 10**p - 1: a DECIMAL(p,s) by its type, an integer type by its digits (not
    HUGEINT, whose largest values do not convert to DECIMAL(38,0)), and a whole-number
    literal by its own digits (the engine gives ``2`` a wider type than it needs, but
    its value is 2 wherever it is converted). Anything else: None."""
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Literal) and not inner.is_string \
            and re.fullmatch(r"[0-9]{1,38}", inner.this):
        return len(inner.this.lstrip("0") or "0"), 0
    t = types(node)
    if t in _INTEGER_WIDTH:
        return _INTEGER_WIDTH[t], 0
    return total.decimal_digits(t)


#: Digits of each integer type's largest magnitude (its DuckDB DECIMAL width).
_INTEGER_WIDTH = {"TINYINT": 3, "UTINYINT": 3, "SMALLINT": 5, "USMALLINT": 5, "INTEGER": 10,
                  "UINTEGER": 10, "BIGINT": 19}


def _decimal_sum(node: exp.Expression, types: total.Types) -> bool:
    """DECIMAL ± DECIMAL or integer whose DECIMAL(P,S) result keeps every operand's
    scale (s_i <= S) and one more integer digit than the widest operand
    (max(p_i - s_i) + 1 <= P - S): each operand converts to DECIMAL(P,S) by widening, and
    |R1 ± R2| <= 2 (10**(P-1) - 1) < 10**P - 1, inside the result's range and under
    DuckDB's overflow check, which is there only where it cut the width."""
    result = total.decimal_digits(types(node))
    bounds = [_decimal_bound(o, types) for o in total.operands(node)]
    if result is None or len(bounds) != 2 or None in bounds:
        return False
    width, scale = result
    return all(s <= scale for _, s in bounds) and \
        max(p - s for p, s in bounds) + 1 <= width - scale


def _decimal_product(node: exp.Expression, types: total.Types) -> bool:
    """DECIMAL × DECIMAL or integer whose DECIMAL(P,S) result has S = s1 + s2 and
    P >= p1 + p2: |R1 R2| <= (10**p1 - 1)(10**p2 - 1) < 10**P, so the product is exact in
    the result's range (and under the check DuckDB adds where it cut the width to 18 or
    38); each operand converts to DECIMAL(P, s_i) by widening (p_i < P)."""
    result = total.decimal_digits(types(node))
    bounds = [_decimal_bound(o, types) for o in total.operands(node)]
    if result is None or len(bounds) != 2 or None in bounds:
        return False
    width, scale = result
    (p1, s1), (p2, s2) = bounds
    return scale == s1 + s2 and p1 + p2 <= width


def _decimal_sign(node: exp.Expression, types: total.Types) -> bool:
    """``-x``/``ABS(x)`` of a DECIMAL into its own type: a DECIMAL's range is symmetric
    (|R| <= 10**p - 1), and the integer it is stored in holds ±(10**p - 1)."""
    t = types(node)
    return total.decimal_digits(t) is not None and types(node.this) == t


def _floating_decimal(node: exp.Expression, types: total.Types) -> bool:
    """A floating-point result whose operands are numbers, DECIMALs among them: a DECIMAL
    (|x| < 10**38) converts to FLOAT or DOUBLE by rounding, never an error, and then it
    is the IEEE arithmetic of :func:`total.floating` (DuckDB divides DECIMALs as DOUBLE)."""
    return total.is_float(types(node)) and all(
        total.is_integer(types(o)) or total.is_float(types(o)) or types(o) == total.NULL
        or total.decimal_digits(types(o)) is not None for o in total.operands(node))


_E = total.Entry
#: DuckDB's operations that cannot fail, whatever the rows hold. Each is exercised by the
#: extreme-value fuzzer (``tests/privacy/totality.py``); anything else is guarded with
#: TRY/TRY_CAST or refused before the charge.
TOTAL = total.AllowList("DuckDB", (
    _E((exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
        exp.Between, exp.In), total.operands_meet,
       "operands of one type, or numbers that widen to a common one: nothing is converted "
       "that can fail"),
    _E((exp.Is,), total.is_test, total.is_test.__doc__.split(";")[0]),
    _E((exp.And, exp.Or, exp.Xor, exp.Not), total.all_operands("BOOLEAN"),
       "boolean logic over booleans"),
    _E((exp.Case, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif),
       lambda n, t: total.searched_case(n, t) and total.operands_meet_result(n, t),
       "chooses one operand; every operand is of the result's type or widens to it"),
    _E((exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Abs, exp.Sqrt, exp.Ln,
        exp.Exp), total.floating,
       "IEEE arithmetic over operands widened to FLOAT/DOUBLE: inf or NaN, never an error"),
    _E((exp.Neg,), total.negated_literal, "the negation of a positive literal fits its type"),
    _E((exp.Add, exp.Sub), _decimal_sum,
       "DECIMAL ± DECIMAL/integer into a result one digit wider than either: cannot overflow"),
    _E((exp.Mul,), _decimal_product,
       "DECIMAL × DECIMAL/integer into a result as wide as both together: cannot overflow"),
    _E((exp.Neg, exp.Abs), _decimal_sign, "the sign of a DECIMAL: its range is symmetric"),
    _E((exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Sqrt, exp.Ln, exp.Exp),
       _floating_decimal, "DECIMALs converted to FLOAT/DOUBLE (rounding), then IEEE "
                          "arithmetic: inf or NaN, never an error"),
    _E((exp.Interval,), total.constant_interval, "a constant interval, parsed while planning"),
    _E((exp.Cast,), total.cast_from({
        "VARCHAR": _to_text, "DOUBLE": _to_double, "SMALLINT": total.widens_to(2),
        "INTEGER": total.widens_to(4), "BIGINT": total.widens_to(6),
        "HUGEINT": total.widens_to(7)}),
       "to the same type, to text, to DOUBLE from numbers, or to a wider signed integer"),
    _E((exp.Lower, exp.Upper, exp.Length, exp.Concat, exp.DPipe),
       total.all_operands("VARCHAR"), "text functions over text; the result is at most "
                                      "as long as the inputs together"),
    _E((exp.Like, exp.ILike), _like, "matching text against a constant pattern"),
    _E((exp.Count,), total.always, "counts rows"),
    _E((exp.Min, exp.Max), total.always, "picks one of the values"),
    _E((exp.Sum, exp.Avg), _sum_argument, _sum_argument.__doc__.split(":")[0]),
    _E((exp.RowNumber,), total.always, "numbers rows"),
    _E((exp.Anonymous,), total.anonymous("HASH"), "a hash of any values"),
), guards=(exp.Try, exp.TryCast))
