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
  the duration of the query, see :mod:`dpsql.backends.spark`): then no arithmetic, cast or
  function of the allowed set raises. Inside ``TRY(...)`` arithmetic also becomes
  ``try_add``/``try_subtract``/``try_multiply``/``try_divide`` so that an overflow gives
  NULL (as in DuckDB) rather than a wrapped value; sums become ``try_sum``. The L0 order
  is ``xxhash64(uid, keys, seed)``.

Every backend orders a user's groups by the keyed hash and then by the keys themselves,
so the choice is a deterministic function of that user's own rows and the seed only.
"""

from __future__ import annotations

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

    def family(self, node: exp.Expression | None) -> str | None:
        return infer(node, self.families)


def context(expression: exp.Expression, columns: Callable[[str], dict[str, str] | None],
            backend: str, **options) -> Context:
    """Families of every column the query reads (from the backend's metadata) and of
    every alias it defines (inferred, innermost query first)."""
    ctes = {cte.alias_or_name.lower() for cte in expression.find_all(exp.CTE)}
    seen: dict[str, set] = {}
    for table in expression.find_all(exp.Table):
        name = table.name.lower()
        if name in ctes or not name:
            continue
        for col, dtype in (columns(name) or {}).items():
            seen.setdefault(col.lower(), set()).add(type_family(dtype))
    families = {c: (f.pop() if len(f) == 1 else None) for c, f in seen.items()}
    selects = list(expression.find_all(exp.Select))
    for select in reversed(selects):  # find_all is pre-order: reversed = innermost first
        for item in select.expressions:
            if isinstance(item, exp.Alias):
                families.setdefault(item.alias.lower(), infer(item.this, families))
    return Context(families, backend, options)


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
    clamped = exp.Least(this=exp.Greatest(this=value, expressions=[lo.copy()]),
                        expressions=[hi.copy()])
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
            tail = [exp.Ordered(this=k.copy(), nulls_first=True) for k in keys]
            order.set("expressions", [*order.expressions, *tail])
    return expression


# -- SQLite ----------------------------------------------------------------------------

SQLITE_HASH = "dpsql_hash"
#: SQLite: dpsql's floating modulo, registered on its connection (C fmod; NULL on bad input).
SQLITE_FMOD = "dpsql_fmod"


def sqlite_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → ``x``: SQLite's arithmetic, casts and math functions cannot fail."""
    return _replace_all(expression, exp.Try, lambda n: n.this)


def sqlite_functions(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``ABS(x)`` → ``MAX(x, -x)``: SQLite's abs(-2^63) raises 'integer overflow'.
    ``FLOOR(x)`` → ``-CEIL(-x)``: SQLAlchemy replaces SQLite's floor() by Python's
    math.floor, which fails on large values ("string or blob too big")."""
    def fix(node):
        x = node.this
        negated = exp.Neg(this=exp.paren(x.copy(), copy=False))
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
            guarded = [exp.Coalesce(this=x, expressions=[constants[0].copy()]) for x in others]
            items = guarded + constants
        else:  # each argument first once, falling back on the others when NULL
            items = [exp.Coalesce(this=a, expressions=[b.copy() for b in args if b is not a])
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
            return exp.Anonymous(this=SQLITE_FMOD, expressions=[node.this, node.expression])
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


def sqlite_dates(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Dates are ISO text in SQLite: YEAR(d) → ``CAST(STRFTIME('%Y', d) AS INTEGER)``,
    ``d ± INTERVAL 'n' UNIT`` → ``DATE(d, '±n units')`` (DATETIME for timestamps)."""
    def part(unit: str, value: exp.Expression) -> exp.Expression:
        fmt = _SQLITE_PARTS.get(unit.upper())
        if fmt is None:
            raise unsupported("SQLite", f"EXTRACT({unit} ...)")
        return exp.Cast(this=exp.Anonymous(this="STRFTIME", expressions=[
            exp.Literal.string(fmt), value]), to=exp.DataType.build("BIGINT"))

    def fix(node):
        if isinstance(node, exp.Year | exp.Month | exp.Day):
            return part(type(node).__name__, node.this)
        if isinstance(node, exp.Extract):
            return part(node.this.name, node.expression)
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
    return _sums_as(expression, "TOTAL")


def _sums_as(expression: exp.Expression, function: str) -> exp.Expression:
    """Replaces every non-DISTINCT ``SUM(x)`` by ``function(x)``."""
    def fix(node):
        if isinstance(node.this, exp.Distinct):
            return node
        return exp.Anonymous(this=function, expressions=[node.this])
    return _replace_all(expression, exp.Sum, fix)


def sqlite_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    return _order_with_tiebreak(expression, lambda uid, keys, seed: exp.Anonymous(
        this=SQLITE_HASH, expressions=[seed, uid, *keys]))


SQLITE = (sqlite_try, sqlite_fold_decimals, sqlite_functions, sqlite_greatest_least,
          sqlite_arithmetic, sqlite_strings, sqlite_dates, sqlite_sums, sqlite_hash)


# -- PostgreSQL ------------------------------------------------------------------------

_INT_PATTERN = r"^\s*[-+]?[0-9]{1,255}\s*$"
_NUM_PATTERN = r"^\s*[-+]?([0-9]{1,255}(\.[0-9]{0,255})?|\.[0-9]{1,255})([eE][-+]?[0-9]{1,3})?\s*$"
_TRUE = ("true", "t", "yes", "y", "on", "1")
_FALSE = ("false", "f", "no", "n", "off", "0")
_FLOAT_LIMIT = {"DOUBLE": "1.7e308", "REAL": "3.4e38", "FLOAT": "3.4e38"}


def _numeric(node: exp.Expression, ctx: Context) -> exp.Expression:
    """``node`` as NUMERIC, in which PostgreSQL's + - * / % never overflow."""
    if ctx.family(node) == DECIMAL or (isinstance(node, exp.Literal) and not node.is_string):
        return node
    return exp.Cast(this=node, to=exp.DataType.build("DECIMAL"))


def _pg_back(value: exp.Expression, family: str | None) -> exp.Expression:
    """A NUMERIC result back to the DuckDB result type; out of its range → NULL."""
    if family == INT:
        return exp.Cast(this=_sentinel_clamp(value, "-9223372036854775809",
                                             "9223372036854775808"),
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
            return node  # date arithmetic: fails only beyond PostgreSQL's date range
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
    if isinstance(node, exp.Neg | exp.Abs):
        if f(node.this) not in (*NUMERIC, None):
            return node
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
        cond = test(this=x.copy(), expression=exp.Literal.number(0))
        return exp.Case(ifs=[exp.If(this=cond, true=node)])
    if isinstance(node, exp.Exp):
        bounded = exp.Cast(this=_sentinel_clamp(node.this, "-700", "709"),
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
                exp.If(this=exp.In(this=word.copy(), expressions=[exp.Literal.string(v)
                                                                  for v in _FALSE]),
                       true=exp.false())])
    if tf in (DATE, TIMESTAMP) and src == STRING:
        if ctx.options.get("server_version", 0) >= 160000:
            valid = exp.Anonymous(this="PG_INPUT_IS_VALID", expressions=[
                x.copy(), exp.Literal.string("date" if tf == DATE else "timestamp")])
            return exp.Case(ifs=[exp.If(this=valid, true=cast)])
        raise unsupported("PostgreSQL < 16", f"TRY_CAST of text to {base}")
    if tf in NUMERIC:
        if src == BOOL:
            return exp.Cast(this=exp.Cast(this=x, to=exp.DataType.build("INT")), to=to)
        guard = None
        if src == STRING:
            pattern = _INT_PATTERN if tf == INT else _NUM_PATTERN
            guard = exp.RegexpLike(this=x.copy(), expression=exp.Literal.string(pattern))
            value = exp.Cast(this=x, to=exp.DataType.build("DECIMAL"))
        elif src in (*NUMERIC, None):
            value = x if src == FLOAT else _numeric(x, ctx)
        else:
            return cast  # a type error while planning
        if tf == INT:
            bits = _INT_RANGE.get(base, 63)
            low, high = f"-{2 ** bits}.5", f"{2 ** bits - 1}.5"
            safe = exp.Cast(this=_sentinel_clamp(value, low, high), to=to)
        elif tf == FLOAT:
            limit = _FLOAT_LIMIT.get(base, "1.7e308")
            if src != FLOAT:
                value = exp.Round(this=value, decimals=exp.Literal.number(300))
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
    """``TRY(x)`` → ``x`` with every operation that can fail made safe (see module doc);
    ``TRY_CAST`` outside TRY(...) too."""
    def fix(node):
        return _bottom_up(node.this, lambda n: _pg_safe_node(n, ctx))
    expression = _replace_all(expression, exp.Try, fix)
    return _replace_all(expression, exp.TryCast, lambda n: _pg_try_cast(n, ctx))


_PG_INTEGER_PARTS = {"YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "DOW", "DOY", "QUARTER",
                     "WEEK", "DECADE", "CENTURY", "ISODOW", "ISOYEAR", "MILLENNIUM"}


def postgres_extract(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """EXTRACT returns NUMERIC in PostgreSQL 14+, BIGINT in DuckDB: cast the integer parts
    back, so that keys such as ``YEAR(d)`` come out as integers."""
    def fix(node):
        unit = type(node).__name__.upper() if isinstance(node, exp.Year | exp.Month | exp.Day) \
            else node.this.name.upper()
        if unit not in _PG_INTEGER_PARTS:
            return node
        return exp.Cast(this=node, to=exp.DataType.build("BIGINT"))
    return _replace_all(expression, (exp.Year, exp.Month, exp.Day, exp.Extract), fix)


def postgres_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    def make(uid, keys, seed):
        parts: list[exp.Expression] = []
        for value in (uid, *keys):
            text = exp.Coalesce(this=exp.Cast(this=value.copy(), to=exp.DataType.build("TEXT")),
                                expressions=[exp.Literal.string("\\N")])
            parts += [text, exp.Literal.string("|")]
        return exp.Anonymous(this="HASHTEXTEXTENDED", expressions=[
            exp.Concat(expressions=parts), seed])
    return _order_with_tiebreak(expression, make)


POSTGRES = (postgres_try, postgres_extract, postgres_hash)


# -- Spark SQL -------------------------------------------------------------------------

_SPARK_TRY = {exp.Add: "TRY_ADD", exp.Sub: "TRY_SUBTRACT", exp.Mul: "TRY_MULTIPLY",
              exp.Div: "TRY_DIVIDE"}


def _spark_safe_node(node: exp.Expression, ctx: Context) -> exp.Expression:
    f = ctx.family
    name = _SPARK_TRY.get(type(node))
    if name is not None:
        return exp.Anonymous(this=name, expressions=[node.this, node.expression])
    if isinstance(node, exp.IntDiv) and not (f(node.this) == INT and f(node.expression) == INT):
        return exp.Anonymous(this="TRY_DIVIDE", expressions=[node.this, node.expression])
    if isinstance(node, exp.Neg) and f(node.this) in (*NUMERIC, None):
        return exp.Anonymous(this="TRY_SUBTRACT", expressions=[exp.Literal.number(0),
                                                               node.this])
    return node


def spark_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → ``x`` with overflow-prone arithmetic as ``try_*`` functions."""
    def fix(node):
        return _bottom_up(node.this, lambda n: _spark_safe_node(n, ctx))
    return _replace_all(expression, exp.Try, fix)


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
    """``SUM`` → ``try_sum``: NULL (read as 0) rather than a wrapped value on overflow."""
    return _sums_as(expression, "TRY_SUM")


def spark_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    return _order_with_tiebreak(expression, lambda uid, keys, seed: exp.Anonymous(
        this="XXHASH64", expressions=[uid, *keys, seed]))


SPARK = (spark_try, spark_casts, spark_sums, spark_hash)


def apply(expression: exp.Expression, transforms, ctx: Context) -> exp.Expression:
    """Runs a backend's transforms on a copy of a rewritten query."""
    expression = expression.copy()
    for transform in transforms:
        expression = transform(expression, ctx)
    return expression
