"""Group keys on their way from the backend to Python: which types, and how fetched.

Everything between the charge and the noise runs over *every* group the data holds,
including a group that only one person's rows reach. So turning the backend's key
values into Python values must be total (it never raises, whatever a row holds) and
injective (two different keys in the database never become one key in Python: the
second would overwrite the first's statistics, which one person could aim at a large
group). Neither holds for the drivers' own conversion of dates and timestamps:

* DuckDB hands a DATE past year 9999 or before year 1 over as a ``str`` among ``date``
  objects (sorting them raises ``TypeError``), and ``DATE 'infinity'`` as
  ``date(9999, 12, 31)``, the same Python value as that real date;
* psycopg raises on dates past year 9999 and on infinities, Spark on dates past 9999;
* a large INTERVAL raises ``OverflowError`` inside DuckDB's fetch, and a TIMESTAMP WITH
  TIME ZONE needs ``pytz``, which may be missing.

So INTERVAL and time-zoned keys are refused before the charge (:func:`scalar_key_type`),
and date and timestamp keys travel as text (:func:`keys_as_text`, one ``CAST(... AS
VARCHAR)`` per key in an outer SELECT) and are read back by :func:`read_keys`,
which maps ISO text to ``date``/``datetime`` and keeps any other text as it is: total,
and injective because the databases write each value as one canonical text.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re

from sqlglot import exp

from dpsql.sqlbuild import data_type
from dpsql.types import FRACTION_NAMES, SCALAR_KEY_NAMES, TEMPORAL_KEY_NAMES, base_name

#: Key types (in DuckDB's words, as every backend's ``check`` reports them) released as
#: plain Python values, and of those the ones fetched as text (:mod:`dpsql.types`).
SCALAR_KEY = SCALAR_KEY_NAMES
TEMPORAL_KEY = TEMPORAL_KEY_NAMES


def scalar_key_type(type_name: str) -> bool:
    """Whether a backend's key type (in DuckDB's words) can be released as a group key.

    >>> scalar_key_type("DECIMAL(18,3)"), scalar_key_type("INTEGER[]")
    (True, False)
    >>> scalar_key_type("INTERVAL"), scalar_key_type("TIMESTAMP WITH TIME ZONE")
    (False, False)
    """
    return base_name(type_name) in SCALAR_KEY


def temporal_key_type(type_name: str) -> bool:
    """Whether a key of this type is fetched as text (see the module docstring).

    >>> temporal_key_type("DATE"), temporal_key_type("TIMESTAMP"), temporal_key_type("INT")
    (True, True, False)
    """
    return base_name(type_name) in TEMPORAL_KEY


def float_key_type(type_name: str) -> bool:
    """Whether a key of this type may hold fractions (see :func:`read_keys`): an integer
    value there is released as a float.

    >>> float_key_type("DOUBLE"), float_key_type("DECIMAL(10,2)"), float_key_type("INT")
    (True, True, False)
    """
    return base_name(type_name) in FRACTION_NAMES


def keys_as_text(expression: exp.Select, names: list[str]) -> exp.Select:
    """``SELECT CAST(k AS VARCHAR) AS k, ... FROM (expression) AS __keys``: the named
    output columns as text, the others as they are.

    >>> from sqlglot import parse_one
    >>> q = parse_one("SELECT d AS __k0, COUNT(*) AS __s0 FROM t GROUP BY d")
    >>> print(keys_as_text(q, ["__k0"]).sql(pretty=True))
    SELECT
      CAST(__keys.__k0 AS VARCHAR) AS __k0,
      __keys.__s0 AS __s0
    FROM (
      SELECT
        d AS __k0,
        COUNT(*) AS __s0
      FROM t
      GROUP BY
        d
    ) AS __keys
    """
    outputs = []
    for column in expression.selects:
        name = column.alias_or_name
        ref = exp.column(name, table="__keys")
        if name in names:
            ref = exp.Cast(this=ref, to=data_type("VARCHAR"))
        outputs.append(exp.alias_(ref, name))
    return exp.select(*outputs).from_(expression.subquery("__keys", copy=True))


def read_keys(rows: list[tuple], nk: int, text: list[int],
              floats: list[int] = (), doubles: list[int] = ()) -> list[tuple]:
    """Rows with their ``nk`` leading key values made canonical.

    * Text keys (at indexes ``text``) are read back as dates and timestamps when they
      are exactly the canonical ISO text of one (``YYYY-MM-DD``, ``YYYY-MM-DD
      HH:MM:SS[.ffffff]`` without trailing zeros); any other text stays as it is.
      ``fromisoformat`` alone reads several spellings as one value (``2000-W01-1`` and
      ``2000-01-03``, a ``T`` or a space), which would merge two groups.
    * Floating-point keys: the database groups -0.0 with 0.0 and every NaN together but
      reports whichever spelling it met first, which one person's row could decide;
      each is released as 0.0 and NaN.
    * DECIMAL keys get one spelling each (:func:`_decimal`); at ``floats`` (keys whose
      public domain dpsql holds as floats, such as ``CASE ... THEN 0.1 ELSE 0.2 END``,
      which PostgreSQL computes as NUMERIC) they become floats, to meet the domain.
    * At ``doubles`` (keys the database types as floating point or decimal), an
      integer becomes the equal float: SQLite groups 1 with 1.0 (and 2**53 with
      2.0**53) and reports the type of the first row it met. An integer no float
      equals stays as it is (SQLite compares them exactly, so no two groups merge).
      Elsewhere (keys typed as integers) a whole float becomes the equal integer, for
      the same reason: SQLite's ``ROUND(i)`` beside ``i``, or an integer expression
      that overflowed to a REAL, gave ``3.0`` or ``3`` by the rows' storage order
      (attack review).

    >>> read_keys([("2000-01-02", -0.0, 1), ("2000-W01-1", float("-nan"), 2),
    ...            ("20000-01-01", 1.5, 3), ("2000-01-02 03:04:05.5", None, 4),
    ...            ("2000-01-02T03:04:05", 2.0, 5)], 2, [0], doubles=[1])
    ... # doctest: +NORMALIZE_WHITESPACE
    [(datetime.date(2000, 1, 2), 0.0, 1), ('2000-W01-1', nan, 2), ('20000-01-01', 1.5, 3),
     (datetime.datetime(2000, 1, 2, 3, 4, 5, 500000), None, 4),
     ('2000-01-02T03:04:05', 2.0, 5)]
    """
    if nk == 0:
        return rows
    out = []
    for row in rows:
        row = list(row)
        for i in range(nk):
            value = row[i]
            if i in text:
                row[i] = _temporal(value)
            elif isinstance(value, float):
                row[i] = math.nan if math.isnan(value) else _float_key(value, i in doubles)
            elif isinstance(value, decimal.Decimal):
                row[i] = _domain_float(value) if i in floats else _decimal(value)
            elif i in doubles and isinstance(value, int) and not isinstance(value, bool):
                row[i] = _as_float(value)
        out.append(tuple(row))
    return out


def _float_key(value: float, double: bool):
    """A float key's one spelling: ``0.0`` for ``-0.0``; where the key is typed as an
    integer, the equal integer for a whole float of the 64-bit range.

    >>> _float_key(-0.0, True), _float_key(3.0, True), _float_key(3.0, False)
    (0.0, 3.0, 3)
    >>> _float_key(-9.223372036854776e18, False), _float_key(2.5, False)
    (-9223372036854775808, 2.5)
    """
    if not double and value.is_integer() and -(2.0**63) <= value < 2.0**63:
        return int(value)
    return value + 0.0


def _domain_float(value: decimal.Decimal):
    """A DECIMAL key as the float of a public domain, only when it is that float's own
    spelling; else its exact DECIMAL (then no domain value, so not released).

    ``float()`` alone would read two DECIMALs that differ beyond a float's precision as
    one key, and one group's statistics would overwrite the other's.

    >>> _domain_float(decimal.Decimal("0.10")), _domain_float(decimal.Decimal("2"))
    (0.1, 2.0)
    >>> _domain_float(decimal.Decimal("0.1000000000000000001"))
    Decimal('0.1000000000000000001')
    >>> _domain_float(decimal.Decimal(0.1)) == 0.1  # the float's exact value: text
    False
    """
    if not value.is_finite():
        return _decimal(value)
    number = float(value)
    if math.isfinite(number) and decimal.Decimal(repr(number)) == value:
        return number
    if math.isfinite(number) and decimal.Decimal(number) == value:
        # a float's exact binary value (0.1000000000000000055511151231257827...), not
        # its spelling: as a Decimal it would equal and hash as that float in Python,
        # the key of another group (DuckDB compares a DECIMAL with a DOUBLE literal as
        # doubles, so both pass the domain filter); as text it equals no number, and so
        # no domain value, and is not released
        return str(_decimal(value))
    return _decimal(value)


def _as_float(value: int):
    """The float equal to ``value``, or ``value`` when none is.

    >>> _as_float(1), _as_float(2 ** 53), _as_float(2 ** 53 + 1), _as_float(10 ** 400) > 0
    (1.0, 9007199254740992.0, 9007199254740993, True)
    """
    try:
        f = float(value)
    except OverflowError:
        return value
    return f if f == value else value


def _decimal(value: decimal.Decimal):
    """One spelling per DECIMAL value: PostgreSQL groups 1.0 with 1.00 and reports the
    first spelling it met (which one person's row can decide); a NaN (a NUMERIC column
    may hold one) does not even compare, so it becomes the float NaN.

    Exact, whatever the number of digits (PostgreSQL's NUMERIC has no fixed precision):
    trailing zeros are dropped from the coefficient by hand, with no context rounding,
    so two different values never become one key.

    >>> _decimal(decimal.Decimal("1.00")), _decimal(decimal.Decimal("-0.50"))
    (Decimal('1'), Decimal('-0.5'))
    >>> _decimal(decimal.Decimal("1E+2")), _decimal(decimal.Decimal("NaN"))
    (Decimal('100'), nan)
    >>> _decimal(decimal.Decimal("-0.00")), _decimal(decimal.Decimal("1" * 38 + ".10"))
    (Decimal('0'), Decimal('11111111111111111111111111111111111111.1'))
    >>> tiny = decimal.Decimal("1." + "0" * 119 + "1")
    >>> _decimal(tiny) == tiny != _decimal(decimal.Decimal(1))
    True
    >>> _decimal(decimal.Decimal("1E+150")) == decimal.Decimal(10) ** 150
    True
    """
    if value.is_nan():
        return math.nan
    if not value.is_finite():
        return value
    if value == 0:  # -0 and 0.000 too
        return decimal.Decimal(0)
    sign, digits, exponent = value.as_tuple()
    digits = list(digits)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exponent += 1
    if 0 < exponent <= 64:  # a whole number written out, as the databases write it
        digits += [0] * exponent
        exponent = 0
    return decimal.Decimal((sign, tuple(digits), exponent))


_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
                        r"(\.[0-9]{0,5}[1-9])?")


def _temporal(text):
    if not isinstance(text, str):
        return text
    try:
        if _DATE.fullmatch(text):
            return datetime.date.fromisoformat(text)
        if _TIMESTAMP.fullmatch(text):
            return datetime.datetime.fromisoformat(text)
    except ValueError:  # 2000-02-30, years 0000: kept as text
        pass
    return text


def order_key(group: tuple) -> tuple:
    """A total order over group keys of any types (NULL last), for a stable release order.

    >>> sorted([("b",), (None,), (datetime.date(2000, 1, 1),), ("a",)], key=order_key)
    [(datetime.date(2000, 1, 1),), ('a',), ('b',), (None,)]
    >>> sorted([(decimal.Decimal(2),), (math.nan,), (decimal.Decimal("NaN"),), (1.5,)],
    ...        key=order_key)
    [(1.5,), (Decimal('2'),), (nan,), (Decimal('NaN'),)]
    """
    return tuple(_rank(v) for v in group)


def _rank(value) -> tuple:
    if value is None:
        return (9, 0)
    if (isinstance(value, float) and math.isnan(value)) or \
            (isinstance(value, decimal.Decimal) and value.is_nan()):
        return (1, 0)  # NaN compares with nothing (a Decimal one raises)
    if isinstance(value, bool | int | float | decimal.Decimal):
        return (0, value)
    if isinstance(value, datetime.datetime):
        return (2, value)
    if isinstance(value, datetime.date):
        return (3, value)
    if isinstance(value, str):
        return (4, value)
    return (5, repr(value))
