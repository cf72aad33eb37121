"""Totality by construction: nothing the engine runs after the charge can fail on some rows.

An error after the charge is an oracle: whether a query fails tells the analyst about
the data, whatever ε was charged (``CASE WHEN pid = 42 AND age > 50 THEN <fails> END``
reads one age in a few queries). So every operation of the SQL a backend runs is
**presumed able to fail** unless its (operation, argument types) pair is on that
backend's *allow-list of total operations* (:class:`AllowList`, data kept next to each
backend, each entry with its one-line reason and exercised by the extreme-value fuzzer
in ``tests/privacy/totality.py``). Everything else is either

* **guarded**: wrapped in the backend's guard (DuckDB ``TRY``/``TRY_CAST``, which turn any
  error of the node they wrap into NULL), placed by :func:`place_guards`; or
* **refused before the charge** where no guard can wrap it (an aggregate, a window or a
  subquery cannot sit inside ``TRY``).

The argument types are **the engine's own**: :mod:`dpsql.backends.probe_types` asks
the engine to bind a probe query per SELECT of the final tree, over a relation of typed
NULLs built from the catalog tables' real column types. Nothing is read, and no rule of how the
engine types literals, CASE branches or casts is written here, so dpsql's idea of a
type cannot differ from the engine's. Where the engine cannot type a node, the node has
no type, which no allow-list entry accepts: it is guarded (or refused).

:func:`check_total` is the proof, run on the exact tree the backend is about to run:
every operation is allow-listed or sits directly inside a guard (directly: DuckDB
computes a repeated subexpression once, apart from the expression around it, so a
guard covers only the node it wraps). The placement and the check read the same list.

Aggregates cannot be guarded. Their allow-list entries rest on a bound on the number of
rows a query reads (:data:`MAX_ROWS`): an integer SUM accumulates in 128 bits, a DECIMAL
SUM of at most 23 digits in a 38-digit decimal, a floating-point SUM in IEEE arithmetic
(which gives ``inf``, never an error); any other SUM argument is summed as DOUBLE.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.errors import BackendError
from dpsql.sqlbuild import data_type

#: Fewer rows than this reach any aggregate of a query: 2**48 rows of 2**79-magnitude
#: integers stay below 2**127, and 2**48 rows of 23-digit decimals below 10**38.
MAX_ROWS = 2**48

#: Nodes that compute nothing: reading a column or a constant, naming, bracketing, and
#: the clauses that hold expressions (the expressions themselves are checked).
STRUCTURE = (exp.Select, exp.From, exp.Join, exp.Table, exp.TableAlias, exp.Identifier,
             exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.With, exp.CTE,
             exp.Subquery, exp.Union, exp.Star, exp.Distinct, exp.DataType,
             exp.DataTypeParam, exp.Var, exp.Column, exp.Literal, exp.Null, exp.Boolean,
             exp.Paren, exp.Alias, exp.Window, exp.Limit, exp.Offset, exp.WindowSpec,
             exp.Interval, exp.Tuple, exp.IgnoreNulls, exp.RespectNulls)
#: Nodes no guard can wrap (they are not row-level values).
UNWRAPPABLE = (exp.AggFunc, exp.Window, exp.Select, exp.Subquery, exp.WithinGroup)
#: Comparisons: the operands meet in a type of the engine's choosing; the result is a
#: BOOLEAN.
COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
               exp.NullSafeNEQ, exp.Between, exp.In)

# -- types ----------------------------------------------------------------------------------

#: Signed and small unsigned integer types, narrowest first: any of them converts to a
#: wider one (or to a floating-point type) without error.
INTEGERS = ("TINYINT", "UTINYINT", "SMALLINT", "USMALLINT", "INTEGER", "UINTEGER", "BIGINT",
            "HUGEINT")
FLOATS = ("FLOAT", "DOUBLE")
NULL = '"NULL"'


def base(type_name: str | None) -> str:
    """``DECIMAL(18,3)`` → ``DECIMAL``; None stays ''."""
    return (type_name or "").upper().split("(")[0].strip()


def decimal_digits(type_name: str | None) -> tuple[int, int] | None:
    """(precision, scale) of a DECIMAL type name, else None."""
    m = re.fullmatch(r"\s*DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*", (type_name or "").upper())
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_integer(t: str | None) -> bool:
    return t in INTEGERS


def is_float(t: str | None) -> bool:
    return t in FLOATS


#: Digits of the integer types' largest values (for their meeting with DECIMALs).
_INT_DIGITS = {"TINYINT": 3, "UTINYINT": 3, "SMALLINT": 5, "USMALLINT": 5, "INTEGER": 10,
               "UINTEGER": 10, "BIGINT": 19, "HUGEINT": 39}


def _digits(t: str) -> tuple[int, int] | None:
    """(integer digits, scale) of an integer or DECIMAL type."""
    if is_integer(t):
        return _INT_DIGITS[t], 0
    d = decimal_digits(t)
    return (d[0] - d[1], d[1]) if d else None


def widens(source: str | None, target: str | None) -> bool:
    """Whether every value of ``source`` converts to ``target`` without error.

    >>> widens("INTEGER", "BIGINT"), widens("BIGINT", "INTEGER"), widens("HUGEINT", "DOUBLE")
    (True, False, True)
    >>> widens("DECIMAL(5,2)", "DECIMAL(18,3)"), widens("BIGINT", "DECIMAL(18,0)")
    (True, False)
    """
    if source is None or target is None:
        return False
    if source in (target, NULL):
        return True
    if is_integer(source) and is_integer(target):
        if target.startswith("U"):
            return False
        return INTEGERS.index(source) <= INTEGERS.index(target)
    if is_float(target):
        return is_integer(source) or is_float(source) or decimal_digits(source) is not None
    src, dst = _digits(source), _digits(target)
    if src is None or dst is None or decimal_digits(target) is None:
        return False
    return src[0] <= dst[0] and src[1] <= dst[1]


def widening(types: Iterable[str | None], result: str | None = None) -> bool:
    """Whether values of these types meet in a common type (and in ``result``, if
    given) by conversions that never fail.

    The same type (no conversion); integers only (to the widest); numbers with a
    floating-point one (to FLOAT or DOUBLE, which round, never fail); integers and
    DECIMALs whose largest integer part and largest scale fit 38 digits together (the
    widest DECIMAL). NULL meets anything. Anything else (text with numbers, DATE with
    TIMESTAMP, DECIMALs past 38 digits) is not taken as total. Literals count with the
    type the engine gives them.

    >>> widening(["BIGINT", "INTEGER", '"NULL"']), widening(["DOUBLE", "HUGEINT"])
    (True, True)
    >>> widening(["DECIMAL(18,3)", "INTEGER"]), widening(["DECIMAL(38,36)", "INTEGER"])
    (True, False)
    >>> widening(["DATE", "TIMESTAMP"]), widening(["VARCHAR", None])
    (False, False)
    """
    ts = [t for t in types if t != NULL]
    if any(t is None for t in ts):
        return False
    if result is not None and not all(widens(t, result) for t in ts):
        return False
    if len(set(ts)) <= 1:
        return True
    if all(is_integer(t) for t in ts):
        return True
    if any(is_float(t) for t in ts):
        return all(is_integer(t) or is_float(t) or decimal_digits(t) for t in ts)
    digits = [_digits(t) for t in ts]
    if any(d is None for d in digits):
        return False
    return max(d[0] for d in digits) + max(d[1] for d in digits) <= 38


@dataclass
class Types:
    """The engine's type of each node of one tree (by identity), and of derived nodes."""

    of: dict[int, str | None] = field(default_factory=dict)

    def __call__(self, node: exp.Expression | None) -> str | None:
        if node is None:
            return NULL
        while isinstance(node, exp.Paren):
            node = node.this
        return self.of.get(id(node))

    def set(self, node: exp.Expression, type_name: str | None) -> None:
        self.of[id(node)] = type_name


