"""The dialect layer: a rewritten AST (in DuckDB terms) becomes SQL another engine runs safely.

The rewrite passes write DuckDB: ``TRY(...)`` around analyst expressions that could fail
for some rows, ``TRY_CAST``, ``LEAST``/``GREATEST`` that skip NULLs, ``HASH(uid, keys,
seed)`` for the L0 order. sqlglot transpiles most of it; what it cannot translate — or
translates into SQL that can fail on some rows — is fixed here by small AST transforms,
one list per backend (:data:`SQLITE`, :data:`POSTGRES`, :data:`SPARK`), applied by
:meth:`dpsql.backends.base.Backend.to_sql` before sqlglot writes the SQL. Nothing here
changes what a statistic means; it changes how an engine is told to compute it.

The invariant every transform keeps: **no data-dependent runtime error**. An expression
either cannot fail on any row, or the backend refuses it while planning (a failure that
depends on the schema only, refused before the budget is charged: :func:`unsupported`).

* **SQLite** cannot fail on the allowed constructs: integer overflow becomes REAL,
  division by zero and the math functions' domain errors give NULL, CAST never fails
  (non-numeric text becomes 0, not NULL as in DuckDB's TRY_CAST). Two exceptions are
  translated: ``abs(-2^63)`` (becomes ``MAX(x, -x)``) and ``SUM`` of integers, which
  raises on overflow (becomes ``TOTAL``, a float: exact below 2^53). So ``TRY(x)`` is
  just ``x``. SQLite has no GREATEST/LEAST: multi-argument MIN/MAX return NULL if any
  argument is NULL, so ``GREATEST(x, lo)`` becomes ``MAX(COALESCE(x, lo), lo)``. No
  hash function: dpsql registers its own keyed hash (``dpsql_hash``) on its connection.
* **PostgreSQL** fails on integer and float overflow and underflow, bad casts, ``sqrt``
  and ``ln`` outside their domain, ``exp`` overflow and negative substring lengths. Inside
  ``TRY(...)`` numeric arithmetic is computed in NUMERIC (no overflow) and brought back to
  the DuckDB result type through a clamp whose out-of-range ends become NULL; the
  functions get CASE guards; ``TRY_CAST`` becomes a guarded CAST (text is matched against
  a number pattern first). Casting text to DATE/TIMESTAMP needs ``pg_input_is_valid``
  (PostgreSQL 16+) and is refused on older servers. Date arithmetic is left as is: it
  fails only beyond year 294276. The L0 order is ``hashtextextended(uid|keys, seed)``.
* **Spark SQL** runs dpsql's queries with ``spark.sql.ansi.enabled = false`` (set for
  the duration of the query, see :mod:`dpsql.backends.spark`) and on the allow-list path
  (:data:`dpsql.backends.spark.TOTAL`): what Spark cannot fail on is listed, every guard
  placed on Spark's own types becomes a Spark form on the list (``try_add``/
  ``try_subtract``/``try_multiply``/``try_divide``, ``TRY_CAST``, a CASE on a range
  test), and anything else is refused before the charge. Integers are summed as
  DECIMAL(38, 0). The L0 order is ``xxhash64(uid, keys, seed)``.

Every backend orders a user's groups by the keyed hash and then by the keys themselves,
so the choice is a deterministic function of that user's own rows and the seed only.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.errors import BackendError

INT, FLOAT, DECIMAL, STRING, BOOL, DATE, TIMESTAMP, INTERVAL = (
    "int", "float", "decimal", "string", "bool", "date", "timestamp", "interval")
TEMPORAL = (DATE, TIMESTAMP, INTERVAL)
NUMERIC = (INT, FLOAT, DECIMAL)

_INT_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT",
              "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT", "INT2", "INT4", "INT8"}
_FLOAT_TYPES = {"DOUBLE", "FLOAT", "REAL", "FLOAT4", "FLOAT8", "DOUBLE PRECISION"}
_STRING_TYPES = {"VARCHAR", "TEXT", "STRING", "CHAR", "ENUM", "NVARCHAR", "BPCHAR"}
#: Ranges of the integer types, for guarded casts.
_INT_RANGE = {"TINYINT": 7, "SMALLINT": 15, "INT2": 15, "INTEGER": 31, "INT": 31,
              "INT4": 31, "BIGINT": 63, "INT8": 63}


def type_family(type_name: str | None) -> str | None:
    """The coarse family of a DuckDB-style type name (``BIGINT`` → ``int``)."""
    if not type_name:
        return None
    name = type_name.upper().strip()
    base = name.split("(")[0].strip()
    if base in _INT_TYPES:
        return INT
    if base in _FLOAT_TYPES:
        return FLOAT
    if base in ("DECIMAL", "NUMERIC"):
        return DECIMAL
    if base in _STRING_TYPES:
        return STRING
    if base in ("BOOLEAN", "BOOL"):
        return BOOL
    if base == "DATE":
        return DATE
    if base.startswith("TIMESTAMP") or base == "DATETIME":
        return TIMESTAMP
    if base == "INTERVAL":
        return INTERVAL
    return None


#: A DuckDB type name per family, for the (name, type) columns a backend's check returns.
DUCKDB_TYPE = {INT: "BIGINT", FLOAT: "DOUBLE", DECIMAL: "DECIMAL(38,10)", STRING: "VARCHAR",
               BOOL: "BOOLEAN", DATE: "DATE", TIMESTAMP: "TIMESTAMP", INTERVAL: "INTERVAL"}


@dataclass
class Context:
    """What the transforms know about one query: column families, backend options."""

    families: dict[str, str | None] = field(default_factory=dict)
    backend: str = ""
    options: dict = field(default_factory=dict)
    #: Column → the backend's type name, where one name has one type in the query.
    types: dict[str, str | None] = field(default_factory=dict)
    #: Table (lower-case) → its columns and their backend type names, for every table
    #: the query reads.
    tables: dict[str, dict[str, str]] = field(default_factory=dict)

    def family(self, node: exp.Expression | None) -> str | None:
        return infer(node, self.families)


def context(expression: exp.Expression, columns: Callable[[str], dict[str, str] | None],
            backend: str, **options) -> Context:
    """Families of every column the query reads (from the backend's metadata) and of
    every alias it defines (inferred, innermost query first)."""
    ctes = {cte.alias_or_name.lower() for cte in expression.find_all(exp.CTE)}
    seen: dict[str, set] = {}
    names: dict[str, set] = {}
    tables: dict[str, dict[str, str]] = {}
    for table in expression.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes or not name:
            continue
        tables[name] = columns(name) or {}
        for col, dtype in tables[name].items():
            seen.setdefault(col.lower(), set()).add(type_family(dtype))
            names.setdefault(col.lower(), set()).add(str(dtype).upper())
    families = {c: (f.pop() if len(f) == 1 else None) for c, f in seen.items()}
    types = {c: (t.pop() if len(t) == 1 else None) for c, t in names.items()}
    selects = list(expression.find_all(exp.Select))
    for select in reversed(selects):  # find_all is pre-order: reversed = innermost first
        for item in select.expressions:
            if isinstance(item, exp.Alias):
                families.setdefault(item.alias.lower(), infer(item.this, families))
    return Context(families, backend, options, types, tables)


def unsupported(backend: str, what: str) -> BackendError:
    """A construct this backend cannot run error-free: refused before any charge."""
    err = BackendError(
        f"{backend} cannot run {what} without a data-dependent error, so dpsql refuses it; "
        "nothing was charged")
    err.charged = False
    return err


# -- type inference ------------------------------------------------------------------

_PREDICATES = (exp.Predicate, exp.And, exp.Or, exp.Not, exp.Xor, exp.Boolean)


def _combine(families: Iterable[str | None]) -> str | None:
    fams = [f for f in families if f is not None]
    if not fams:
        return None
    if all(f in NUMERIC for f in fams):
        if FLOAT in fams:
            return FLOAT
        return DECIMAL if DECIMAL in fams else INT
    return fams[0]


def infer(node: exp.Expression | None, families: dict[str, str | None]) -> str | None:
    """The family of an expression's DuckDB result type (None when unknown)."""
    if node is None:
        return None

    def f(e):
        return infer(e, families)

    if isinstance(node, exp.Paren | exp.Try | exp.Alias):
        return f(node.this)
    if isinstance(node, exp.Column):
        return families.get(node.name.lower())
    if isinstance(node, exp.Literal):
        if node.is_string:
            return STRING
        return INT if re.fullmatch(r"[0-9]+", node.this) else DECIMAL
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Cast):  # TryCast too
        return type_family(node.to.sql(dialect="duckdb"))
    if isinstance(node, exp.Interval):
        return INTERVAL
    if isinstance(node, _PREDICATES):
        return BOOL
    if isinstance(node, exp.Add | exp.Sub):
        fams = (f(node.this), f(node.expression))
        if isinstance(node, exp.Sub) and set(fams) <= {DATE, TIMESTAMP}:
            # a difference of dates is a number of days in DuckDB and PostgreSQL (and
            # :func:`spark_date_diffs`); one with a timestamp is an interval
            return INT if set(fams) == {DATE} else INTERVAL
        if any(x in TEMPORAL for x in fams):
            return TIMESTAMP if TIMESTAMP in fams or INTERVAL in fams else DATE
        return _combine(fams)
    if isinstance(node, exp.Div | exp.Sqrt | exp.Ln | exp.Exp):
        return FLOAT
    if isinstance(node, exp.IntDiv):
        fams = (f(node.this), f(node.expression))
        return INT if all(x == INT for x in fams) else FLOAT
    if isinstance(node, exp.Mul | exp.Mod):
        return _combine((f(node.this), f(node.expression)))
    if isinstance(node, exp.Neg | exp.Abs | exp.Round | exp.Floor | exp.Ceil | exp.Sign):
        return f(node.this)
    if isinstance(node, exp.Count | exp.Length | exp.Year | exp.Month | exp.Day
                  | exp.Extract | exp.RowNumber):
        return INT
    if isinstance(node, exp.Lower | exp.Upper | exp.Substring | exp.Concat | exp.DPipe):
        return STRING
    if isinstance(node, exp.Sum | exp.Avg):
        return f(node.this)
    if isinstance(node, exp.Case):
        return _combine([f(i.args.get("true")) for i in node.args.get("ifs") or []]
                        + [f(node.args.get("default"))])
    if isinstance(node, exp.If):
        return _combine((f(node.args.get("true")), f(node.args.get("false"))))
    if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
        return _combine([f(node.this), *(f(e) for e in node.expressions)])
    if isinstance(node, exp.Nullif):
        return f(node.this)
    return None


