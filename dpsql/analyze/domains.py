"""Public domains of GROUP BY expressions, derived from the catalog and the query alone.

A group key with a public domain releases every key of the domain (empty ones with a
noisy 0) and needs no partition selection, so no δ. Its domain must not depend on the
data; the rewrite then keeps only rows whose key lies in it
(:mod:`dpsql.rewrite.restrict_domains`), so a key the data hold outside the domain never
appears, whatever the catalog claims. The rules, in order:

* a bare column: its ``values`` list (or ``{false, true}`` for a bool);
* ``CASE``/``IF`` whose every result is a literal: those literals (and NULL when a
  branch can be missing or NULL);
* a part of a date with a fixed range (``MONTH``, ``QUARTER``, ``EXTRACT(DOW ...)``, ...):
  that range;
* any other expression whose columns all have a finite public domain — a ``values``
  list, a bool, or a date column with lower and upper dates — is evaluated on every
  combination of those values in a fresh private in-memory DuckDB
  (:func:`dpsql.scratch.scratch`), reading no data: its image is the domain. So
  ``date_trunc('month', d)`` over bounded dates, ``UPPER(state)`` or
  ``COALESCE(code, 0)`` over a listed domain are public.

Evaluating in process is work done before the charge, so it is bounded a priori by the
owner's :class:`~dpsql.limits.Limits`, before anything runs:

* at most ``max_domain_inputs`` input combinations;
* :func:`length_bounds` bounds the length of every intermediate value from the query
  alone (``REPLACE`` multiplies lengths, ``||`` adds them): a bound over
  ``max_value_length`` refuses the query (:func:`check_value_lengths`), which is fast
  and free whatever the literals ask for;
* inputs × the summed bounds of all nodes, plus the cost of opening a database, must
  fit into ``max_domain_work`` — summed over all the keys of one query when the caller
  passes ``work`` — or the key is not evaluated and comes from the data (partition
  selection);
* afterwards every produced value is checked again, and an image of more than
  :data:`MAX_VALUES` keys or ``max_domain_chars`` characters is not kept.

Numeric bounds (``lower``/``upper`` of an int) say how to clamp values, not which keys
exist, so they never make a domain: ``GROUP BY age`` goes through partition selection.

>>> import datetime
>>> from sqlglot import parse_one
>>> from dpsql.catalog import Column
>>> cols = {"d": Column("d", "date", datetime.date(2020, 1, 30), datetime.date(2020, 3, 2)),
...         "age": Column("age", "int", 0, 100)}
>>> [str(v) for v in domain(parse_one("date_trunc('month', d)", read="duckdb"),
...                         lambda c: cols[c.name])]
['2020-01-01 00:00:00', '2020-02-01 00:00:00', '2020-03-01 00:00:00']
>>> domain(parse_one("CASE WHEN age < 30 THEN 'young' ELSE 'old' END"), lambda c: cols[c.name])
('old', 'young')
>>> domain(parse_one("age // 10", read="duckdb"), lambda c: cols[c.name]) is None
True
"""

from __future__ import annotations

import datetime
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable

import duckdb
import pyarrow as pa
from sqlglot import exp

from dpsql.analyze.bounds import DATE_PARTS, PART_FUNCTIONS
from dpsql.catalog import Column
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits
from dpsql.scratch import checked_sql, scratch

#: Most input combinations evaluated to find an expression's image (the default of the
#: owner's ``max_domain_inputs``).
MAX_INPUTS = DEFAULT.max_domain_inputs
#: Largest image kept as a domain (beyond it, partition selection is cheaper).
MAX_VALUES = 10_000
#: Longest text of a value that is not a string (a number, date, timestamp, interval or
#: bool written as VARCHAR): a HUGEINT has 40 characters, an INTERVAL about 70.
SCALAR_TEXT = 128
#: Lengths are capped here while they are combined (a product of many REPLACEs would
#: otherwise grow huge integers); anything this large is far over every limit.
_CAP = 2**62
#: Work units charged for each image evaluated (opening, filling and closing a scratch
#: database: ~40 ms, what ~4 million units of evaluation cost), so many cheap images
#: still add up to a bounded total.
OPEN_COST = 4_000_000