# -- the allow-list -------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One kind of total operation: node classes, a test of the typed node, and why."""

    ops: tuple[type[exp.Expression], ...]
    when: Callable[[exp.Expression, Types], bool]
    reason: str


@dataclass(frozen=True)
class AllowList:
    """A backend's total operations and its guard forms.

    Attributes:
        engine: the engine's name, for messages.
        entries: the total operations.
        guards: node classes that turn an error of the node they wrap into NULL.
    """

    engine: str
    entries: tuple[Entry, ...]
    guards: tuple[type[exp.Expression], ...] = (exp.Try,)
    #: Whether an operation that is not total and cannot be wrapped (it holds an
    #: aggregate) is refused while placing guards; False where the dialect layer makes
    #: every operation total in place (PostgreSQL), leaving the final check to decide.
    refuse_unwrappable: bool = True
    #: Whether a division that is not total gets ``NULLIF(divisor, 0)`` (engines without
    #: TRY, whose dialect layer then makes the division total).
    nullif_divisors: bool = False
    #: The type a SUM/AVG sums an argument as when the argument's own type is not
    #: listed (DuckDB: DOUBLE; PostgreSQL: NUMERIC).
    sum_as: str = "DOUBLE"
    #: Whether the engine reads a value of any type as a condition without error
    #: (SQLite converts any value to a number, and a number to a truth value).
    conditions_of_any_type: bool = False
    #: Whether the engine has a guard, or its dialect layer writes a guarded node in a
    #: total form of its own (PostgreSQL, Spark); False (SQLite): what is not listed is
    #: refused while guards are placed.
    guard_forms: bool = True

    @property
    def sum_as_type(self) -> str:
        return "NUMERIC" if self.sum_as == "DECIMAL" else self.sum_as

    def entry(self, node: exp.Expression, types: Types) -> Entry | None:
        """The entry that makes ``node`` total, or None."""
        for e in self.entries:
            if isinstance(node, e.ops) and e.when(node, types):
                return e
        return None

    def total(self, node: exp.Expression, types: Types) -> bool:
        return isinstance(node, STRUCTURE) and not isinstance(node, exp.Interval) or \
            self.entry(node, types) is not None