# -- helpers ---------------------------------------------------------------------------


def _bottom_up(node: exp.Expression, fn: Callable[[exp.Expression], exp.Expression]
               ) -> exp.Expression:
    """Applies ``fn`` to every node, children first (``fn`` sees translated children)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _bottom_up(value, fn))
        elif isinstance(value, list):
            node.set(key, [_bottom_up(v, fn) if isinstance(v, exp.Expression) else v
                           for v in value])
    return fn(node)


def _replace_all(expression: exp.Expression, kind, fn) -> exp.Expression:
    """Replaces every node of type ``kind`` (outermost first) by ``fn(node)``."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for node in list(expression.find_all(*kinds)):
        if node.parent is None and node is not expression:
            continue  # inside a node already replaced
        parent, key, index = node.parent, node.arg_key, node.index
        new = fn(node)  # may wrap ``node``: its place was recorded first
        if new is node:
            continue
        if parent is None:
            expression = new
        else:
            parent.set(key, new, index)
    return expression


def _num_literal(text: str) -> exp.Expression:
    if text.startswith("-"):
        return exp.Neg(this=exp.Literal.number(text[1:]))
    return exp.Literal.number(text)


def _sentinel_clamp(value: exp.Expression, low: str, high: str) -> exp.Expression:
    """``value`` if strictly inside (low, high), else NULL; ``value`` appears once.

    ``NULLIF(NULLIF(LEAST(GREATEST(v, low), high), high), low)``: GREATEST/LEAST map
    every out-of-range value (and NaN, which sorts last) onto an end, and the NULLIFs turn
    the ends into NULL.
    """
    lo, hi = _num_literal(low), _num_literal(high)
    clamped = exp.Least(this=exp.Greatest(this=value, expressions=[_copy(lo)]),
                        expressions=[_copy(hi)])
    return exp.Nullif(this=exp.Nullif(this=clamped, expression=hi), expression=lo)


