"""SQL type names: how dpsql reads them, and the families they belong to.

Every backend reports column and result types in DuckDB's words (PostgreSQL's and
Spark's own names are translated by their backend modules). This module is the one
table of those words: which names are integers, floats, decimals, text, booleans, dates,
timestamps and intervals (:func:`family`), and how a type name is read
(:func:`parse`), so that ``DECIMAL(18,3)``, ``VARCHAR(10)``, ``TIMESTAMP WITH TIME
ZONE``, ``INTEGER[]``, ``STRUCT(a INT)`` and ``Nullable(String)`` are each read as what
they are rather than cut at their first bracket.

The narrower lists the rest of dpsql needs (which types a catalog type accepts, which
keys are released as plain values, which statistics come back as exact integers) are
built here from the same sets, so that a name is added in one place.

>>> parse("DECIMAL(18, 3)")
TypeName(base='DECIMAL', params=('18', '3'), array=False)
>>> parse("Nullable(String)").base, parse("TIMESTAMP(3) WITH TIME ZONE").base
('STRING', 'TIMESTAMP WITH TIME ZONE')
>>> family("BIGINT"), family("decimal(10,2)"), family("INTEGER[]"), family("MAP(INT, INT)")
('int', 'decimal', None, None)
"""

from __future__ import annotations

from dataclasses import dataclass

#: The families of types dpsql reasons about (the dialect layer's inference, the catalog).
INT, FLOAT, DECIMAL, STRING, BOOL, DATE, TIMESTAMP, INTERVAL = (
    "int", "float", "decimal", "string", "bool", "date", "timestamp", "interval")
TEMPORAL = (DATE, TIMESTAMP, INTERVAL)
NUMERIC = (INT, FLOAT, DECIMAL)

