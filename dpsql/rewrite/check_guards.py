"""No data-dependent failure: types, ranges and the check of the final SQL.

An error oracle leaks whatever ε was charged: if a query fails for some data and not
for others, *whether* it fails tells the analyst about the data (``CASE WHEN pid = 42
AND age > 50 THEN 1 // 0 END`` reads one person's age bit by bit). So every expression
of the SQL dpsql runs either cannot fail on any row, or sits inside a guard the engine
honours, or the query is refused before the charge. This module decides which,
from one model shared by the rewrite and the check:

* :class:`Typer` gives every node of a rewritten tree its type (family, integer width,
  decimal scale) and, where dpsql can prove one, its **value range**: literals,
  clamps ``LEAST(GREATEST(x, lo), hi)``, the sentinel clamps of the PostgreSQL dialect,
  casts, COUNT. Columns are typed from the backend's metadata (the check) or from the
  catalog (the rewrite, which then knows less and guards more).
* :func:`node_failure` says whether one node can raise, given its children's types,
  under a backend's failure model (:data:`dpsql.backends.dialects.FAILURES`: which
  operations raise on that engine and which functions guard).
* :func:`unguardable` names what no guard catches on any engine: a LIKE pattern that is
  not a constant valid everywhere, a REPLACE that can lengthen strings (DuckDB's TRY
  does not catch running out of memory), a SUM or AVG whose total can overflow (an
  aggregate cannot be put inside TRY).
* :func:`check_guards` walks the **final** tree a backend is about to run (after the
  dialect transforms) and refuses, before the charge, any node that can fail outside a
  guard. The rewrite pass :func:`dpsql.rewrite.guard_errors.guard_errors` places the
  guards from the same model; the check is the proof that nothing slipped through
  (a pass that drops or bypasses a guard is refused, not run).

Assumptions (stated so they can be checked): a query reads fewer than 2**48 rows
(:data:`MAX_ROWS`), so a SUM of values of magnitude at most 2**79 cannot overflow a
128-bit accumulator; a value's range is derived only from literals, clamps and types,
never from the catalog's bounds (those are what the clamps enforce).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

from sqlglot import exp

from dpsql.backends.dialects import (
    BOOL,
    DATE,
    DECIMAL,
    FAILURES,
    FLOAT,
    INT,
    INTERVAL,
    STRING,
    TIMESTAMP,
    Failures,
)
from dpsql.backends.total import _name
from dpsql.errors import BackendError, UnsupportedQueryError

#: A number of unknown kind (a catalog ``float`` column may be INT, DECIMAL or DOUBLE).
NUMBER = "number"
#: The type of NULL (compatible with anything).
NULL = "null"
NUMBERS = (INT, FLOAT, DECIMAL, NUMBER)
#: Fewer rows than this reach any aggregate of a query (see the module docstring).
MAX_ROWS = 2**48
#: Longest LIKE pattern or REPLACE argument dpsql lets through (characters).
MAX_PATTERN = 1_000
#: Largest magnitude an exact (decimal) intermediate may reach in PostgreSQL's NUMERIC
#: before dpsql stops trusting it not to overflow (NUMERIC allows 131072 digits).
_NUMERIC_LIMIT = Fraction(10) ** 1000
_DOUBLE_MAX = Fraction(17976931348623157) * Fraction(10) ** 292
_REAL_MAX = Fraction(34028234663852886) * Fraction(10) ** 22

_INTS = {"TINYINT": 8, "INT1": 8, "SMALLINT": 16, "INT2": 16, "INTEGER": 32, "INT": 32,
         "INT4": 32, "SIGNED": 32, "BIGINT": 64, "INT8": 64, "LONG": 64, "HUGEINT": 128,
         "INT128": 128}
_UINTS = {"UTINYINT": 8, "USMALLINT": 16, "UINTEGER": 32, "UBIGINT": 64, "UHUGEINT": 128,
          "UINT128": 128}
_FLOATS = {"DOUBLE", "FLOAT", "REAL", "FLOAT4", "FLOAT8", "DOUBLE PRECISION"}
_STRINGS = {"VARCHAR", "TEXT", "STRING", "CHAR", "ENUM", "NVARCHAR", "BPCHAR", "NCHAR"}
_CATALOG = {"int": INT, "float": NUMBER, "string": STRING, "bool": BOOL, "date": DATE,
            "timestamp": TIMESTAMP}


@dataclass(frozen=True)
class Type:
    """What dpsql knows of an expression's values.

    ``low``/``high`` bound the values (None: unbounded; an ``open`` end is excluded);
    ``bits`` is an integer's width, ``scale`` a decimal's digits after the point
    (None: unknown); ``literal`` marks a constant written in the SQL, which engines
    convert while planning (its errors do not depend on the data).
    """

    family: str | None = None
    bits: int | None = None
    scale: int | None = None
    low: Fraction | None = None
    high: Fraction | None = None
    open_low: bool = False
    open_high: bool = False
    literal: bool = False
    #: Zero is excluded (``NULLIF(x, 0)``, a non-zero literal).
    nonzero: bool = False

    @property
    def numeric(self) -> bool:
        return self.family in NUMBERS

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def magnitude(self) -> Fraction | None:
        return max(abs(self.low), abs(self.high)) if self.bounded else None

    def within(self, low: Fraction, high: Fraction, strict: bool = False) -> bool:
        """Every value lies in [low, high] (in (low, high) with ``strict``)."""
        if not self.bounded:
            return False
        lo_ok = self.low > low or (self.low == low and (not strict or self.open_low))
        hi_ok = self.high < high or (self.high == high and (not strict or self.open_high))
        return lo_ok and hi_ok

    def excludes_zero(self) -> bool:
        return self.nonzero or (self.bounded and (self.low > 0 or self.high < 0))


UNKNOWN = Type()
_INT_RANGE = {b: (-Fraction(2) ** (b - 1), Fraction(2) ** (b - 1) - 1) for b in (8, 16, 32, 64,
                                                                              128)}


def _int_type(bits: int | None, low=None, high=None, **kw) -> Type:
    if bits is not None and low is None:
        low, high = _INT_RANGE[bits]
    return Type(INT, bits=bits, low=low, high=high, **kw)


def type_of_name(name: str, backend: str = "duckdb") -> Type:
    """The :class:`Type` of a DuckDB-style type name as a backend's metadata gives it.

    >>> t = type_of_name("DECIMAL(5,2)")
    >>> t.high, t.open_high
    (Fraction(1000, 1), True)
    >>> type_of_name("TINYINT").bits, type_of_name("VARCHAR").family
    (8, 'string')
    """
    text = " ".join(name.upper().split())
    base = text.split("(")[0].strip()
    if base in _INTS:
        return _int_type(_INTS[base])
    if base in _UINTS:  # unsigned: a range, but no signed width to prove arithmetic by
        return Type(INT, low=Fraction(0), high=Fraction(2) ** _UINTS[base] - 1)
    if base in _FLOATS:
        return Type(FLOAT)
    if base in ("DECIMAL", "NUMERIC"):
        params = re.findall(r"\d+", text[len(base):])
        if not params:
            if backend == "postgres":  # unconstrained NUMERIC: any size
                return Type(DECIMAL)
            params = ["18", "3"]  # DuckDB's default
        precision = int(params[0])
        scale = int(params[1]) if len(params) > 1 else 0
        limit = Fraction(10) ** (precision - scale)
        return Type(DECIMAL, scale=scale, low=-limit, high=limit, open_low=True,
                    open_high=True)
    if base in _STRINGS or base.startswith(("VARCHAR", "CHAR")):
        return Type(STRING)
    if base in ("BOOLEAN", "BOOL"):
        return Type(BOOL)
    if base == "DATE":
        return Type(DATE)
    if base.startswith("TIMESTAMP") or base == "DATETIME":
        return Type(TIMESTAMP)
    if base == "INTERVAL":
        return Type(INTERVAL)
    return UNKNOWN


def type_of_catalog(kind: str) -> Type:
    """A catalog column type (``int``, ``float``, ...): family only, width unknown."""
    return Type(_CATALOG.get(kind))


def _literal_type(node: exp.Literal, backend: str = "duckdb") -> Type:
    if node.is_string:
        return Type(STRING, literal=True)
    text = node.this
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return Type(literal=True)
    common = dict(low=value, high=value, literal=True, nonzero=value != 0)
    if re.fullmatch(r"[0-9]+", text):
        for bits in (8, 16, 32, 64, 128):
            if value <= _INT_RANGE[bits][1]:
                return Type(INT, bits=bits, **common)
        return Type(literal=True)  # beyond HUGEINT: a type of its own (BIGNUM)
    if re.fullmatch(r"[0-9]*\.[0-9]*", text):
        return Type(DECIMAL, scale=len(text.split(".")[1]), **common)
    if backend == "postgres":  # 1e300 is a NUMERIC constant there, not a double
        mantissa, _, exponent = text.lower().partition("e")
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        return Type(DECIMAL, scale=max(0, decimals - int(exponent or 0)), **common)
    return Type(FLOAT, **common)


def _years(text: str) -> Fraction | None:
    """A date/timestamp literal as a (monotone) number of years, for range checks."""
    match = re.fullmatch(r"\s*(-?\d{1,7})-(\d{1,2})-(\d{1,2})([ T].*)?\s*", text)
    if not match:
        return None
    year, month, day = (int(g) for g in match.groups()[:3])
    return year + Fraction(month - 1, 12) + Fraction(day - 1, 372)


_UNIT_YEARS = {"YEAR": Fraction(1), "MONTH": Fraction(1, 12), "WEEK": Fraction(7, 365),
               "DAY": Fraction(1, 365), "HOUR": Fraction(1, 8760),
               "MINUTE": Fraction(1, 525600), "SECOND": Fraction(1, 31536000)}


def interval_years(node: exp.Interval) -> Fraction | None:
    """The magnitude of an interval literal in years (None if not a plain literal)."""
    unit = (node.unit.name if node.unit is not None else "DAY").upper().rstrip("S")
    amount = node.this
    if isinstance(amount, exp.Literal):
        text = amount.this.strip()
        parts = text.split()
        if len(parts) == 2:  # INTERVAL '1 day'
            text, unit = parts[0], parts[1].upper().rstrip("S")
        try:
            value = Fraction(text)
        except (ValueError, ZeroDivisionError):
            return None
        if unit in _UNIT_YEARS:
            return abs(value) * _UNIT_YEARS[unit] * (1 if unit != "DAY" else Fraction(366, 365))
    return None


#: The widest dates every backend computes with (and Python represents): the check keeps
#: date arithmetic inside it, so that no result leaves an engine's range.
YEARS = (Fraction(1), Fraction(9999) + Fraction(11, 12) + Fraction(30, 372))
#: Largest interval literal in date arithmetic (years).
MAX_INTERVAL_YEARS = Fraction(1000)
#: Results of date arithmetic within these years are inside every engine's range
#: (DuckDB 290309 BC to 294247 AD, PostgreSQL 4713 BC to 294276 AD, Spark wider).
RESULT_YEARS = (Fraction(-4000), Fraction(200000))


# -- the typer ----------------------------------------------------------------------------


class Typer:
    """Types every node of one tree, resolving columns through FROM, CTEs and subqueries.

    Args:
        root: the tree (a SELECT, possibly with CTEs, derived tables, IN subqueries).
        columns: ``columns(table) -> {column: type}`` for database tables, the type
            either a DuckDB-style name (a backend's metadata) or a :class:`Type`.
        backend: dialect name; decides a few type rules (PostgreSQL's NUMERIC).
    """

    def __init__(self, root: exp.Expression, columns: Callable[[str], dict | None] | None,
                 backend: str = "duckdb"):
        self.root = root
        self.backend = backend
        self._columns = columns or (lambda name: None)
        self._table_cache: dict[str, dict[str, Type] | None] = {}
        self._types: dict[int, Type] = {}
        self._outputs: dict[int, list[tuple[str, Type]]] = {}
        self.ctes: dict[str, exp.Expression] = {}
        for cte in root.find_all(exp.CTE):
            self.ctes.setdefault(cte.alias_or_name.lower(), cte.this)

    # -- sources --------------------------------------------------------------------------

    def table(self, name: str) -> dict[str, Type] | None:
        if name not in self._table_cache:
            raw = self._columns(name)
            self._table_cache[name] = None if raw is None else {
                col.lower(): (t if isinstance(t, Type) else type_of_name(t, self.backend))
                for col, t in raw.items()}
        return self._table_cache[name]

    def outputs(self, query: exp.Expression) -> list[tuple[str, Type]]:
        """(name, type) of a query's output columns (a SELECT or a UNION)."""
        key = id(query)
        if key in self._outputs:
            return self._outputs[key]
        self._outputs[key] = []  # a cycle (never built by dpsql) stays unknown
        if isinstance(query, exp.Subquery):
            out = self.outputs(query.this)
        elif isinstance(query, exp.Union):
            left, right = self.outputs(query.this), self.outputs(query.expression)
            out = [(n, _hull(t, u)) for (n, t), (_, u) in zip(left, right, strict=False)]
        elif isinstance(query, exp.Select):
            out = []
            for item in query.expressions:
                if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                                  and isinstance(item.this, exp.Star)):
                    for _, cols in self._sources(query):
                        out.extend(cols)
                    continue
                out.append((item.alias_or_name.lower(), self.type(item)))
        else:
            out = []
        self._outputs[key] = out
        return out

    def _source_columns(self, node: exp.Expression) -> list[tuple[str, Type]]:
        if isinstance(node, exp.Table):
            name = node.name.lower()
            if name in self.ctes and not node.args.get("db"):
                return self.outputs(self.ctes[name])
            cols = self.table(name)
            return list(cols.items()) if cols else []
        if isinstance(node, exp.Subquery):
            return self.outputs(node.this)
        return []

    def _sources(self, select: exp.Select) -> list[tuple[str, list[tuple[str, Type]]]]:
        sources = []
        from_ = select.args.get("from_")
        nodes = [from_.this] if from_ is not None else []
        nodes += [j.this for j in select.args.get("joins") or []]
        for node in nodes:
            alias = (node.alias_or_name or "").lower()
            sources.append((alias, self._source_columns(node)))
        return sources

    def column(self, col: exp.Column) -> Type:
        """A column's type, looked up from its SELECT outwards (correlated references)."""
        name = col.name.lower()
        qualifier = col.table.lower() if col.table else None
        select = col.find_ancestor(exp.Select)
        while select is not None:
            matches = []
            for alias, cols in self._sources(select):
                if qualifier is not None and alias != qualifier:
                    continue
                matches += [t for n, t in cols if n == name]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                return UNKNOWN  # ambiguous: the engine refuses it while planning
            select = select.find_ancestor(exp.Select)
        return UNKNOWN

    # -- expressions -----------------------------------------------------------------------

    def type(self, node: exp.Expression | None) -> Type:
        if node is None:
            return Type(NULL)
        key = id(node)
        cached = self._types.get(key)
        if cached is None:
            cached = self._infer(node)
            self._types[key] = cached
        return cached

    def reset(self) -> None:
        """Drops every cached type (after a change that may affect other queries)."""
        self._types.clear()
        self._outputs.clear()

    def forget(self, node: exp.Expression) -> None:
        """Drops cached types of a subtree that is about to change."""
        for n in node.walk():
            self._types.pop(id(n), None)

    def _infer(self, node: exp.Expression) -> Type:  # noqa: C901 - one case per node kind
        t = self.type
        if isinstance(node, exp.Paren | exp.Alias | exp.Try):
            return t(node.this)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Literal):
            return _literal_type(node, self.backend)
        if isinstance(node, exp.Null):
            return Type(NULL, literal=True)
        if isinstance(node, exp.Boolean):
            return Type(BOOL, literal=True)
        if isinstance(node, exp.Cast):  # TryCast too
            return self._cast_type(node)
        if isinstance(node, exp.Interval):
            years = interval_years(node)
            return Type(INTERVAL, low=None if years is None else -years,
                        high=years, literal=years is not None)
        if isinstance(node, exp.Predicate | exp.And | exp.Or | exp.Not | exp.Xor):
            return Type(BOOL)
        if isinstance(node, exp.Neg):
            a = t(node.this)
            return replace(a, low=_neg(a.high), high=_neg(a.low), open_low=a.open_high,
                           open_high=a.open_low)
        if isinstance(node, exp.Abs):
            a = t(node.this)
            if a.bounded:
                low = Fraction(0) if a.low <= 0 <= a.high else min(abs(a.low), abs(a.high))
                return replace(a, low=low, high=a.magnitude, open_low=False, open_high=False)
            return replace(a, low=None, high=None)
        if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.IntDiv | exp.Mod):
            return self._arith_type(node, t(node.this), t(node.expression))
        if isinstance(node, exp.Anonymous):
            return self._anonymous_type(node)
        if isinstance(node, exp.Count):
            return _int_type(64, Fraction(0), Fraction(MAX_ROWS))
        if isinstance(node, exp.Sum):
            a = t(node.this)
            if a.family == INT:
                return _int_type(128, *_scaled_range(a, MAX_ROWS))
            if a.family == DECIMAL:
                return Type(DECIMAL, scale=a.scale, low=_scaled_range(a, MAX_ROWS)[0],
                            high=_scaled_range(a, MAX_ROWS)[1])
            return Type(a.family if a.family != NULL else None,
                        low=_scaled_range(a, MAX_ROWS)[0], high=_scaled_range(a, MAX_ROWS)[1])
        if isinstance(node, exp.Avg):
            a = t(node.this)
            return Type(FLOAT, low=a.low, high=a.high)
        if isinstance(node, exp.Min | exp.Max):
            return replace(t(node.this), literal=False)
        if isinstance(node, exp.Window):
            return t(node.this)
        if isinstance(node, exp.RowNumber):
            return _int_type(64, Fraction(1), Fraction(MAX_ROWS))
        if isinstance(node, exp.Case):
            values = [i.args.get("true") for i in node.args.get("ifs") or []]
            return _hull_all([t(v) for v in values] + [t(node.args.get("default"))])
        if isinstance(node, exp.If):
            return _hull_all([t(node.args.get("true")), t(node.args.get("false"))])
        if isinstance(node, exp.Coalesce):
            return _hull_all([t(node.this), *(t(e) for e in node.expressions)])
        if isinstance(node, exp.Greatest | exp.Least):
            return _extreme([t(node.this), *(t(e) for e in node.expressions)],
                            isinstance(node, exp.Greatest))
        if isinstance(node, exp.Nullif):
            a, b = t(node.this), t(node.expression)
            out = replace(a, literal=False)
            if b.bounded and b.low == b.high:  # NULLIF(x, c): c is never the value
                if b.low == 0:
                    out = replace(out, nonzero=True)
                if a.low is not None and a.low == b.low:
                    out = replace(out, open_low=True)
                if a.high is not None and a.high == b.low:
                    out = replace(out, open_high=True)
            return out
        if isinstance(node, exp.Length):
            return _int_type(64, Fraction(0), None)
        if isinstance(node, exp.Lower | exp.Upper | exp.Substring | exp.Concat | exp.DPipe
                      | exp.Trim | exp.Left | exp.Right | exp.Replace | exp.Typeof):
            return Type(STRING)
        if isinstance(node, exp.Extract | exp.Year | exp.Month | exp.Day | exp.Quarter
                      | exp.Week | exp.WeekOfYear | exp.DayOfWeek | exp.DayOfMonth
                      | exp.DayOfYear):
            return _int_type(64, Fraction(-10) ** 15, Fraction(10) ** 15)
        if isinstance(node, exp.Sign):
            return _int_type(8, Fraction(-1), Fraction(1))
        if isinstance(node, exp.Round | exp.Floor | exp.Ceil):
            a = t(node.this)
            low = None if a.low is None else a.low - 1
            high = None if a.high is None else a.high + 1
            scale = a.scale
            digits = node.args.get("decimals") if isinstance(node, exp.Round) else None
            if isinstance(node, exp.Round) and isinstance(digits, exp.Literal) \
                    and re.fullmatch(r"[0-9]+", digits.this):
                scale = min(a.scale, int(digits.this)) if a.scale is not None \
                    else int(digits.this)
            return Type(a.family if a.numeric else None, bits=None, scale=scale, low=low,
                        high=high)
        if isinstance(node, exp.Sqrt | exp.Ln | exp.Exp):
            return Type(FLOAT)
        if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
            return Type(TIMESTAMP, low=t(node.this).low, high=t(node.this).high)
        if isinstance(node, exp.Subquery):
            outs = self.outputs(node.this)
            return outs[0][1] if len(outs) == 1 else UNKNOWN
        return UNKNOWN

    def _cast_type(self, node: exp.Cast) -> Type:
        target = type_of_name(node.to.sql(dialect="duckdb"), self.backend)
        source = self.type(node.this)
        if target.family in NUMBERS and source.numeric and source.bounded:
            # a numeric cast keeps the value (up to rounding to the target's scale)
            low, high = source.low, source.high
            whole = source.family == INT or (source.family == DECIMAL and source.scale == 0)
            if not whole and (target.family == INT or target.scale == 0):
                low, high = low - 1, high + 1  # rounding to a whole number
            if target.bounded:
                low, high = max(low, target.low), min(high, target.high)
            scale = target.scale
            if target.family == DECIMAL and scale is None:  # unconstrained NUMERIC
                scale = 0 if source.family == INT else source.scale
            return replace(target, low=low, high=high, literal=source.literal, scale=scale,
                           nonzero=source.nonzero and target.family != INT)
        if target.family == DECIMAL and not target.bounded and source.family == FLOAT:
            # PostgreSQL: a double becomes NUMERIC as it is (NaN and infinities included)
            return replace(target, low=-_DOUBLE_MAX, high=_DOUBLE_MAX)
        if target.family in (DATE, TIMESTAMP) and source.literal and isinstance(
                node.this, exp.Literal):
            years = _years(node.this.this)
            if years is not None:
                return replace(target, low=years, high=years, literal=True)
        if target.family == source.family and target.family in (DATE, TIMESTAMP):
            return replace(target, low=source.low, high=source.high)
        return replace(target, literal=source.literal)

    def _arith_type(self, node, a: Type, b: Type) -> Type:
        fams = {a.family, b.family}
        if fams & {DATE, TIMESTAMP, INTERVAL}:
            base = a if a.family in (DATE, TIMESTAMP) else b
            family = base.family if base.family in (DATE, TIMESTAMP) else None
            if isinstance(node, exp.Sub) and {a.family, b.family} <= {DATE, TIMESTAMP}:
                return Type(INT if DATE in fams and TIMESTAMP not in fams else INTERVAL)
            if family == DATE and INTERVAL in fams:
                family = TIMESTAMP  # DATE ± INTERVAL is a TIMESTAMP (DuckDB)
            other = b if base is a else a
            if base.bounded and other.bounded and other.family == INTERVAL:
                shift = other.magnitude
                return Type(family, low=base.low - shift, high=base.high + shift,
                            literal=a.literal and b.literal)
            return Type(family)
        if NULL in fams:
            return Type(NULL)
        if not (a.numeric and b.numeric):
            return UNKNOWN
        literal = a.literal and b.literal
        if isinstance(node, exp.Div):
            family = FLOAT if self.backend != "postgres" or FLOAT in fams else (
                DECIMAL if fams <= {DECIMAL, INT} else None)
            low, high = _div_range(a, b)
            return Type(family, low=low, high=high, literal=literal)
        if FLOAT in fams:
            family = FLOAT
        elif NUMBER in fams:
            family = NUMBER
        elif DECIMAL in fams:
            family = DECIMAL
        else:
            family = INT
        if isinstance(node, exp.IntDiv):
            if family != INT and self.backend != "postgres":
                family = FLOAT
            low, high = _div_range(a, b)
            if low is not None:
                low, high = low - 1, high + 1
            return Type(family, bits=_bits(a, b) if family == INT else None,
                        low=low, high=high, literal=literal)
        if isinstance(node, exp.Mod):
            low, high = _mod_range(a, b)
            return Type(family, bits=_bits(a, b) if family == INT else None,
                        scale=_max_scale(a, b), low=low, high=high, literal=literal)
        low, high = _arith_range(node, a, b)
        scale = _max_scale(a, b)
        if isinstance(node, exp.Mul) and a.scale is not None and b.scale is not None:
            scale = a.scale + b.scale
        return Type(family, bits=_bits(a, b) if family == INT else None, scale=scale,
                    low=low, high=high, literal=literal)

    def _anonymous_type(self, node: exp.Anonymous) -> Type:
        name = str(node.this).upper()
        args = [self.type(a) for a in node.expressions]
        if name in ("HASH", "XXHASH64", "HASHTEXTEXTENDED", SQLITE_HASH_UPPER):
            return _int_type(64)
        if name in ("TOTAL", "TRY_SUM"):
            return Type(FLOAT if name == "TOTAL" else (args[0].family if args else None))
        if name == "DIV" and len(args) == 2:  # PostgreSQL: integer quotient, in NUMERIC
            low, high = _div_range(*args)
            if low is not None:
                low, high = low - 1, high + 1
            return Type(DECIMAL, scale=0, low=low, high=high)
        if name in ("TRY_ADD", "TRY_SUBTRACT", "TRY_MULTIPLY", "TRY_DIVIDE", "MOD", "DIV"):
            fams = {a.family for a in args}
            if name == "TRY_DIVIDE" or FLOAT in fams:
                return Type(FLOAT)
            return Type(DECIMAL if DECIMAL in fams else (INT if fams <= {INT} else None))
        if name == "BROUND":
            return replace(args[0], bits=None) if args else UNKNOWN
        if name == "DPSQL_FMOD":
            return Type(FLOAT)
        if name == "DPSQL_UTF8":
            return Type(STRING)
        if name == "IS_VALID_UTF8":
            return Type(BOOL)
        if name == "DATEDIFF":  # Spark: days between two dates, an INT
            return Type(INT, low=Fraction(-(2**31)), high=Fraction(2**31 - 1))
        if name in ("STRFTIME", "DATE", "DATETIME"):
            return Type(STRING)
        if name == "PG_INPUT_IS_VALID":
            return Type(BOOL)
        return UNKNOWN