#: The operand a CASE without ELSE (or a WHEN without THEN) stands for in
#: :func:`operands`. One object, alive for good and never typed: :class:`Types` is keyed
#: by ``id``, and a node built anew at each call could take the ``id`` of a freed node
#: that was typed (a CAST that :func:`place_guards` replaced by TRY_CAST), and so its
#: type, at one call and not at the next: the placement and the check then disagree
#: about the same CASE (a query refused by the check after the placement judged it
#: total, depending on memory addresses). The stand-in has no type (as a new node has
#: when no freed ``id`` is reused), at every call.
MISSING = exp.Null()


def operands(node: exp.Expression) -> list[exp.Expression]:
    """The value operands of a node (not its type or unit arguments); a missing CASE
    branch is :data:`MISSING` (read it, never attach it to a tree)."""
    if isinstance(node, exp.Case):
        out = [i.args.get("true") for i in node.args.get("ifs") or []]
        out.append(node.args.get("default"))
        return [o if o is not None else MISSING for o in out]
    if isinstance(node, exp.Cast):
        return [node.this]
    if isinstance(node, exp.In):
        query = node.args.get("query")
        return [node.this, *node.expressions, *([query] if query is not None else [])]
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    return [c for c in node.iter_expressions()
            if not isinstance(c, exp.DataType | exp.Var | exp.Window | exp.Order)]


def conditions(node: exp.Expression) -> list[tuple[str, int | None]]:
    """(arg key, index) of the operands of ``node`` that the engine reads as conditions."""
    if isinstance(node, exp.Where | exp.Having | exp.Not):
        return [("this", None)]
    if isinstance(node, exp.Join):
        return [("on", None)] if node.args.get("on") is not None else []
    if isinstance(node, exp.And | exp.Or | exp.Xor):
        return [("this", None), ("expression", None)]
    if isinstance(node, exp.If) and not (isinstance(node.parent, exp.Case)
                                         and node.parent.this is not None):
        return [("this", None)]  # a simple CASE's WHEN values are compared, not tested
    return []


class Untyped(Types):
    """The types of an engine that binds no types (SQLite: any column may hold a value
    of any storage class, and an expression has no declared type). Every node is of
    type ``ANY``; that engine's allow-list decides by operation alone, so each of its
    entries must hold for values of every storage class."""

    def __call__(self, node: exp.Expression | None) -> str | None:
        return NULL if node is None else "ANY"


# -- placement and check ----------------------------------------------------------------------


def _contains_unwrappable(node: exp.Expression) -> bool:
    return any(isinstance(n, UNWRAPPABLE) for n in node.walk())


def _wrap(node: exp.Expression, make: Callable[[exp.Expression], exp.Expression]
          ) -> exp.Expression:
    """Puts ``make(node)`` where ``node`` was (the new node may hold ``node``)."""
    parent, key, index = node.parent, node.arg_key, node.index
    new = make(node)
    if parent is not None:
        parent.set(key, new, index)
    return new


def _nullif_zero(node: exp.Expression) -> bool:
    return isinstance(node, exp.Nullif) and isinstance(node.expression, exp.Literal) \
        and node.expression.this == "0"