def _order_with_tiebreak(expression: exp.Expression, make_hash) -> exp.Expression:
    """Replaces the L0 order ``HASH(uid, keys..., seed)`` by this backend's keyed hash,
    followed by the keys themselves so that ties are broken by the user's own data."""
    for node in list(expression.find_all(exp.Anonymous)):
        if str(node.this).upper() != "HASH" or not isinstance(node.parent, exp.Ordered):
            continue
        ordered = node.parent
        order = ordered.parent
        args = list(node.expressions)
        uid, keys, seed = args[0], args[1:-1], args[-1]
        ordered.set("this", make_hash(uid, keys, seed))
        if isinstance(order, exp.Order):
            tail = [exp.Ordered(this=_copy(k), nulls_first=True) for k in keys]
            order.set("expressions", [*order.expressions, *tail])
    return expression


# -- SQLite ----------------------------------------------------------------------------

SQLITE_HASH = "dpsql_hash"
#: SQLite: dpsql's floating modulo, registered on its connection (C fmod; NULL on bad input).
SQLITE_FMOD = "dpsql_fmod"
#: SQLite: valid UTF-8 text, or NULL (registered on dpsql's connection; takes a BLOB).
SQLITE_UTF8 = "dpsql_utf8"


#: Longest text (bytes) dpsql reads from an SQLite column; longer text reads as NULL.
#: With values grown at most 10,000-fold by an expression (``Limits.max_value_length``) a
#: value stays below 164 MB, and a row of several keys below SQLite's 1e9-byte limit.
SQLITE_MAX_TEXT = 16_384

#: SQLite storage classes a column of each family holds when its value is of that type.
_SQLITE_CLASSES = {INT: ("integer",), BOOL: ("integer",), FLOAT: ("integer", "real"),
                   DECIMAL: ("integer", "real"), STRING: ("text",), DATE: ("text",),
                   TIMESTAMP: ("text",)}


def _typed_tables(expression: exp.Expression, ctx: Context, value) -> exp.Expression:
    """Every catalog table in a FROM or JOIN is read through ``(SELECT <value of c> AS c,
    ... FROM t) AS t``, where ``value(column, type)`` gives the expression a column is
    read as (None: as it is). CTEs of the query keep their names; a table whose columns
    all read as they are is left alone."""
    ctes = {cte.alias_or_name.lower() for cte in expression.find_all(exp.CTE)}

    def read(table: exp.Table) -> exp.Expression:
        name = table.name.lower()
        columns = ctx.tables.get(name)
        if name in ctes or not columns or not isinstance(table.parent, exp.From | exp.Join):
            return table
        outputs, changed = [], False
        for column, dtype in columns.items():
            body = value(exp.column(column), dtype)
            changed = changed or body is not None
            outputs.append(exp.column(column) if body is None else exp.alias_(body, column))
        if not changed:
            return table
        plain = exp.Table(this=exp.to_identifier(table.name))
        body = exp.select(*outputs).from_(plain)
        return body.subquery(table.alias_or_name, copy=False)
    return _replace_all(expression, exp.Table, read)


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
        test = exp.In(this=exp.Typeof(this=_copy(ref)),
                      expressions=[exp.Literal.string(c) for c in classes])
        body = ref
        if classes == ("text",):
            # at most SQLITE_MAX_TEXT bytes: an expression grows a value at most
            # max_value_length times (dpsql.limits), so no result reaches SQLite's 1e9-byte
            # limit ("string or blob too big" after the charge, on one person's long text)
            test = exp.and_(test, exp.LTE(
                this=exp.Length(this=exp.Cast(this=_copy(ref), to=exp.DataType.build("BLOB"))),
                expression=exp.Literal.number(SQLITE_MAX_TEXT)))
            # text that is not UTF-8 would be decoded on the way out: two different
            # byte strings could become one key there, so it is NULL here instead,
            # before the database groups anything
            body = exp.Anonymous(this=SQLITE_UTF8, expressions=[
                exp.Cast(this=_copy(ref), to=exp.DataType.build("BLOB"))])
        return exp.Case(ifs=[exp.If(this=test, true=body)])
    return _typed_tables(expression, ctx, value)


def sqlite_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → ``x``: SQLite's arithmetic, casts and math functions cannot fail."""
    return _replace_all(expression, exp.Try, lambda n: n.this)


