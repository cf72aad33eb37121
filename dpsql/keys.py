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
VARCHAR)`` per key in an outer SELECT) and are read back by :func:`parse_text_keys`,
which maps ISO text to ``date``/``datetime`` and keeps any other text as it is: total,
and injective because the databases write each value as one canonical text.
"""

from __future__ import annotations

import datetime

from sqlglot import exp

#: Key types (in DuckDB's words, as every backend's ``check`` reports them) released as
#: plain Python values.
SCALAR_KEY = ("TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT",
              "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL",
              "DECIMAL", "NUMERIC", "VARCHAR", "TEXT", "STRING", "CHAR", "BOOLEAN", "BOOL",
              "DATE", "TIMESTAMP")
#: Of those, the ones fetched as text.
TEMPORAL_KEY = ("DATE", "TIMESTAMP")


def _base(type_name: str) -> str:
    return type_name.upper().strip().split("(")[0].strip()


def scalar_key_type(type_name: str) -> bool:
    """Whether a backend's key type (in DuckDB's words) can be released as a group key.

    >>> scalar_key_type("DECIMAL(18,3)"), scalar_key_type("INTEGER[]")
    (True, False)
    >>> scalar_key_type("INTERVAL"), scalar_key_type("TIMESTAMP WITH TIME ZONE")
    (False, False)
    """
    return "[" not in type_name and _base(type_name) in SCALAR_KEY


def temporal_key_type(type_name: str) -> bool:
    """Whether a key of this type is fetched as text (see the module docstring).

    >>> temporal_key_type("DATE"), temporal_key_type("TIMESTAMP"), temporal_key_type("INT")
    (True, True, False)
    """
    return _base(type_name) in TEMPORAL_KEY


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
            ref = exp.Cast(this=ref, to=exp.DataType.build("VARCHAR"))
        outputs.append(exp.alias_(ref, name))
    return exp.select(*outputs).from_(expression.subquery("__keys", copy=True))


def parse_text_keys(rows: list[tuple], indexes: list[int]) -> list[tuple]:
    """Rows with the text keys at ``indexes`` read back as dates and timestamps.

    >>> parse_text_keys([("2000-01-02", 1), ("infinity", 2), ("20000-01-01", 3),
    ...                  ("2000-01-02 03:04:05.5", 4), (None, 5)], [0])
    ... # doctest: +NORMALIZE_WHITESPACE
    [(datetime.date(2000, 1, 2), 1), ('infinity', 2), ('20000-01-01', 3),
     (datetime.datetime(2000, 1, 2, 3, 4, 5, 500000), 4), (None, 5)]
    """
    if not indexes:
        return rows
    out = []
    for row in rows:
        row = list(row)
        for i in indexes:
            row[i] = _temporal(row[i])
        out.append(tuple(row))
    return out


def _temporal(text):
    if not isinstance(text, str):
        return text
    try:
        if len(text) == 10:
            return datetime.date.fromisoformat(text)
        value = datetime.datetime.fromisoformat(text)
    except ValueError:  # infinities, years beyond 1..9999, BC dates: kept as text
        return text
    if value.tzinfo is not None:  # not a TIMESTAMP's text: keep it as the database wrote it
        return text
    return value


def order_key(group: tuple) -> tuple:
    """A total order over group keys of any types (NULL last), for a stable release order.

    >>> sorted([("b",), (None,), (datetime.date(2000, 1, 1),), ("a",)], key=order_key)
    [(datetime.date(2000, 1, 1),), ('a',), ('b',), (None,)]
    """
    return tuple(_rank(v) for v in group)


def _rank(value) -> tuple:
    if value is None:
        return (9, 0)
    if isinstance(value, bool | int | float) or type(value).__name__ == "Decimal":
        return (0, value)
    if isinstance(value, datetime.datetime):
        return (1, value)
    if isinstance(value, datetime.date):
        return (2, value)
    if isinstance(value, str):
        return (3, value)
    return (4, repr(value))