SQLITE_HASH_UPPER = "DPSQL_HASH"


def _neg(v: Fraction | None) -> Fraction | None:
    return None if v is None else -v


def _bits(a: Type, b: Type) -> int | None:
    """Width of an integer operation's result: the widest operand (literals adapt)."""
    widths = []
    for x in (a, b):
        if x.bits is None:
            return None
        widths.append(x.bits)
    return max(widths)


def _max_scale(a: Type, b: Type) -> int | None:
    scales = [x.scale if x.family == DECIMAL else 0 for x in (a, b)]
    return None if None in scales else max(scales)


def _arith_range(node, a: Type, b: Type):
    if not (a.bounded and b.bounded):
        return None, None
    if isinstance(node, exp.Add):
        return a.low + b.low, a.high + b.high
    if isinstance(node, exp.Sub):
        return a.low - b.high, a.high - b.low
    products = [x * y for x in (a.low, a.high) for y in (b.low, b.high)]
    return min(products), max(products)


def _div_range(a: Type, b: Type):
    if not (a.bounded and b.bounded) or b.low <= 0 <= b.high:
        return None, None
    quotients = [x / y for x in (a.low, a.high) for y in (b.low, b.high)]
    return min(quotients), max(quotients)


def _mod_range(a: Type, b: Type):
    if not b.bounded:
        return None, None
    limit = b.magnitude
    low = Fraction(0) if a.low is not None and a.low >= 0 else -limit
    high = Fraction(0) if a.high is not None and a.high <= 0 else limit
    return low, high