def sqlite_functions(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``ABS(x)`` → ``MAX(x, -x)``: SQLite's abs(-2^63) raises 'integer overflow'.
    ``FLOOR(x)`` → ``-CEIL(-x)``: SQLAlchemy replaces SQLite's floor() by Python's
    math.floor, which fails on large values ("string or blob too big")."""
    def fix(node):
        x = node.this
        negated = exp.Neg(this=exp.paren(_copy(x), copy=False))
        if isinstance(node, exp.Abs):
            return exp.Max(this=x, expressions=[negated])
        return exp.Neg(this=exp.Ceil(this=negated))
    return _replace_all(expression, (exp.Abs, exp.Floor), fix)


def _is_constant(node: exp.Expression) -> bool:
    """A value that reads no row (and is not NULL): folded by the engine while planning."""
    return (node.find(exp.Column, exp.AggFunc, exp.Star) is None
            and not isinstance(node, exp.Null))


def sqlite_greatest_least(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """GREATEST/LEAST (which skip NULLs) → multi-argument MAX/MIN (which do not)."""
    def fix(node):
        args = [node.this, *node.expressions]
        kind = exp.Max if isinstance(node, exp.Greatest) else exp.Min
        constants = [a for a in args if _is_constant(a)]
        others = [a for a in args if not _is_constant(a)]
        if constants and len(others) <= 1:
            # GREATEST(x, lo) → MAX(COALESCE(x, lo), lo): x appears once
            guarded = [exp.Coalesce(this=x, expressions=[_copy(constants[0])]) for x in others]
            items = guarded + constants
        else:  # each argument first once, falling back on the others when NULL
            items = [exp.Coalesce(this=a, expressions=[_copy(b) for b in args if b is not a])
                     for a in args]
        if len(items) == 1:
            return items[0]
        return kind(this=items[0], expressions=items[1:])
    return _bottom_up(expression, lambda n: fix(n) if isinstance(n, exp.Greatest | exp.Least)
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
            real = exp.DataType.build("DOUBLE")
            return exp.Anonymous(this=SQLITE_FMOD, expressions=[
                exp.Cast(this=node.this, to=real), exp.Cast(this=node.expression, to=real)])
        return node
    return _bottom_up(expression, fix)


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
    return _replace_all(expression, exp.Concat, fix)


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
        month = exp.Cast(this=call("STRFTIME", text("%m"), _copy(value)),
                         to=exp.DataType.build("BIGINT"))
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
            exp.Literal.string(fmt), value]), to=exp.DataType.build("BIGINT"))

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
    return _bottom_up(expression, fix)


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
        return _num_literal(str(value))
    return _bottom_up(expression, fix)


def sqlite_sums(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``SUM`` → ``TOTAL``: SQLite's SUM of integers raises on overflow; TOTAL is a float
    sum that never fails (exact for integers below 2^53), and 0.0 instead of NULL when
    there is nothing to add, which every statistic reads as 0 anyway."""
    return _sums_as(expression, "TOTAL", distinct=True)


def _sums_as(expression: exp.Expression, function: str, distinct: bool = False
             ) -> exp.Expression:
    """Replaces every ``SUM(x)`` by ``function(x)`` (``SUM(DISTINCT x)`` too if
    ``distinct``)."""
    def fix(node):
        if isinstance(node.this, exp.Distinct) and not distinct:
            return node
        return exp.Anonymous(this=function, expressions=[node.this])
    return _replace_all(expression, exp.Sum, fix)


def _blob(value: exp.Expression) -> exp.Expression:
    """A value as BLOB: SQLite hands text to a Python function decoded as UTF-8 (an error
    on invalid bytes, which any column may hold whatever its declared type); a BLOB
    arrives as bytes."""
    return exp.Cast(this=value, to=exp.DataType.build("BLOB"))


def sqlite_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    return _order_with_tiebreak(expression, lambda uid, keys, seed: exp.Anonymous(
        this=SQLITE_HASH, expressions=[seed, _blob(uid), *(_blob(k) for k in keys)]))


SQLITE = (sqlite_typed_tables, sqlite_try, sqlite_fold_decimals, sqlite_functions,
          sqlite_greatest_least, sqlite_arithmetic, sqlite_strings, sqlite_dates,
          sqlite_sums, sqlite_hash)


# -- PostgreSQL ------------------------------------------------------------------------

#: The spaces PostgreSQL's numeric input skips (C's isspace): ``\s`` in a PostgreSQL
#: regular expression also matches Unicode spaces (U+3000) that the cast refuses.
_SPACE = r"[ \t\n\r\f\v]*"
_INT_PATTERN = "^" + _SPACE + r"[-+]?[0-9]{1,255}" + _SPACE + "$"
_NUM_PATTERN = ("^" + _SPACE + r"[-+]?([0-9]{1,255}(\.[0-9]{0,255})?|\.[0-9]{1,255})"
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
            return _sentinel_clamp(node, "-1e300", "1e300")
        return node
    return exp.Cast(this=node, to=exp.DataType.build("DECIMAL"))


#: Dates dpsql computes with on engines whose date arithmetic can leave their range
#: (PostgreSQL, Spark) or whose drivers cannot return them (Python: years 1 to 9999).
DATE_RANGE = ("0001-01-01", "9999-12-31")
#: Largest interval literal in date arithmetic, in years (the result stays in range).
MAX_INTERVAL_YEARS = 1000


def _date_literal(text: str, family: str) -> exp.Expression:
    kind = "TIMESTAMP" if family == TIMESTAMP else "DATE"
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build(kind))


def _date_sentinel(value: exp.Expression, family: str) -> exp.Expression:
    """``value`` if strictly between 0001-01-01 and 9999-12-31, else NULL."""
    lo, hi = (_date_literal(t, family) for t in DATE_RANGE)
    clamped = exp.Least(this=exp.Greatest(this=value, expressions=[_copy(lo)]),
                        expressions=[_copy(hi)])
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
                if not _is_constant(x):
                    node.set(key, _date_sentinel(x, f(x)))
            return node
        other = sides[1] if temporal[0] is sides[0] else sides[0]
        years = _interval_years(other)
        if years is None or years > MAX_INTERVAL_YEARS:
            raise unsupported(backend, "date arithmetic with other than an interval literal "
                                       f"of at most {MAX_INTERVAL_YEARS} years")
        x = temporal[0]
        if _is_constant(x):
            return node
        node.set("this" if x is sides[0] else "expression", _date_sentinel(x, f(x)))
        return node
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc) \
            and f(node.this) in (DATE, TIMESTAMP) and not _is_constant(node.this):
        node.set("this", _date_sentinel(node.this, f(node.this)))
    return node