def domain(expr: exp.Expression, lookup: Callable[[exp.Column], Column],
           limits: Limits = DEFAULT, work: list[int] | None = None) -> tuple | None:
    """The public domain of a group key, or None when it must come from the data.

    Args:
        expr: the key expression.
        lookup: resolves a column to its catalog entry.
        limits: the owner's limits.
        work: one query's running total of image work (a one-element list shared by
            all its keys): once evaluating another image would take it over
            ``limits.max_domain_work``, keys are no longer evaluated in process and
            come from the data. None: each image is bounded on its own.

    Raises:
        UnsupportedQueryError: evaluating the key could produce a value longer than
            ``limits.max_value_length`` (refused before anything is evaluated).
    """
    if isinstance(expr, exp.Column):
        return column_values(lookup(expr), dates=False)
    if isinstance(expr, exp.Case | exp.If):
        return _literal_results(expr)
    fixed = _fixed_part(expr)
    if fixed is not None:
        nullable = _nullable(expr, lookup)
        return tuple(range(fixed[0], fixed[1] + 1)) + ((None,) if nullable else ())
    return _image(expr, lookup, limits, [0] if work is None else work)


def column_values(col: Column, dates: bool = True, limits: Limits = DEFAULT) -> tuple | None:
    """A column's finite public domain: its ``values``, a bool's two, or bounded dates."""
    values = col.values
    if values is None and col.type == "bool":
        values = (False, True)
    if values is None and dates and col.type == "date" and col.bounded:
        days = (col.upper - col.lower).days + 1
        if days <= limits.max_domain_inputs:
            values = tuple(col.lower + datetime.timedelta(days=i) for i in range(days))
    if values is None:
        return None
    return values + ((None,) if col.nullable else ())


def _literal_results(expr: exp.Expression) -> tuple | None:
    if isinstance(expr, exp.Case):
        results = [i.args.get("true") for i in expr.args["ifs"]]
        default = expr.args.get("default")
    else:
        results, default = [expr.args.get("true")], expr.args.get("false")
    values, null = [], default is None
    for r in [*results, default]:
        if r is None:
            continue
        if isinstance(r, exp.Null):
            null = True
        elif isinstance(r, exp.Literal):
            values.append(r.this if r.is_string else _number(r.this))
        elif isinstance(r, exp.Boolean):
            values.append(bool(r.this))
        elif isinstance(r, exp.Neg) and isinstance(r.this, exp.Literal) and not r.this.is_string:
            values.append(-_number(r.this.this))
        else:
            return None
    if not values or len({type(v) for v in values}) > 1:
        return None  # mixed types: let the engine's casts decide, from the data
    return tuple(sorted(set(values))) + ((None,) if null else ())


def _number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)


def _fixed_part(expr: exp.Expression) -> tuple[int, int] | None:
    part = PART_FUNCTIONS.get(type(expr))
    if isinstance(expr, exp.Extract):
        part = expr.this.name.upper()
    return DATE_PARTS.get(part) if part else None


def _nullable(expr: exp.Expression, lookup) -> bool:
    return any(lookup(c).nullable for c in expr.find_all(exp.Column))