#: DuckDB's integer types: the names every backend's check reports integers by.
INTEGER_NAMES = frozenset({
    "TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "UHUGEINT"})
#: Floating-point types.
FLOAT_NAMES = frozenset({"FLOAT", "DOUBLE", "REAL"})
#: Exact decimal types (with or without precision and scale).
DECIMAL_NAMES = frozenset({"DECIMAL", "NUMERIC"})
#: Text types.
STRING_NAMES = frozenset({"VARCHAR", "TEXT", "STRING", "CHAR", "ENUM"})
BOOL_NAMES = frozenset({"BOOLEAN", "BOOL"})
#: Other spellings that type inference also reads (PostgreSQL's ``INT8``, ``FLOAT8``,
#: ``BPCHAR``...: a cast written by the analyst or a SQLite declared type).
_ALIASES = {
    INT: frozenset({"INT2", "INT4", "INT8"}),
    FLOAT: frozenset({"FLOAT4", "FLOAT8", "DOUBLE PRECISION"}),
    STRING: frozenset({"NVARCHAR", "BPCHAR"}),
}
_FAMILY_NAMES = {INT: INTEGER_NAMES | _ALIASES[INT], FLOAT: FLOAT_NAMES | _ALIASES[FLOAT],
                 DECIMAL: DECIMAL_NAMES, STRING: STRING_NAMES | _ALIASES[STRING],
                 BOOL: BOOL_NAMES, DATE: frozenset({"DATE"}),
                 INTERVAL: frozenset({"INTERVAL"})}
#: Bits of the signed integer types (for guarded casts).
INT_BITS = {"TINYINT": 7, "SMALLINT": 15, "INT2": 15, "INTEGER": 31, "INT": 31,
            "INT4": 31, "BIGINT": 63, "INT8": 63}
#: A DuckDB type name per family, for the (name, type) columns a backend's check returns.
DUCKDB_TYPE = {INT: "BIGINT", FLOAT: "DOUBLE", DECIMAL: "DECIMAL(38,10)", STRING: "VARCHAR",
               BOOL: "BOOLEAN", DATE: "DATE", TIMESTAMP: "TIMESTAMP", INTERVAL: "INTERVAL"}

#: Wrappers that say something about NULLs or storage, not about the values
#: (ClickHouse's ``Nullable(String)``, ``LowCardinality(String)``): read through.
_WRAPPERS = ("NULLABLE", "LOWCARDINALITY")


@dataclass(frozen=True)
class TypeName:
    """A type name as read by :func:`parse`.

    Attributes:
        base: the name without its parameters, upper-case, words kept
            (``TIMESTAMP WITH TIME ZONE``, ``VARCHAR COLLATE UTF8_LCASE``).
        params: the bracketed parameters, as text (``('18', '3')``; nested ones whole).
        array: a list of values of that type (``INTEGER[]``, ``DECIMAL(5,2)[3]``).
    """

    base: str
    params: tuple[str, ...] = ()
    array: bool = False


def _split_params(text: str) -> tuple[str, ...]:
    """Top-level comma-separated parts of a bracket's content."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last or parts:
        parts.append(last)
    return tuple(parts)


def parse(type_name: str | None) -> TypeName:
    """Reads a type name: its base, parameters and whether it is a list.

    The parameters are the first bracket's content, matched to its closing bracket
    however deeply it nests; words after it belong to the base (``TIMESTAMP(3) WITH
    TIME ZONE``). ``Nullable(...)`` and ``LowCardinality(...)`` are read through. A name
    that ends in ``[...]`` (DuckDB's lists) is an array of what precedes it.

    >>> parse("varchar(10)")
    TypeName(base='VARCHAR', params=('10',), array=False)
    >>> parse("INTEGER[]")
    TypeName(base='INTEGER', params=(), array=True)
    >>> parse("STRUCT(a INT, b MAP(INT, VARCHAR))")
    TypeName(base='STRUCT', params=('A INT', 'B MAP(INT, VARCHAR)'), array=False)
    >>> parse("LowCardinality(Nullable(String))"), parse(None)
    (TypeName(base='STRING', params=(), array=False), TypeName(base='', params=(), array=False))
    """
    text = (type_name or "").strip().upper()
    array = False
    while text.endswith("]") and "[" in text:
        array = True
        text = text[:text.rindex("[")].rstrip()
    open_at = text.find("(")
    if open_at < 0:
        return TypeName(" ".join(text.split()), (), array)
    depth, close_at = 0, len(text)
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                close_at = i
                break
    head, inner, tail = text[:open_at].strip(), text[open_at + 1:close_at], \
        text[close_at + 1:].strip()
    if head in _WRAPPERS and not tail:
        inner_type = parse(inner)
        return TypeName(inner_type.base, inner_type.params, inner_type.array or array)
    base = " ".join(f"{head} {tail}".split())
    return TypeName(base, _split_params(inner), array)


def base_name(type_name: str | None) -> str:
    """The base of a type name (:func:`parse`): ``DECIMAL(18,3)`` → ``DECIMAL``;
    a list keeps its brackets (``INTEGER[]``), so that it never passes for a scalar.

    >>> base_name("decimal(18,3)"), base_name("INTEGER[]"), base_name("DECIMAL(5,2)[]")
    ('DECIMAL', 'INTEGER[]', 'DECIMAL[]')
    """
    parsed = parse(type_name)
    return parsed.base + "[]" if parsed.array else parsed.base


def family(type_name: str | None) -> str | None:
    """The coarse family of a DuckDB-style type name (``BIGINT`` → ``int``); None for
    lists, structures and names dpsql does not know."""
    if not type_name:
        return None
    parsed = parse(type_name)
    if parsed.array:
        return None
    base = parsed.base
    for name, names in _FAMILY_NAMES.items():
        if base in names:
            return name
    if base.startswith("TIMESTAMP") or base == "DATETIME":
        return TIMESTAMP
    return None


# -- the narrower lists, each built from the sets above --------------------------------

#: Column types each catalog type accepts (:meth:`dpsql.Connection._check_schema`).
#: ``float`` accepts integer columns too, except the 128-bit unsigned one and the
#: alias ``INT`` (kept as the engine accepted them before this table was shared); any
#: ``TIMESTAMP...`` scalar is a timestamp.
CATALOG_COMPATIBLE = {
    "int": INTEGER_NAMES,
    "float": FLOAT_NAMES | DECIMAL_NAMES | (INTEGER_NAMES - {"INT", "UHUGEINT"}),
    "string": STRING_NAMES,
    "bool": BOOL_NAMES,
    "date": frozenset({"DATE"}),
    "timestamp": frozenset({"TIMESTAMP"}),
}


def catalog_accepts(catalog_type: str, type_name: str) -> bool:
    """Whether a database column of ``type_name`` may be declared ``catalog_type``.

    >>> catalog_accepts("float", "DECIMAL(10,2)"), catalog_accepts("string", "Nullable(String)")
    (True, True)
    >>> catalog_accepts("timestamp", "TIMESTAMP WITH TIME ZONE"), catalog_accepts("int", "INT[]")
    (True, False)
    """
    parsed = parse(type_name)
    if parsed.array:
        return False
    if catalog_type == "timestamp" and parsed.base.startswith("TIMESTAMP"):
        return True
    return parsed.base in CATALOG_COMPATIBLE[catalog_type]


def catalog_type(type_name: str) -> str | None:
    """The catalog type of a DuckDB column type, or None when dpsql has none for it.

    >>> catalog_type("DECIMAL(10,2)"), catalog_type("TIMESTAMP WITH TIME ZONE")
    ('float', 'timestamp')
    >>> catalog_type("VARCHAR[]") is None, catalog_type("STRUCT(a INT)") is None
    (True, True)
    """
    parsed = parse(type_name)
    if parsed.array:
        return None
    base = parsed.base
    if base in INTEGER_NAMES:
        return "int"
    if base in FLOAT_NAMES | DECIMAL_NAMES:
        return "float"
    for name in ("string", "bool", "date"):
        if base in CATALOG_COMPATIBLE[name]:
            return name
    if base.startswith("TIMESTAMP"):
        return "timestamp"
    return None


#: Key types released as plain Python values (:mod:`dpsql.keys`).
SCALAR_KEY_NAMES = (INTEGER_NAMES | FLOAT_NAMES | DECIMAL_NAMES | BOOL_NAMES
                    | (STRING_NAMES - {"ENUM"}) | {"DATE", "TIMESTAMP"})
#: Of those, the ones fetched as text.
TEMPORAL_KEY_NAMES = frozenset({"DATE", "TIMESTAMP"})
#: Of those, the ones that may hold fractions.
FRACTION_NAMES = FLOAT_NAMES | DECIMAL_NAMES
#: Statistic types whose values come back as exact integers (Python ``int``).
EXACT_INTEGER_NAMES = INTEGER_NAMES
#: Statistic types whose values Python turns into a float without error.
NUMBER_NAMES = INTEGER_NAMES | FLOAT_NAMES | DECIMAL_NAMES | {"BOOLEAN"}