#: The first and last instants of years 1..9999, as dates and as timestamps (on Spark in
#: the session time zone, which dpsql sets to UTC: :data:`~dpsql.backends.spark.
#: SAFE_CONF`).
_YEARS = {DATE: ("0001-01-01", "9999-12-31"),
                TIMESTAMP: ("0001-01-01 00:00:00", "9999-12-31 23:59:59.999999")}


def _in_years(value: exp.Expression, family: str) -> exp.Expression:
    """``CASE WHEN value BETWEEN <year 1> AND <year 9999> THEN value END``."""
    lo, hi = (_date_literal(t, family) for t in _YEARS[family])
    return exp.Case(ifs=[exp.If(this=exp.Between(this=_copy(value), low=lo, high=hi),
                                true=value)])


def _guard_keys(expression: exp.Expression, ctx: Context, guard) -> exp.Expression:
    """Each group key ``k`` of family ``f`` becomes ``guard(k, f)`` (None: kept) where it
    is computed, in its SELECT item and in the GROUP BY, so that it still groups as it
    is released."""
    for select in expression.find_all(exp.Select):
        group = select.args.get("group")
        for item in select.expressions:
            if not (isinstance(item, exp.Alias) and item.alias.startswith("__k")):
                continue
            body = item.this
            if isinstance(body, exp.Column) and body.name.startswith("__k"):
                continue
            guarded = guard(body, ctx.family(body))
            if guarded is None:
                continue
            if group is not None:
                group.set("expressions", [_copy(guarded) if g == body else g
                                          for g in group.expressions])
                # a window of this SELECT that partitions by the key (the ranks of
                # COUNT(DISTINCT ...) values) must name it as the GROUP BY now does
                for window in select.find_all(exp.Window):
                    if window.find_ancestor(exp.Select) is select:
                        window.set("partition_by", [
                            _copy(guarded) if p == body else p
                            for p in window.args.get("partition_by") or []])
            item.set("this", guarded)
    return expression