def _image(expr: exp.Expression, lookup, limits: Limits, spent: list[int]) -> tuple | None:
    columns: dict[str, exp.Column] = {}
    for c in expr.find_all(exp.Column):
        columns.setdefault(c.sql(), c)
    if not columns or len(columns) > 3:
        return None
    inputs = []
    for c in columns.values():
        values = column_values(lookup(c), limits=limits)
        if values is None:
            return None
        inputs.append(values)
    combinations = math.prod(len(v) for v in inputs)
    if combinations > limits.max_domain_inputs:
        return None
    # everything below is decided before DuckDB runs: a key that could produce long
    # values is refused, one that would be much work to enumerate comes from the data
    text = {sql: max((_text_length(v) for v in values), default=0)
            for sql, values in zip(columns, inputs, strict=True)}
    found = length_bounds(expr, lambda c: text.get(c.sql(), SCALAR_TEXT))
    check_value_lengths(expr, None, limits, found)
    if found.get(id(expr)) is None:
        return None  # a construct the length bound does not model: not run in process
    work = OPEN_COST + combinations * _work_per_row(expr, found)
    if spent[0] + work > limits.max_domain_work:
        return None
    names = {sql: f"__c{i}" for i, sql in enumerate(columns)}

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.sql() in names:
            return exp.column(names[node.sql()])
        return node

    sources = [f"__in{i}" for i in range(len(inputs))]
    query = exp.select(exp.alias_(exp.Try(this=expr.copy().transform(rename)), "v")) \
        .distinct().from_(sources[0])
    for source in sources[1:]:
        query = query.join(source, join_type="CROSS")
    values = _evaluate(checked_sql(query), tuple(inputs), spent, work)
    if values is None or len(values) > MAX_VALUES:
        return None
    longest = max((_text_length(v) for v in values), default=0)
    if longest > limits.max_value_length:  # the a-priori bound makes this unreachable
        raise UnsupportedQueryError(
            f"a group key's value is {longest} characters long; the limit is "
            f"{limits.max_value_length} (max_value_length)")
    if sum(_text_length(v) for v in values) > limits.max_domain_chars:
        return None  # inlined into the SQL as literals: too long a list
    known = sorted((v for v in values if v is not None), key=lambda v: (str(type(v)), v))
    return tuple(known) + ((None,) if None in values else ())


#: Images already evaluated: (checked SQL, digest of the inputs) → values. The image is a
#: function of the query text and the catalog alone, so a repeated key expression (the
#: same query again, or epsilon_for's search) skips evaluating it. The cache holds at
#: most _CACHE_CHARS characters of values in all (least recently used out first).
_cache: OrderedDict[tuple, tuple[list | None, int]] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_CHARS = 5_000_000
_cache_chars = 0


def _evaluate(sql: str, inputs: tuple[tuple, ...], spent: list[int],
              work: int) -> list | None:
    """The distinct values of ``sql`` over the input columns ``__in0 ...``, or None.

    Charges ``work`` to ``spent`` unless the image is cached.
    """
    global _cache_chars
    # a digest, not the inputs themselves: up to max_domain_inputs values per key
    key = (sql, hashlib.sha256(repr(inputs).encode()).digest())
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][0]
    spent[0] += work
    with scratch() as con:
        try:
            for i, values in enumerate(inputs):
                con.register(f"__in{i}", pa.table({f"__c{i}": list(values)}))
            values = [r[0] for r in con.execute(sql).fetchall()]
        except (duckdb.Error, pa.ArrowException):
            values = None  # not evaluable here: the keys come from the data instead
    size = 16 + sum(_text_length(v) for v in values or ())
    if size <= _CACHE_CHARS // 4:
        with _cache_lock:
            if key not in _cache:
                _cache[key] = (values, size)
                _cache_chars += size
            while _cache_chars > _CACHE_CHARS:
                _cache_chars -= _cache.popitem(last=False)[1][1]
    return values


def _work_per_row(expr: exp.Expression, found: dict[int, int | None]) -> int:
    """Characters (at least 8 per node) one evaluation of ``expr`` may touch.

    A node of fixed-size type (a number, date, bool) counts 8, whatever its text would
    be: only strings carry their length through the evaluation.
    """
    total = 0
    for node in expr.walk():
        bound = found.get(id(node))
        if bound is None:
            continue
        scalar = isinstance(node, _SCALAR) and not (
            isinstance(node, exp.Literal) and node.is_string) or (
            isinstance(node, exp.Cast | exp.TryCast)
            and not node.to.is_type(*exp.DataType.TEXT_TYPES))
        total += 8 if scalar else max(bound, 8)
    return total