def place_guards(tree: exp.Expression, allow: AllowList, types: Types,
                 refuse: Callable[[exp.Expression, str], Exception]) -> exp.Expression:
    """Guards every operation of ``tree`` that ``allow`` does not list as total (DuckDB form).

    Children first, each failing node with its own guard: a CAST becomes TRY_CAST, any
    other operation ``TRY(...)``; a condition that is not BOOLEAN becomes
    ``TRY_CAST(... AS BOOLEAN)``; a SUM or AVG of a type whose total is not bounded sums
    its argument as DOUBLE. What cannot be guarded (an operation over an aggregate, a
    window or a subquery) raises ``refuse(node, reason)``.
    """
    def condition(node: exp.Expression) -> None:
        if allow.conditions_of_any_type:
            return
        for key, _ in conditions(node):
            cond = node.args.get(key)
            if cond is None or types(cond) in ("BOOLEAN", NULL):
                continue
            if _contains_unwrappable(cond):
                if not allow.refuse_unwrappable:
                    continue
                raise refuse(cond, "a condition that is not a boolean")
            new = exp.TryCast(this=cond, to=data_type("BOOLEAN"))
            node.set(key, new)
            types.set(new, "BOOLEAN")

    def visit(node: exp.Expression) -> None:
        for child in list(node.iter_expressions()):
            visit(child)
        condition(node)
        if isinstance(node, exp.If) and isinstance(node.parent, exp.Case):
            return  # a branch is not a value: its CASE is checked whole
        if allow.total(node, types) or isinstance(node, allow.guards):
            return
        if isinstance(node.parent, allow.guards) and not isinstance(node.parent, exp.TryCast):
            return
        if isinstance(node, exp.Sum | exp.Avg):
            arg = node.this
            if not isinstance(arg, exp.Distinct) and types(arg) is not None \
                    and not _contains_unwrappable(arg):
                wide = exp.Cast(this=exp.Try(this=arg), to=data_type(allow.sum_as))
                types.set(wide.this, types(arg))
                types.set(wide, allow.sum_as_type)
                node.set("this", wide)
                if allow.total(node, types):
                    return
            if not allow.refuse_unwrappable:
                return
            raise refuse(node, f"{node.sql_name()} of {types(node.this) or 'an unknown type'}")
        if allow.nullif_divisors and isinstance(node, exp.Div | exp.IntDiv | exp.Mod) \
                and not _nullif_zero(node.expression):
            # a zero divisor gives NULL, as the guard would: then the division is one
            # an engine without TRY can make total (PostgreSQL's NUMERIC form)
            divisor = node.expression
            zero = exp.Literal.number(0)
            guarded = exp.Nullif(this=divisor, expression=zero)
            types.set(guarded, types(divisor))
            types.set(zero, "INTEGER")
            node.set("expression", guarded)
        if not allow.guard_forms:
            args = ", ".join(str(types(o) or "?") for o in operands(node))
            raise refuse(node, f"{_name(node)}({args}) on {allow.engine}")
        if type(node) is exp.Cast:
            new = _wrap(node, lambda n: exp.TryCast(this=n.this, to=n.args["to"]))
            types.set(new, types(node))
            return
        if _contains_unwrappable(node):
            if not allow.refuse_unwrappable:
                return
            raise refuse(node, "an operation that may fail, over an aggregate, a window "
                               "or a subquery, which cannot be guarded")
        new = _wrap(node, lambda n: exp.Try(this=n))
        types.set(new, types(node))

    visit(tree)
    return tree


def problems(tree: exp.Expression, allow: AllowList, types: Types) -> list[tuple[str, str]]:
    """Every (expression, reason) of ``tree`` that may fail on some rows outside a guard."""
    found: list[tuple[str, str]] = []

    def report(node: exp.Expression, reason: str) -> None:
        found.append((node.sql(dialect="duckdb")[:120], reason))

    def guarded(node: exp.Expression) -> bool:
        parent = node.parent
        while isinstance(parent, exp.Paren):
            parent = parent.parent
        return isinstance(parent, allow.guards) and not isinstance(parent, exp.TryCast)

    for node in tree.walk():
        for key, _ in conditions(node) if not allow.conditions_of_any_type else ():
            cond = node.args.get(key)
            if cond is not None and types(cond) not in ("BOOLEAN", NULL):
                report(cond, f"a condition of type {types(cond) or 'unknown'}")
        if isinstance(node, allow.guards):
            if _contains_unwrappable(node.this if isinstance(node, exp.Try) else exp.Null()):
                report(node, "a guard around an aggregate, a window or a subquery")
            continue
        if isinstance(node, exp.If) and isinstance(node.parent, exp.Case):
            continue
        if allow.total(node, types) or guarded(node):
            continue
        args = ", ".join(str(types(o) or "?") for o in operands(node))
        report(node, f"{_name(node)}({args}) is not on {allow.engine}'s list of operations "
                     "that cannot fail")
    return found