def _python_dates(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Group keys that are dates or timestamps outside years 1..9999 become NULL: the
    Python drivers of PostgreSQL and Spark cannot return them (an error on one person's
    value after the charge)."""
    def guard(body: exp.Expression, family: str | None) -> exp.Expression | None:
        if family not in (DATE, TIMESTAMP):
            return None
        return _in_years(_copy(body), family)
    return _guard_keys(expression, ctx, guard)


def spark_text_keys(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Text group keys that are not valid UTF-8 become NULL before Spark groups them.

    A Spark string can hold any bytes (a Parquet file written elsewhere); Spark groups
    them by their bytes, but the driver decodes ``0xFF`` as ``'\\ufffd'``, the same text
    as a real U+FFFD: two groups would come back as one key, and one person's group
    would overwrite another's statistics. NULL is decided per row, before grouping, so
    such rows simply join the NULL group. Only keys are guarded: the text is read as it
    is everywhere else (a user key of such bytes stays its own user). Every key is
    guarded, whatever its inferred type: the inference reads columns by name, and a
    derived column named like an integer column (``name AS age``) or an unmodelled
    function would pass for a number; of any other type, ``is_valid_utf8`` reads its
    text, which is always valid."""
    def guard(body: exp.Expression, family: str | None) -> exp.Expression | None:
        valid = exp.Anonymous(this="IS_VALID_UTF8", expressions=[_copy(body)])
        return exp.Case(ifs=[exp.If(this=valid, true=_copy(body))])
    return _guard_keys(expression, ctx, guard)


def _pg_back(value: exp.Expression, family: str | None) -> exp.Expression:
    """A NUMERIC result back to the DuckDB result type; out of its range → NULL."""
    if family == INT:
        # strictly between the bounds, a value rounds to a BIGINT (half away from 0)
        return exp.Cast(this=_sentinel_clamp(value, "-9223372036854775808.5",
                                             "9223372036854775807.5"),
                        to=exp.DataType.build("BIGINT"))
    if family == FLOAT:
        # ROUND(.., 300): a tiny NUMERIC would underflow (an error) when cast to float8
        rounded = exp.Round(this=value, decimals=exp.Literal.number(300))
        return exp.Cast(this=_sentinel_clamp(rounded, "-1.7e308", "1.7e308"),
                        to=exp.DataType.build("DOUBLE"))
    # DECIMAL (or unknown): stay NUMERIC, bounded so that later steps cannot overflow
    return _sentinel_clamp(value, "-1e300", "1e300")


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
        cond = test(this=_copy(x), expression=exp.Literal.number(0))
        return exp.Case(ifs=[exp.If(this=cond, true=node)])
    if isinstance(node, exp.Exp):
        bounded = exp.Cast(this=_sentinel_clamp(_numeric(node.this, ctx), "-700", "709"),
                           to=exp.DataType.build("DOUBLE"))
        return exp.Exp(this=bounded)
    if isinstance(node, exp.Substring):
        # substr(text, int, int): a negative length fails, and BIGINT arguments are refused
        for key, low in (("start", "-2147483648"), ("length", "0")):
            arg = node.args.get(key)
            if arg is not None and not isinstance(arg, exp.Literal):
                clamped = exp.Least(this=exp.Greatest(this=arg, expressions=[
                    _num_literal(low)]), expressions=[exp.Literal.number(2147483647)])
                node.set(key, exp.Cast(this=clamped, to=exp.DataType.build("INT")))
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
    if _is_constant(x) or isinstance(x, exp.Null):
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
                exp.If(this=exp.In(this=_copy(word), expressions=[exp.Literal.string(v)
                                                                  for v in _FALSE]),
                       true=exp.false())])
    if tf in (DATE, TIMESTAMP) and src == STRING:
        if ctx.options.get("server_version", 0) >= 160000:
            valid = exp.Anonymous(this="PG_INPUT_IS_VALID", expressions=[
                _copy(x), exp.Literal.string("date" if tf == DATE else "timestamp")])
            return exp.Case(ifs=[exp.If(this=valid, true=cast)])
        raise unsupported("PostgreSQL < 16", f"TRY_CAST of text to {base}")
    if tf in NUMERIC:
        if src == BOOL:
            return exp.Cast(this=exp.Cast(this=x, to=exp.DataType.build("INT")), to=to)
        guard = None
        if src == STRING:
            pattern = _INT_PATTERN if tf == INT else _NUM_PATTERN
            guard = exp.RegexpLike(this=_copy(x), expression=exp.Literal.string(pattern))
            value = exp.Cast(this=x, to=exp.DataType.build("DECIMAL"))
        elif src in (*NUMERIC, None):
            # in NUMERIC, exactly: a float's own comparisons with the bounds would round
            # them (2147483647.5 is 2147483648 as a float4), and NaN and infinities are
            # NUMERIC values that the sentinel maps to NULL
            value = _numeric(x, ctx) if tf == INT or src != FLOAT else x
        else:
            return cast  # a type error while planning
        if tf == INT:
            bits = _INT_RANGE.get(base, 63)
            low, high = f"-{2 ** bits}.5", f"{2 ** bits - 1}.5"
            safe = exp.Cast(this=_sentinel_clamp(value, low, high), to=to)
        elif tf == FLOAT:
            limit = _FLOAT_LIMIT.get(base, "1.7e308")
            # few enough decimals that no value underflows the target (float4: 1e-38)
            digits = 300 if limit == "1.7e308" else 37
            if src != FLOAT or limit != "1.7e308":
                value = exp.Cast(this=value, to=exp.DataType.build("DECIMAL")) \
                    if src == FLOAT else value
                value = exp.Round(this=value, decimals=exp.Literal.number(digits))
            safe = exp.Cast(this=_sentinel_clamp(value, f"-{limit}", limit), to=to)
        else:
            params = [p.name for p in to.expressions]
            precision, scale = (int(params[0]) if params else 18,
                                int(params[1]) if len(params) > 1 else (3 if not params else 0))
            digits = precision - scale
            limit = f"{'9' * digits or '0'}.{'9' * scale}5" if scale else f"{'9' * digits}.5"
            safe = exp.Cast(this=_sentinel_clamp(value, f"-{limit}", limit), to=to)
        return safe if guard is None else exp.Case(ifs=[exp.If(this=guard, true=safe)])
    raise unsupported("PostgreSQL", f"TRY_CAST from {src or 'an unknown type'} to {base}")


def postgres_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → ``x``, and every operation of the query — inside TRY(...) or not,
    dpsql's own arithmetic over aggregates included — made safe (see module doc):
    PostgreSQL raises on float overflow and underflow too, so no operation may stay as
    written. :func:`dpsql.backends.total.check_total` verifies the result."""
    expression = _replace_all(expression, exp.Try, lambda n: n.this)
    return _bottom_up(expression, lambda n: _pg_safe_node(n, ctx))


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
                node.set("expression", exp.Cast(this=value, to=exp.DataType.build("TIMESTAMP")))
        else:
            unit = unit_of(node.args.get("unit"), _PG_TRUNC_UNITS, "DATE_TRUNC")
            node.set("unit", exp.var(unit))
        return node
    return _replace_all(expression, (exp.Extract, exp.TimestampTrunc, exp.DateTrunc), fix)


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
        if value is not None and family in (DATE, TIMESTAMP) and not _is_constant(value):
            node.set(slot, _date_sentinel(value, family))
        return exp.Cast(this=node, to=exp.DataType.build("BIGINT"))
    return _replace_all(expression, (exp.Year, exp.Month, exp.Day, exp.Extract), fix)


def postgres_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    def make(uid, keys, seed):
        parts: list[exp.Expression] = []
        for value in (uid, *keys):
            text = exp.Coalesce(this=exp.Cast(this=_copy(value), to=exp.DataType.build("TEXT")),
                                expressions=[exp.Literal.string("\\N")])
            parts += [text, exp.Literal.string("|")]
        return exp.Anonymous(this="HASHTEXTEXTENDED", expressions=[
            exp.Concat(expressions=parts), seed])
    return _order_with_tiebreak(expression, make)


def postgres_sums(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every SUM and AVG adds NUMERICs: PostgreSQL's float8 sum raises on overflow (a
    double total past 1.8e308), while a NUMERIC sum of fewer than 2**48 values of at
    most 1.8e308 (any float8, any bounded form) stays far inside NUMERIC's 131072 digits,
    and NaN and infinities are NUMERIC values (PostgreSQL 14+). Integer sums were exact
    NUMERIC sums already."""
    def numeric(e: exp.Expression) -> exp.Expression:
        if isinstance(e, exp.Cast) and e.to.this == exp.DataType.Type.DECIMAL \
                and not e.to.expressions:
            return e
        return exp.Cast(this=e, to=exp.DataType.build("DECIMAL"))

    def fix(node):
        arg = node.this
        if isinstance(arg, exp.Distinct):
            arg.set("expressions", [numeric(e) for e in arg.expressions])
        else:
            node.set("this", numeric(arg))
        return node
    return _replace_all(expression, (exp.Sum, exp.Avg), fix)