def _scaled_range(a: Type, n: int):
    if not a.bounded:
        return None, None
    return min(a.low * n, Fraction(0)), max(a.high * n, Fraction(0))


def _common_family(types: list[Type]) -> str | None:
    fams = {t.family for t in types} - {NULL}
    if not fams:
        return NULL
    if None in fams:
        return None
    if fams <= set(NUMBERS):
        for f in (FLOAT, NUMBER, DECIMAL):
            if f in fams:
                return f
        return INT
    if fams == {DATE, TIMESTAMP}:
        return TIMESTAMP
    return fams.pop() if len(fams) == 1 else None


def _hull(a: Type, b: Type) -> Type:
    return _hull_all([a, b])


def _hull_all(types: list[Type]) -> Type:
    """The type of a value that is one of several (CASE, COALESCE; NULL adds nothing)."""
    values = [t for t in types if t.family != NULL]
    family = _common_family(types)
    if not values:
        return Type(NULL)
    bounded = all(t.bounded for t in values)
    low = min(t.low for t in values) if bounded else None
    high = max(t.high for t in values) if bounded else None
    bits = _widest(values) if family == INT else None
    scales = [t.scale if t.family == DECIMAL else 0 for t in values]
    return Type(family, bits=bits, scale=None if None in scales else max(scales), low=low,
                high=high, literal=all(t.literal for t in types),
                nonzero=all(t.excludes_zero() for t in values))


