"""In-process evaluation over public domains, and a-priori bounds on value lengths.

A key's image (:mod:`dpsql.analyze.domains`) and a WHERE restriction of public keys
(:mod:`dpsql.analyze.key_conditions`) are computed in a scratch DuckDB on the catalog's
domains, never on data; this module runs those evaluations within the owner's work
limits (cached), and bounds, before anything runs, how long a computed value can be.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import duckdb
import pyarrow as pa
from sqlglot import exp

from dpsql.analyze.bounds import PART_FUNCTIONS
from dpsql.catalog import Column
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits
from dpsql.scratch import scratch

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

#: Images already evaluated: (checked SQL, digest of the inputs) → values. The image is a
#: function of the query text and the catalog alone, so a repeated key expression (the
#: same query again, or epsilon_for's search) skips evaluating it. The cache holds at
#: most _CACHE_CHARS characters of values in all (least recently used out first).
_cache: OrderedDict[tuple, tuple[list | None, int]] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_CHARS = 5_000_000
_cache_chars = 0


def _evaluate(sql: str, inputs: tuple[tuple, ...], spent: list[int],
              work: int, whole: bool = False) -> list | None:
    """The distinct values of ``sql`` over the input columns ``__in0 ...``, or None.

    Charges ``work`` to ``spent``, cached or not. ``whole``: every row as a
    tuple, not only its first value.
    """
    global _cache_chars
    # a digest, not the inputs themselves: up to max_domain_inputs values per key
    key = (sql, hashlib.sha256(repr(inputs).encode()).digest(), whole)
    # charged on a cache hit too: whether a key is public must not depend on what other
    # queries of the process evaluated before (another analyst's query text)
    spent[0] += work
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][0]
    with scratch() as con:
        try:
            for i, values in enumerate(inputs):
                con.register(f"__in{i}", pa.table({f"__c{i}": list(values)}))
            values = [r if whole else r[0] for r in con.execute(sql).fetchall()]
        except (duckdb.Error, pa.ArrowException):
            values = None  # not evaluable here: the keys come from the data instead
    size = 16 + sum(_text_length(v) for row in values or ()
                    for v in (row if whole else (row,)))
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