POSTGRES = (postgres_try, postgres_date_units, postgres_extract, _python_dates, postgres_sums)


# -- Spark SQL -------------------------------------------------------------------------
#
# Spark runs on the allow-list path (:data:`dpsql.backends.spark.TOTAL`): the guards
# are placed on the tree typed by Spark itself, then :func:`spark_try` turns each guard
# into a Spark form that is on the list (Spark has no generic TRY), and the final tree
# is checked against the list on Spark's own types. Nothing here decides what is total.

#: DuckDB's binary arithmetic → Spark's TRY forms: numeric overflow and a zero divisor
#: give NULL (TRY evaluation); on dates, timestamps and intervals Spark evaluates them
#: under ``TryEval``, which turns any error of the operation into NULL.
_SPARK_TRY = {exp.Add: "TRY_ADD", exp.Sub: "TRY_SUBTRACT", exp.Mul: "TRY_MULTIPLY",
              exp.Div: "TRY_DIVIDE"}
#: Nodes that choose between or compare operands: Spark converts a DATE operand that
#: meets a TIMESTAMP one per row, which fails ("long overflow") for far dates.
_SPARK_MEETS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ, exp.Between, exp.In, exp.Case, exp.Coalesce, exp.Greatest,
                exp.Least, exp.Nullif)


def _spark_arith(node: exp.Expression, ctx: Context) -> exp.Expression:
    """``a op b`` → ``TRY_op(a, b)``; ``a // b`` of non-integers is DuckDB's plain
    division (``5.5 // 2 = 2.75``), of integers Spark's ``DIV`` (listed); ``-x`` of a
    non-literal → ``TRY_SUBTRACT(0, x)``."""
    name = _SPARK_TRY.get(type(node))
    if name is not None:
        return exp.Anonymous(this=name, expressions=[node.this, node.expression])
    if isinstance(node, exp.IntDiv) and not (ctx.family(node.this) == INT
                                             and ctx.family(node.expression) == INT):
        return exp.Anonymous(this="TRY_DIVIDE", expressions=[node.this, node.expression])
    if isinstance(node, exp.Neg) and not _is_constant(node.this):
        return exp.Anonymous(this="TRY_SUBTRACT", expressions=[exp.Literal.number(0),
                                                               node.this])
    return node


def _spark_guard(node: exp.Expression, ctx: Context) -> exp.Expression:
    """The Spark form of ``TRY(node)`` (``node``'s operands already in Spark form).

    Arithmetic → its TRY function; date truncation → ``CASE WHEN x BETWEEN <year 1> AND
    <year 9999> THEN trunc(x) END``; a comparison or choice of DATEs with TIMESTAMPs →
    each DATE operand as ``TRY_CAST(d AS TIMESTAMP)``. Anything else is left as it is:
    the final check refuses it (before the charge) unless it is on the list."""
    if isinstance(node, (*_SPARK_TRY, exp.IntDiv, exp.Neg)):
        return _spark_arith(node, ctx)
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        family = ctx.family(node.this)
        if family in _YEARS:
            return _in_years_of(node.this, node, family)
        return node
    if isinstance(node, _SPARK_MEETS):
        slots = [("this", None)] if not isinstance(node, exp.Case) else []
        for key in ("expression", "low", "high"):
            if node.args.get(key) is not None:
                slots.append((key, None))
        for key in ("expressions", "ifs"):
            for i, _ in enumerate(node.args.get(key) or []):
                slots.append((key, i))
        if isinstance(node, exp.Case) and node.args.get("default") is not None:
            slots.append(("default", None))
        values = []
        for key, i in slots:
            value = node.args[key] if i is None else node.args[key][i]
            values.append((value.args["true"] if isinstance(value, exp.If) else value,
                           value if isinstance(value, exp.If) else None, key, i))
        families = {ctx.family(v) for v, *_ in values}
        if not {DATE, TIMESTAMP} <= families:
            return node
        for value, branch, key, i in values:
            if ctx.family(value) != DATE or _is_constant(value):
                continue
            cast = exp.TryCast(this=value, to=exp.DataType.build("TIMESTAMP"), safe=True)
            if branch is not None:
                branch.set("true", cast)
            elif i is None:
                node.set(key, cast)
            else:
                node.args[key][i] = cast
                cast.parent, cast.arg_key, cast.index = node, key, i
        return node
    return node


def _in_years_of(value: exp.Expression, result: exp.Expression,
                 family: str) -> exp.Expression:
    """``CASE WHEN value BETWEEN <year 1> AND <year 9999> THEN result END``."""
    lo, hi = (_date_literal(t, family) for t in _YEARS[family])
    return exp.Case(ifs=[exp.If(this=exp.Between(this=_copy(value), low=lo, high=hi),
                                true=result)])