def _widest(values: list[Type]) -> int | None:
    bits = [t.bits for t in values]
    return None if None in bits else max(bits)


def _extreme(types: list[Type], greatest: bool) -> Type:
    """GREATEST/LEAST: they skip NULLs (DuckDB, PostgreSQL, Spark), so the result lies
    between the extremes of the non-NULL arguments; NaN sorts above every number, so a
    LEAST with a number maps it onto that number."""
    values = [t for t in types if t.family != NULL]
    base = _hull_all(types)
    if not values:
        return base
    if greatest:
        lows = [t.low for t in values if t.low is not None]
        low = max(lows) if lows else None
        high = None if any(t.high is None for t in values) else max(t.high for t in values)
    else:
        highs = [t.high for t in values if t.high is not None]
        high = min(highs) if highs else None
        low = None if any(t.low is None for t in values) else min(t.low for t in values)
    return replace(base, low=low, high=high, open_low=False, open_high=False, nonzero=False)


# -- which nodes can fail -------------------------------------------------------------------

_STRUCTURE = (exp.Select, exp.From, exp.Join, exp.Table, exp.TableAlias, exp.Identifier,
              exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.With, exp.CTE,
              exp.Subquery, exp.Union, exp.Star, exp.Distinct, exp.DataType,
              exp.DataTypeParam, exp.Var, exp.Column, exp.Literal, exp.Null, exp.Boolean,
              exp.Paren, exp.Alias, exp.Try, exp.TryCast, exp.Interval, exp.Is,
              exp.Window, exp.RowNumber, exp.Count, exp.Min, exp.Max, exp.Limit)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ, exp.Between, exp.In)