def check_total(tree: exp.Expression, allow: AllowList, types: Types) -> None:
    """Refuses (before the charge) a tree with an operation that may fail outside a guard.

    Raises:
        BackendError: not charged; names the expression and why.
    """
    found = problems(tree, allow, types)
    if found:
        what, reason = found[0]
        err = BackendError(f"{allow.engine} could fail on some data in {what!r} ({reason}), "
                           "so dpsql refuses the query; nothing was charged")
        err.charged = False
        raise err


def _name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).upper()
    if isinstance(node, exp.Func):
        return node.sql_name()
    return type(node).__name__.upper()


# -- predicates the allow-lists are written with ----------------------------------------------


def always(node: exp.Expression, types: Types) -> bool:
    return True


def is_test(node: exp.Expression, types: Types) -> bool:
    """``IS NULL`` only tests; ``IS TRUE``/``IS FALSE`` convert a non-boolean operand."""
    return isinstance(node.expression, exp.Null) or types(node.this) in ("BOOLEAN", NULL)


def searched_case(node: exp.Expression, types: Types) -> bool:
    """A CASE with conditions (``CASE WHEN c THEN ...``): ``CASE x WHEN v`` compares ``x``
    with each value, in a type of the engine's choosing, so it is guarded whole."""
    return not isinstance(node, exp.Case) or node.this is None


def operands_meet(node: exp.Expression, types: Types) -> bool:
    """The operands meet in a common type by widening (:func:`widening`)."""
    return widening(types(o) for o in operands(node))


def operands_meet_result(node: exp.Expression, types: Types) -> bool:
    """The operands meet by widening, and each widens to the result's type."""
    return types(node) is not None and widening([types(o) for o in operands(node)],
                                                types(node))


def all_operands(*allowed: str) -> Callable[[exp.Expression, Types], bool]:
    """Every operand's type is one of ``allowed`` (or NULL)."""
    def test(node: exp.Expression, types: Types) -> bool:
        return all(types(o) in (*allowed, NULL) for o in operands(node))
    return test


def floating(node: exp.Expression, types: Types) -> bool:
    """The result is floating-point and every operand an integer or a float: the
    operands widen to the float type, and IEEE arithmetic gives inf or NaN, not errors."""
    return is_float(types(node)) and all(
        is_integer(types(o)) or is_float(types(o)) or types(o) == NULL for o in operands(node))


def negated_literal(node: exp.Expression, types: Types) -> bool:
    """``-<number literal>``: the engine types a positive literal with the smallest type
    that holds it, and a signed type holds the negation of every positive value."""
    inner = node.this
    while isinstance(inner, exp.Paren):
        inner = inner.this
    return isinstance(inner, exp.Literal) and not inner.is_string


#: Largest amount of a constant interval taken as total: DuckDB converts ``INTERVAL n
#: unit`` row by row where it does not fold it (``to_years(999999999)`` overflows).
MAX_INTERVAL_AMOUNT = 10**6


def constant_interval(node: exp.Expression, types: Types) -> bool:
    """``INTERVAL <whole number up to a million> unit``: a conversion that cannot leave
    the interval's range (months, days and microseconds of 32 and 64 bits) for any unit
    up to years; not a spelled-out text such as ``'1 day 2 hours'``."""
    amount = node.this
    text = amount.this.strip() if isinstance(amount, exp.Literal) else ""
    return bool(re.fullmatch(r"-?[0-9]{1,7}", text)) and abs(int(text)) <= MAX_INTERVAL_AMOUNT


def anonymous(*names: str) -> Callable[[exp.Expression, Types], bool]:
    upper = {n.upper() for n in names}
    return lambda node, types: str(node.this).upper() in upper


def cast_from(table: dict[str, Callable[[str | None], bool]]
              ) -> Callable[[exp.Expression, Types], bool]:
    """A cast is total when its source type passes the test its target's base names."""
    def test(node: exp.Expression, types: Types) -> bool:
        target, source = types(node), types(node.this)
        if target is None or source is None:
            return False
        if source in (target, NULL):
            return True
        rule = table.get(base(target))
        return bool(rule and rule(source))
    return test


def widens_to(target_rank: int) -> Callable[[str | None], bool]:
    """An integer type no wider than the integer type at ``target_rank`` of INTEGERS."""
    return lambda t: is_integer(t) and INTEGERS.index(t) <= target_rank