def spark_typed_tables(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every table is read with its dates and timestamps kept to years 1..9999 (NULL
    otherwise).

    Spark stores dates up to about year ±5,800,000 and timestamps up to ±290,000, but
    its DATE to TIMESTAMP conversion, interval arithmetic and ``DATE_TRUNC`` raise "long
    overflow" near those limits, with ANSI mode off: values the driver cannot return
    either. Reading such a value as NULL is row by row and data-independent (a
    comparison of dates cannot fail) and keeps every ordinary value as it is. The
    allow-list does not rely on it: operations that fail on far dates are guarded
    where they are.
    """
    def value(ref: exp.Column, dtype: str) -> exp.Expression | None:
        family = type_family(dtype)
        return _in_years(ref, family) if family in _YEARS else None
    return _typed_tables(expression, ctx, value)


_CANONICAL_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9:.]*)?")


def spark_date_casts(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every cast to DATE or TIMESTAMP (``TRY_CAST`` too, and the literals ``DATE '...'``,
    which are casts) gives NULL outside years 1..9999, as :func:`spark_typed_tables`
    does for stored values (dates the driver could not return). Literals of four-digit
    years are in range already and kept as they are."""
    def fix(node: exp.Cast) -> exp.Expression:
        family = type_family(node.to.sql(dialect="duckdb"))
        if family not in _YEARS:
            return node
        if isinstance(node.this, exp.Literal) and node.this.is_string \
                and _CANONICAL_DATE.fullmatch(node.this.this):
            return node
        return _in_years(node, family)
    return _replace_all(expression, exp.Cast, fix)


def spark_date_diffs(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``a - b`` of two dates → ``DATEDIFF(a, b)``: a number of days, as DuckDB and
    PostgreSQL compute it. Spark's own ``a - b`` is an interval, which overflows
    ("long overflow") for far dates. Run before typing: it translates a meaning."""
    def fix(node: exp.Sub) -> exp.Expression:
        if ctx.family(node.this) == DATE and ctx.family(node.expression) == DATE:
            return exp.Anonymous(this="DATEDIFF", expressions=[node.this, node.expression])
        return node
    return _replace_all(expression, exp.Sub, fix)


def spark_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → the Spark form of ``x`` (:func:`_spark_guard`); and every other
    ``+ - * /`` (dpsql's own arithmetic over aggregates included) → its TRY function,
    which is the same operation with NULL instead of an overflow."""
    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Try):
            inner = node.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
            return _spark_guard(inner, ctx)
        if isinstance(node, tuple(_SPARK_TRY)):
            return _spark_arith(node, ctx)
        return node
    return _bottom_up(expression, fix)


def spark_casts(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """A cast to an integer type rounds (half to even from DOUBLE, half away from zero
    from DECIMAL) in DuckDB; Spark truncates, so round first."""
    def fix(node):
        if type_family(node.to.sql(dialect="duckdb")) != INT:
            return node
        src = ctx.family(node.this)
        if src == FLOAT:
            node.set("this", exp.Anonymous(this="BROUND", expressions=[node.this]))
        elif src == DECIMAL:
            node.set("this", exp.Round(this=node.this))
        return node
    return _replace_all(expression, exp.Cast, fix)


def spark_sums(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Integers are summed as DECIMAL(38, 0): Spark's BIGINT sum wraps past 2**63 with
    ANSI off (a statistic moved far beyond its sensitivity), while 38 digits hold any
    sum of 64-bit values over fewer than 2**48 rows. Run before typing (the family is
    dpsql's guess; the allow-list accepts the sum only if Spark types the argument as
    an integer, and anything else is summed as DOUBLE by the guard placement)."""
    def widen(node):
        if ctx.family(node.this) == INT and not isinstance(node.this, exp.Distinct):
            node.set("this", exp.Cast(this=node.this, to=exp.DataType.build("DECIMAL(38, 0)")))
        return node
    return _replace_all(expression, exp.Sum, widen)


def spark_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    return _order_with_tiebreak(expression, lambda uid, keys, seed: exp.Anonymous(
        this="XXHASH64", expressions=[uid, *keys, seed]))


def spark_try_casts(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every cast → ``TRY_CAST`` (marked safe: sqlglot writes an unmarked one as Spark's
    plain CAST). With ANSI mode off the two give the same value wherever CAST does not
    raise, and CAST still raises on some values (a far DATE to TIMESTAMP: "long
    overflow"); TRY_CAST gives NULL there. So no plain CAST is left to judge."""
    def fix(node: exp.Cast) -> exp.Expression:
        if type(node) is exp.Cast:
            return exp.TryCast(this=node.this, to=node.args["to"], safe=True)
        node.set("safe", True)
        return node
    return _replace_all(expression, exp.Cast, fix)


#: Spark's transforms before typing: translations of DuckDB's meanings.
SPARK_PRE = (spark_date_diffs, spark_sums, spark_hash)
#: ... and after the guards are placed.
SPARK = (spark_try, spark_typed_tables, spark_date_casts, spark_casts, _python_dates,
         spark_text_keys, spark_try_casts)


#: Nodes the transforms of one query may copy, besides a multiple of its own size (see
#: :func:`_copy`).
COPY_ALLOWANCE = 5_000
#: ... and that multiple.
COPY_FACTOR = 4
_copies: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "dpsql_transform_copies", default=None)


def _copy(node: exp.Expression) -> exp.Expression:
    """``node.copy()``, counted: a transform that writes an argument twice doubles per
    nesting level (``GREATEST(GREATEST(...), ...)``, ``ABS(ABS(...))``), so 300
    characters of SQL could become gigabytes before the charge. Every copy the
    transforms make is counted against the query's allowance, and a query that would go
    beyond it is refused (before any charge) instead of being written out."""
    copied = node.copy()
    left = _copies.get()
    if left is not None:
        left[0] -= sum(1 for _ in copied.walk())
        if left[0] < 0:
            err = BackendError(
                "written for this database, the query would grow beyond the size dpsql "
                "allows (nested functions that the database needs written out twice); "
                "nothing was charged")
            err.charged = False
            raise err
    return copied


def apply(expression: exp.Expression, transforms, ctx: Context) -> exp.Expression:
    """Runs a backend's transforms on a copy of a rewritten query."""
    expression = expression.copy()
    size = sum(1 for _ in expression.walk())
    token = _copies.set([COPY_ALLOWANCE + COPY_FACTOR * size])
    try:
        for transform in transforms:
            expression = transform(expression, ctx)
    finally:
        _copies.reset(token)
    return expression