_PARTS = (exp.Extract, exp.Year, exp.Month, exp.Day, exp.Quarter, exp.Week,
          exp.WeekOfYear, exp.DayOfWeek, exp.DayOfMonth, exp.DayOfYear)


def _boolable(t: Type) -> bool:
    """A value used as a condition: booleans and numbers convert without error."""
    return t.family in (BOOL, NULL, INT, FLOAT, DECIMAL, NUMBER)


def compatible(types: list[Type], failures: Failures) -> bool:
    """Whether comparing (or choosing between) values of these types casts nothing that
    can fail: same family, or numbers whose common type holds every value."""
    fams = {t.family for t in types} - {NULL}
    if not fams:
        return True
    if None in fams:
        return False
    if len(fams) == 1 and fams <= {STRING, BOOL, DATE, TIMESTAMP, INTERVAL, INT, FLOAT}:
        return True
    if fams <= {DATE, TIMESTAMP}:
        # a DATE becomes a TIMESTAMP, which fails beyond the timestamp range; PostgreSQL
        # compares across the types without converting
        if not failures.mixed_types:
            return True
        return all(t.literal or t.family == TIMESTAMP or t.within(*YEARS) for t in types)
    if not fams <= set(NUMBERS):
        # text against numbers or dates: a per-row cast (DuckDB); elsewhere a planning
        # error, NULL (Spark) or an affinity conversion (SQLite), never a run-time error
        return not failures.mixed_types
    if not failures.mixed_types:
        if failures.name == "PostgreSQL":
            # NUMERIC and float8 mixed: the NUMERIC becomes float8, which overflows
            return not (FLOAT in fams and any(t.family in (DECIMAL, NUMBER) and not t.literal
                                              for t in types))
        return True
    if FLOAT in fams or fams <= {INT}:
        return True  # to DOUBLE, or to the widest integer: never fails
    values = [t for t in types if t.family != NULL and not t.literal]
    literals = [t for t in types if t.family != NULL and t.literal]
    if not literals and len(values) <= 1:
        return True  # one value and NULLs: nothing to convert
    if all(t.family == INT for t in literals) and {t.family for t in values} <= {INT}:
        return True  # integer literals take the other side's integer type while planning
    # a DECIMAL is involved: the common type is a DECIMAL(38) at most, with the largest
    # scale and room for the largest integer part, literals included (DuckDB:
    # `CAST(x AS DECIMAL(38,36)) < 100` casts 100 to DECIMAL(38,36) for every row, and
    # fails once a row gets there)
    digits, scales = 0, [0]
    for t in types:
        if t.family == NULL:
            continue
        if t.family == DECIMAL:
            scales.append(t.scale)
        if t.family == NUMBER or t.magnitude is None:
            return False
        digits = max(digits, _integer_digits(t))
    if None in scales:
        return False
    return digits + max(scales) <= 38


def _integer_digits(t: Type) -> int:
    """Digits of the integer part of the largest value of a bounded number type.

    >>> _integer_digits(Type(DECIMAL, scale=36, low=-Fraction(100), high=Fraction(100),
    ...                      open_low=True, open_high=True))   # DECIMAL(38,36): < 100
    2
    >>> _integer_digits(Type(INT, low=Fraction(0), high=Fraction(100), literal=True))
    3
    """
    whole = int(t.magnitude)
    excluded = (t.high is not None and abs(t.high) == t.magnitude and t.open_high) or \
        (t.low is not None and abs(t.low) == t.magnitude and t.open_low)
    if whole == t.magnitude and excluded and (t.open_low or abs(t.low) < t.magnitude) and \
            (t.open_high or abs(t.high) < t.magnitude):
        whole -= 1
    return max(len(str(whole)), 1)