def _text_length(value) -> int:
    """Characters of a value written as text (an a-priori bound for non-strings)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int) and -10**40 < value < 10**40:
        return len(str(value))
    return SCALAR_TEXT


# -- a-priori bounds on the length of computed values ------------------------------------

#: Value nodes whose text is that of their first argument (or shorter): case mapping
#: is one character to one in DuckDB, trimming and slicing only shorten.
_SAME_AS_FIRST = (exp.Paren, exp.Alias, exp.Lower, exp.Upper, exp.Trim, exp.Substring,
                  exp.Left, exp.Right, exp.Nullif, exp.Min, exp.Max, exp.Cast, exp.TryCast,
                  exp.Try)
#: Value nodes that return one of several arguments.
_ONE_OF = (exp.Coalesce, exp.Least, exp.Greatest)
#: Value nodes whose value is a number, bool, date, timestamp or interval: fixed size.
_SCALAR = (exp.Literal, exp.Null, exp.Boolean, exp.Add, exp.Sub, exp.Mul, exp.Div,
           exp.IntDiv, exp.Mod, exp.Neg, exp.Abs, exp.Sign, exp.Sqrt, exp.Ln, exp.Exp,
           exp.Round, exp.Floor, exp.Ceil, exp.Length, exp.Extract, exp.TimestampTrunc,
           exp.DateTrunc, exp.Interval, exp.Predicate, exp.Connector, exp.Not, exp.Xor,
           exp.Count, exp.Sum, exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev,
           exp.StddevSamp, exp.StddevPop, exp.Median, exp.PercentileCont,
           exp.PercentileDisc, exp.Quantile, exp.ApproxQuantile, *PART_FUNCTIONS)
#: Nodes that are not values themselves (their children are still bounded).
_STRUCTURE = (exp.Query, exp.Subquery, exp.From, exp.Join, exp.Where, exp.Group,
              exp.Having, exp.Order, exp.Ordered, exp.Limit, exp.Offset, exp.Table,
              exp.TableAlias, exp.Identifier, exp.DataType, exp.DataTypeParam, exp.Var,
              exp.Star, exp.Distinct, exp.With, exp.CTE, exp.WithinGroup, exp.Tuple)


def length_bounds(expr: exp.Expression,
                  column: Callable[[exp.Column], int]) -> dict[int, int | None]:
    """An upper bound on the text length of every value node of ``expr``, by ``id()``.

    Args:
        expr: any expression or query.
        column: the longest text of a column's values. For a string column whose
            values are not listed, pass 1: the bound of an expression is then its growth,
            the characters it can produce per character of the data.

    Returns:
        ``id(node) → bound`` for every node of the tree; None for nodes that are no
        values (:data:`_STRUCTURE`) and for value nodes this function does not model
        (and everything built on them), which callers must treat as unbounded.

    >>> from sqlglot import parse_one
    >>> e = parse_one("replace(replace(CAST(x AS VARCHAR), '0', '00000'), '0', 'xyz') || 'ab'")
    >>> length_bounds(e, lambda c: 3)[id(e)]   # 3 → 3·5 → 3·5·3, then + 2
    47
    """
    out: dict[int, int | None] = {}
    # post-order without recursion: children are bounded before their parent
    stack: list[tuple[exp.Expression, bool]] = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in node.iter_expressions())
            continue
        out[id(node)] = _bound(node, out, column)
    return out


def _bound(node: exp.Expression, out: dict, column) -> int | None:
    def of(child) -> int | None:
        return None if child is None else out.get(id(child))

    def total(children, combine) -> int | None:
        bounds = [of(c) for c in children if c is not None]
        if not bounds or any(b is None for b in bounds):
            return None
        return min(combine(bounds), _CAP)

    if isinstance(node, exp.Literal):
        return len(node.this) if node.is_string else SCALAR_TEXT
    if isinstance(node, exp.Column):
        return min(int(column(node)), _CAP) if not isinstance(node.this, exp.Star) else None
    if isinstance(node, exp.Replace):
        text, new = of(node.this), of(node.args.get("replacement"))
        if text is None or new is None:
            return None
        # every occurrence of a (non-empty) pattern becomes the replacement
        return min(text * max(new, 1), _CAP)
    if isinstance(node, exp.Concat):
        return total(node.expressions, sum)
    if isinstance(node, exp.DPipe):
        return total([node.this, node.expression], sum)
    if isinstance(node, exp.Case):
        results = [i.args.get("true") for i in node.args.get("ifs") or []]
        return total([*results, node.args.get("default")], max)
    if isinstance(node, exp.If):
        return total([node.args.get("true"), node.args.get("false")], max)
    if isinstance(node, _ONE_OF):
        return total([node.this, *node.expressions], max)
    if isinstance(node, exp.Cast | exp.TryCast) and not node.to.is_type(
            *exp.DataType.TEXT_TYPES):
        return SCALAR_TEXT
    if isinstance(node, _SAME_AS_FIRST):
        return of(node.this)
    if isinstance(node, _SCALAR):
        return SCALAR_TEXT
    return None


def check_value_lengths(expr: exp.Expression, lookup: Callable[[exp.Column], Column] | None,
                        limits: Limits = DEFAULT,
                        found: dict[int, int | None] | None = None) -> None:
    """Refuses a query that could compute a value longer than ``limits.max_value_length``.

    A static check over the whole tree (outputs, WHERE, keys, HAVING, inside aggregates):
    a string built from literals with ``REPLACE`` and ``||`` can be made gigabytes long
    from a short query, and any engine that folds constants (the DuckDB planner, the
    post-processing check) would build it before the charge. Data strings whose length
    the catalog does not bound count as length 1, so for them the check bounds the
    growth factor instead.

    Args:
        expr: the query (or one expression of it).
        lookup: resolves a column to its catalog entry (None or a failing lookup: the
            column counts as a string of length 1 or a scalar, whichever is longer).
        limits: the owner's limits.
        found: the bounds already computed by :func:`length_bounds`, if any.

    Raises:
        UnsupportedQueryError: names the expression and the limit; nothing is evaluated.

    >>> from sqlglot import parse_one
    >>> check_value_lengths(parse_one("replace('0', '0', '" + "0" * 999 + "') || 'x'"), None)
    >>> check_value_lengths(parse_one(
    ...     "replace(replace('00', '0', '" + "0" * 999 + "'), '0', '" + "0" * 999 + "')"), None)
    Traceback (most recent call last):
    ...
    dpsql.errors.UnsupportedQueryError: REPLACE(REPLACE('00' ... of up to 1996002 characters...
    """
    if found is None:
        found = length_bounds(expr, lambda c: column_text(c, lookup))
    for node in expr.walk():
        bound = found.get(id(node))
        if bound is not None and bound > limits.max_value_length:
            shown = node.sql(dialect="duckdb")
            shown = shown if len(shown) <= 40 else shown[:20] + " ..."
            raise UnsupportedQueryError(
                f"{shown} could compute a value of up to {bound} characters; the limit is "
                f"{limits.max_value_length} (max_value_length)")


def column_text(col: exp.Column, lookup) -> int:
    """The longest text of a column's values, as :func:`check_value_lengths` counts it."""
    try:
        entry = lookup(col) if lookup is not None else None
    except Exception:  # noqa: BLE001 - an unresolvable name is reported elsewhere
        entry = None
    if entry is None:
        return SCALAR_TEXT
    if entry.type != "string":
        return SCALAR_TEXT
    if entry.values:
        return max(_text_length(v) for v in entry.values)
    return 1