def node_failure(node: exp.Expression, typer: Typer, failures: Failures) -> str | None:
    """Why ``node`` itself (not its children) can raise on some row, or None."""
    t = typer.type
    f = failures
    if isinstance(node, exp.Cast) and (not isinstance(node, exp.TryCast) or not f.try_cast):
        return _cast_failure(node, typer, f)
    if isinstance(node, _STRUCTURE):
        return None
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        return _arith_failure(node, t(node.this), t(node.expression), typer, f)
    if isinstance(node, exp.Div | exp.IntDiv | exp.Mod):
        return _division_failure(node, t(node.this), t(node.expression), typer, f)
    if isinstance(node, exp.Neg | exp.Abs):
        a = t(node.this)
        if a.family == NULL or (a.literal and a.numeric):
            return None
        if not a.numeric:
            return f"{_name(node)} of a non-number" if f.casts else None
        if a.family == FLOAT:
            return None
        if a.family == INT:
            if isinstance(node, exp.Abs) and not f.abs_overflow:
                return None
            if not f.integer_overflow and isinstance(node, exp.Neg):
                return None
            if a.bounded and a.bits is not None and a.low > _INT_RANGE[a.bits][0]:
                return None
            return f"{_name(node)} of an integer may overflow"
        if a.family == DECIMAL and f.decimals != "decimal38" or (a.family == DECIMAL
                                                                  and a.bounded):
            return None
        return f"{_name(node)} of a number of unknown type"
    if isinstance(node, _COMPARISONS):
        operands = [node.this, *(node.args.get(k) for k in ("expression", "low", "high")),
                    *node.expressions]
        query = node.args.get("query")
        if query is not None:
            operands.append(query)
        types = [t(o) for o in operands if o is not None]
        return None if compatible(types, f) else "a comparison of values of different types"
    if isinstance(node, exp.Like | exp.ILike):
        subject = t(node.this)
        return None if subject.family in (STRING, NULL) else "LIKE on a non-string"
    if isinstance(node, exp.And | exp.Or | exp.Xor):
        ok = all(_boolable(t(o)) for o in (node.this, node.expression))
        return None if ok else "a non-boolean used as a condition"
    if isinstance(node, exp.Not):
        return None if _boolable(t(node.this)) else "a non-boolean used as a condition"
    if isinstance(node, exp.Case):
        conditions = [i.this for i in node.args.get("ifs") or []]
        values = [i.args.get("true") for i in node.args.get("ifs") or []]
        values.append(node.args.get("default"))
        if not all(_boolable(t(c)) for c in conditions):
            return "a non-boolean used as a CASE condition"
        return None if compatible([t(v) for v in values], f) else \
            "CASE results of different types"
    if isinstance(node, exp.If):
        if not _boolable(t(node.this)):
            return "a non-boolean used as a condition"
        values = [node.args.get("true"), node.args.get("false")]
        return None if compatible([t(v) for v in values], f) else \
            "IF results of different types"
    if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least | exp.Nullif):
        args = [node.this, *node.expressions] if not isinstance(node, exp.Nullif) \
            else [node.this, node.expression]
        return None if compatible([t(a) for a in args], f) else \
            f"{_name(node)} of values of different types"
    if isinstance(node, exp.Lower | exp.Upper | exp.Length | exp.Trim | exp.Concat
                  | exp.DPipe | exp.Replace | exp.Typeof):
        return None
    if isinstance(node, exp.Left | exp.Right):
        n = t(node.expression)
        if f.substring_limit is not None and not n.within(-f.substring_limit,
                                                          f.substring_limit):
            return f"{_name(node)} with a length beyond the engine's range"
        return None
    if isinstance(node, exp.Substring):
        limit = f.substring_limit if f.substring_limit is not None else (
            4294967296 if f.name == "DuckDB" else None)
        for key in ("start", "length"):
            arg = node.args.get(key)
            if arg is None or limit is None:
                continue
            a = t(arg)
            low = 0 if key == "length" and f.name == "PostgreSQL" else -limit
            if not (a.family in (INT, NULL) and (a.family == NULL or a.within(low, limit))):
                return "SUBSTRING with an offset or length beyond the engine's range"
        return None
    if isinstance(node, _PARTS):
        arg = node.expression if isinstance(node, exp.Extract) else node.this
        return None if t(arg).family in (DATE, TIMESTAMP, INTERVAL, NULL) else \
            "a date part of a non-date"
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        a = t(node.this)
        if a.family == TIMESTAMP or not f.temporal_overflow or a.within(*YEARS):
            return None
        return "truncating a date (a timestamp out of range fails)"
    if isinstance(node, exp.Round):
        digits = node.args.get("decimals")
        if digits is not None and not (isinstance(digits, exp.Literal)
                                       and re.fullmatch(r"-?[0-9]{1,3}", digits.this)):
            return "ROUND with other than a small constant number of decimals"
        return None if t(node.this).numeric or t(node.this).family == NULL else \
            "ROUND of a non-number"
    if isinstance(node, exp.Floor | exp.Ceil | exp.Sign):
        return None if t(node.this).numeric or t(node.this).family == NULL else \
            f"{_name(node)} of a non-number"
    if isinstance(node, exp.Sqrt | exp.Ln | exp.Exp):
        a = t(node.this)
        if not (a.numeric or a.family == NULL):
            return f"{_name(node)} of a non-number"
        if not f.domain_errors:
            return None
        if isinstance(node, exp.Exp):
            return None if a.within(Fraction(-745), Fraction(709)) else \
                "EXP may overflow"
        return None if _domain_guarded(node) else \
            f"{_name(node)} outside its domain"
    if isinstance(node, exp.Sum | exp.Avg):
        return None  # see unguardable
    if isinstance(node, exp.RegexpLike):
        return None if isinstance(node.expression, exp.Literal) else \
            "a regular expression that is not a constant"
    if isinstance(node, exp.Anonymous):
        name = str(node.this).upper()
        if name in ("DIV", "MOD"):
            return _division_failure(node, *(t(a) for a in node.expressions[:2]), typer, f)
        if name in f.safe_functions:
            if f.udf_text and name.startswith("DPSQL_") and not all(
                    isinstance(a, exp.Literal | exp.Cast) and not (
                        isinstance(a, exp.Cast) and t(a).family == STRING)
                    for a in node.expressions):
                # SQLite hands text to a Python function decoded as UTF-8, and columns
                # hold any type whatever their declaration: invalid UTF-8 would raise
                return f"a value that may be invalid UTF-8 text handed to {name}()"
            return None
        return f"function {name}() is not known to be error-free on {f.name}"
    return f"{_name(node)} is not known to be error-free"


def _domain_guarded(node: exp.Expression) -> bool:
    """``CASE WHEN x >= 0 THEN SQRT(x) END`` (``x > 0`` for LN): the dialect's guard."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if not isinstance(parent, exp.If) or parent.args.get("true") is not node:
        return False
    cond = parent.this
    test = exp.GTE if isinstance(node, exp.Sqrt) else exp.GT
    return (isinstance(cond, test | exp.GT) and cond.this == node.this
            and isinstance(cond.expression, exp.Literal) and cond.expression.this == "0")


def _arith_failure(node, a: Type, b: Type, typer: Typer, f: Failures) -> str | None:
    fams = {a.family, b.family}
    what = {exp.Add: "addition", exp.Sub: "subtraction", exp.Mul: "multiplication"}[type(node)]
    if NULL in fams:
        return None
    if fams & {DATE, TIMESTAMP, INTERVAL}:
        if not f.temporal_overflow:
            return None
        result = typer.type(node)
        if result.family in (DATE, TIMESTAMP) and result.within(*RESULT_YEARS) and all(
                x.family != INTERVAL or (x.bounded and x.magnitude <= MAX_INTERVAL_YEARS)
                for x in (a, b)):
            return None
        if fams <= {DATE, TIMESTAMP} and isinstance(node, exp.Sub):
            return None  # a difference of dates: days or an interval
        return f"date arithmetic ({what}) may leave the engine's date range"
    if not (a.numeric and b.numeric):
        return f"{what} of non-numbers" if f.casts else None
    result = typer.type(node)
    if FLOAT in fams:
        if not f.float_overflow:
            return None
        return f"{what} of doubles may overflow on {f.name}"
    if NUMBER in fams:
        return f"{what} of numbers of unknown type may overflow"
    if DECIMAL in fams:
        if f.decimals == "none":
            return None
        if f.decimals == "numeric":
            # NUMERIC overflows only beyond 131072 digits: bounded operands cannot
            if a.bounded and b.bounded and result.magnitude <= _NUMERIC_LIMIT:
                return None
            return f"{what} of unbounded NUMERIC values"
        if result.bounded and result.scale is not None and result.scale <= 38 and \
                result.magnitude < Fraction(10) ** (38 - result.scale):
            return None
        return f"decimal {what} may overflow"
    if not f.integer_overflow:
        return None
    bits = result.bits
    if bits is not None and result.bounded and result.within(*_INT_RANGE[bits]):
        return None
    return f"integer {what} may overflow"


def _division_failure(node, a: Type, b: Type, typer: Typer, f: Failures) -> str | None:
    if NULL in (a.family, b.family):
        return None
    if not (a.numeric and b.numeric):
        return "division of non-numbers" if f.casts else None
    result = typer.type(node)
    is_mod = isinstance(node, exp.Mod) or (isinstance(node, exp.Anonymous)
                                            and str(node.this).upper() == "MOD")
    is_div = isinstance(node, exp.Div)
    if f.name == "PostgreSQL":
        if FLOAT in (a.family, b.family):
            return "division of doubles may overflow or underflow on PostgreSQL"
        if not b.excludes_zero():
            return "division by a value that may be zero"
        if a.family == INT and b.family == INT and not is_div:
            if a.bounded and a.bits is not None and a.low > _INT_RANGE[a.bits][0]:
                return None
            return "integer division may overflow"
        if a.bounded and b.bounded or (result.bounded
                                        and result.magnitude <= _NUMERIC_LIMIT):
            return None
        return "division of unbounded NUMERIC values"
    if is_div and f.name == "DuckDB":
        return None  # a double division: inf or NaN, never an error
    if not f.division_by_zero:
        return None
    if is_mod and FLOAT in (a.family, b.family) and f.name == "DuckDB":
        return None  # NaN for a zero divisor
    if not b.excludes_zero():
        return "division by a value that may be zero"
    if result.family == FLOAT or FLOAT in (a.family, b.family):
        return None
    if a.family == INT and b.family == INT:
        # the smallest integer divided by -1 overflows
        if (a.bounded and a.bits is not None and a.low > _INT_RANGE[a.bits][0]) or (
                b.bounded and (b.low > -1 or b.high < -1)):
            return None
        return "integer division may overflow"
    if a.family == DECIMAL and b.family in (DECIMAL, INT) and a.bounded and b.bounded:
        return None
    return "division of numbers of unknown type may overflow"


def _cast_failure(node: exp.Cast, typer: Typer, f: Failures) -> str | None:
    source = typer.type(node.this)
    target = type_of_name(node.to.sql(dialect="duckdb"), typer.backend)
    base = node.to.sql(dialect="duckdb").upper()
    if not f.casts:
        return None
    if source.family == NULL or target.family == STRING:
        return None
    if base.startswith("BLOB"):
        return None if source.family in (STRING, None) and f.name == "SQLite" else \
            f"a cast to {base}"
    if target.family == source.family and target.family in (STRING, BOOL, DATE, TIMESTAMP,
                                                             INTERVAL):
        return None
    if target.family == FLOAT:
        if source.family in (INT, BOOL) or (source.family == FLOAT and (
                f.name != "PostgreSQL" or "REAL" not in base and "FLOAT4" not in base)):
            return None
        if source.family in (DECIMAL, NUMBER) and f.name != "PostgreSQL":
            return None
        limit = _REAL_MAX if ("REAL" in base or base == "FLOAT4") else _DOUBLE_MAX
        if source.numeric and source.within(-limit, limit) and (
                source.family != DECIMAL or (source.scale is not None
                                             and source.scale <= 300)):
            return None  # PostgreSQL: in range, and no underflow (at most 300 decimals)
        return f"a cast of {source.family or 'an unknown type'} to {base}"
    if target.family == INT:
        if source.family == BOOL:
            return None
        if source.family == INT and source.bits is not None and target.bits is not None \
                and source.bits <= target.bits:
            return None
        margin = Fraction(1) if source.family == INT or (
            source.family == DECIMAL and source.scale == 0) else Fraction(1, 2)
        if source.numeric and target.bounded and source.within(
                target.low - margin, target.high + margin, strict=True):
            return None
        return f"a cast of {source.family or 'an unknown type'} to {base} may be out of range"
    if target.family == DECIMAL:
        if source.family == INT and not target.bounded:
            return None  # PostgreSQL's unconstrained NUMERIC holds any integer
        if source.family == FLOAT and not target.bounded and f.name == "PostgreSQL":
            return None  # NaN and infinities are NUMERIC values (PostgreSQL 14+)
        if source.numeric and target.bounded and source.within(target.low, target.high,
                                                               strict=True):
            return None
        if source.family == STRING and _pattern_guarded(node):
            return None
        return f"a cast of {source.family or 'an unknown type'} to {base} may be out of range"
    if target.family == BOOL:
        return None if source.numeric else f"a cast of {source.family} to BOOLEAN"
    if target.family == DATE and source.family == TIMESTAMP:
        return None
    if target.family == TIMESTAMP and source.family == DATE:
        return None if source.within(*YEARS) else \
            "a cast of a DATE to TIMESTAMP (out of the timestamp range it fails)"
    if target.family in (DATE, TIMESTAMP) and source.family == STRING and (
            source.literal or _valid_input_guarded(node)):
        return None
    return f"a cast of {source.family or 'an unknown type'} to {base}"


def _guarding_condition(node: exp.Expression):
    """The condition of the CASE branch whose result contains ``node``, if any."""
    child, parent = node, node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        if isinstance(parent, exp.If) and parent.args.get("true") is child:
            return parent.this
        child, parent = parent, parent.parent
    return None


def _pattern_guarded(node: exp.Cast) -> bool:
    """PostgreSQL: ``CASE WHEN x ~ '<number pattern>' THEN ... CAST(x AS NUMERIC) ...``."""
    from dpsql.backends.dialects import _INT_PATTERN, _NUM_PATTERN

    cond = _guarding_condition(node)
    return (isinstance(cond, exp.RegexpLike) and cond.this == node.this
            and isinstance(cond.expression, exp.Literal)
            and cond.expression.this in (_INT_PATTERN, _NUM_PATTERN))


def _valid_input_guarded(node: exp.Cast) -> bool:
    """PostgreSQL: ``CASE WHEN PG_INPUT_IS_VALID(x, 'date') THEN CAST(x AS DATE) END``."""
    cond = _guarding_condition(node)
    return (isinstance(cond, exp.Anonymous) and str(cond.this).upper() == "PG_INPUT_IS_VALID"
            and cond.expressions and cond.expressions[0] == node.this)


def like_pattern_problem(pattern: exp.Expression) -> str | None:
    """Why a LIKE pattern could fail or mean different things on some engine, or None.

    A pattern must be a constant string (a pattern built from the data fails on Spark
    and PostgreSQL for some values: a trailing or misplaced escape character), without a
    backslash (PostgreSQL and Spark read it as an escape, DuckDB and SQLite do not), and
    not longer than :data:`MAX_PATTERN` (SQLite refuses long patterns).

    >>> like_pattern_problem(exp.Literal.string("a%"))
    >>> like_pattern_problem(exp.Literal.string("a\\\\"))[:34]
    'LIKE pattern contains a backslash,'
    """
    while isinstance(pattern, exp.Paren):
        pattern = pattern.this
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        return ("LIKE pattern must be a constant string: a pattern computed from the data "
                "can fail on some values (a misplaced escape character)")
    if "\\" in pattern.this:
        return ("LIKE pattern contains a backslash, which some engines read as an escape "
                "character (and fail on when misplaced)")
    if len(pattern.this) > MAX_PATTERN:
        return f"LIKE pattern is longer than {MAX_PATTERN} characters"
    return None


def unguardable(node: exp.Expression, typer: Typer, failures: Failures) -> str | None:
    """Why ``node`` can fail in a way no guard of this engine catches, or None."""
    if isinstance(node, exp.Like | exp.ILike):
        return like_pattern_problem(node.expression)
    if isinstance(node, exp.Escape):
        return "LIKE ... ESCAPE is not supported"
    if isinstance(node, exp.Replace):
        search, repl = node.expression, node.args.get("replacement")
        if not (isinstance(search, exp.Literal) and search.is_string
                and isinstance(repl, exp.Literal) and repl.is_string):
            return "REPLACE needs constant search and replacement strings"
        if not search.this or len(repl.this) > len(search.this) \
                or len(search.this) > MAX_PATTERN:
            return ("REPLACE must not lengthen strings: the replacement may be no longer "
                    "than the (non-empty) search string, so that no value can grow "
                    "without bound")
        return None
    if isinstance(node, exp.Sum | exp.Avg) and failures.sum_overflow:
        return _sum_problem(node, typer, failures)
    if isinstance(node, exp.Sum) and failures.plain_sum_raises \
            and not isinstance(node.this, exp.Distinct):
        if typer.type(node.this).family in (FLOAT, NULL):
            return None
        return f"{failures.name}'s SUM raises on integer overflow (TOTAL does not)"
    return None


def _sum_problem(node, typer: Typer, failures: Failures) -> str | None:
    a = typer.type(node.this)
    limit = Fraction(2) ** 79
    if a.family in (NULL,):
        return None
    if a.family == FLOAT:
        if not failures.float_overflow:
            return None
        if a.bounded and a.magnitude <= Fraction(10) ** 288:
            return None
        return f"{_name(node)} of doubles may overflow on {failures.name}"
    if a.family == INT and ((a.bits is not None and a.bits <= 64)
                            or (a.bounded and a.magnitude <= limit)):
        return None
    if a.family == DECIMAL and a.bounded and a.scale is not None and \
            a.magnitude * Fraction(10) ** a.scale <= limit:
        return None
    if a.family == DECIMAL and failures.decimals == "numeric" and a.bounded:
        return None
    return (f"{_name(node)} of a value with no proven bound may overflow (an aggregate "
            "cannot be guarded)")


# -- the check of the final SQL ------------------------------------------------------------


def _is_guard(node: exp.Expression, failures: Failures) -> bool:
    return isinstance(node, failures.guards) if failures.guards else False


def problems(tree: exp.Expression, backend: str,
             columns: Callable[[str], dict | None] | None = None) -> list[tuple[str, str]]:
    """Every (expression, reason) of ``tree`` that can fail on data outside a guard."""
    failures = FAILURES[backend]
    typer = Typer(tree, columns, backend)
    found: list[tuple[str, str]] = []

    def report(node, reason):
        found.append((node.sql(dialect="duckdb")[:120], reason))

    def visit(node: exp.Expression, guarded: bool) -> None:
        reason = unguardable(node, typer, failures)
        if reason is not None:
            report(node, reason)
        elif not guarded:
            reason = node_failure(node, typer, failures)
            if reason is not None:
                report(node, reason)
        # a guard covers the node it wraps directly (parentheses aside): DuckDB computes
        # a repeated subexpression once, apart from the expression around it, so a
        # failing node deeper inside a TRY may be evaluated outside it
        inside = _is_guard(node, failures) or (guarded and isinstance(node, exp.Paren))
        if isinstance(node, exp.Try) and (not failures.guards or node.find(
                exp.AggFunc, exp.Window, exp.Select)):
            report(node, "TRY is not a guard here (another engine's, or around an "
                         "aggregate, window or subquery)")
        for child in node.iter_expressions():
            visit(child, inside)
        for cond in _conditions(node):
            if not guarded and not _boolable(typer.type(cond)):
                report(cond, "a non-boolean used as a condition")

    visit(tree, False)
    return found


def _conditions(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Where | exp.Having):
        return [node.this]
    if isinstance(node, exp.Join) and node.args.get("on") is not None:
        return [node.args["on"]]
    return []


def check_guards(tree: exp.Expression, backend: str,
                 columns: Callable[[str], dict | None] | None = None) -> None:
    """Refuses (before the charge) SQL with an expression that can fail on data.

    Args:
        tree: the final tree a backend runs: the rewritten query after the backend's
            dialect transforms (:meth:`dpsql.backends.base.Backend.to_sql`).
        backend: the backend's sqlglot dialect (``duckdb``, ``postgres``, ``sqlite``,
            ``spark``): which operations raise there and which guards it honours.
        columns: the backend's ``columns(table)`` (column → DuckDB-style type name), to
            type columns exactly; without it columns have unknown types, so every
            operation on them must be guarded.

    Raises:
        BackendError: not charged; names the expression and why it can fail there.
    """
    found = problems(tree, backend, columns)
    if found:
        what, reason = found[0]
        err = BackendError(
            f"{FAILURES[backend].name} could fail on some data in {what!r} ({reason}), so "
            "dpsql refuses the query; nothing was charged")
        err.charged = False
        raise err


def refuse(reason: str) -> UnsupportedQueryError:
    """The error of a construct no engine can run without a data-dependent failure."""
    return UnsupportedQueryError(
        f"{reason}; dpsql refuses it because whether the query fails would depend on the "
        "data")


__all__ = ["Type", "Typer", "check_guards", "compatible", "like_pattern_problem",
           "node_failure", "problems", "type_of_catalog", "type_of_name", "unguardable"]
