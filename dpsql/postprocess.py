"""Post-processing stage: noisy statistics become the analyst's answer.

Free under DP's post-processing property: everything here reads only noisy values and
released keys. The analyst's outer expressions, HAVING, ORDER BY and LIMIT run in a
fresh private in-memory DuckDB per use (:mod:`dpsql.scratch`: nothing one query does
there is seen by another) over the small table of released groups, so their SQL
semantics are DuckDB's own. Only SQL that sqlglot writes from dpsql's own tree runs
there, after the output check; the value lengths of the outer expressions are bounded
before any of it runs (:func:`~dpsql.analyze.domains.check_value_lengths`: DuckDB's
planner folds constant expressions, so a constant ``REPLACE`` chain would be built while
merely binding). Error bars are derived alongside in
Python by interval arithmetic: for an output that depends on ``m`` noisy statistics,
each statistic's interval is taken at level ``α/m``, so by the union bound the
output's interval holds with probability at least ``1 − α``.

Consistent answers. Every released cell is first brought into the range its public
bounds allow (:func:`cell_range`): a count (rows, users or distinct values) is not
negative, a SUM of values clamped to ``[L, U]`` with ``L >= 0`` is not negative (and
with ``U <= 0`` not positive), an AVG lies in ``[L, U]``, a VARIANCE in
``[0, ((U − L)/2)²]`` (twice that for the sample variance, which ``n/(n − 1) <= 2``
allows), a STDDEV in the square roots of those, and a quantile in ``[L, U]``. Every
interval is intersected with the same range. This is post-processing, so it is free:
the function reads one noisy value and bounds that come from the catalog and the query
(never from the data), and the rest of this module (HAVING, ORDER BY, outer
expressions) sees only the consistent values. Clamping a value ``v`` into a range
``R`` that holds the true value ``t`` never moves it further from ``t``
(``|clamp(v) − t| <= |v − t|``), so ``[clamp(v) − w, clamp(v) + w] ∩ R`` holds ``t``
whenever ``[v − w, v + w]`` does: the intervals keep their ``1 − α`` coverage, and
unlike ``[v − w, v + w] ∩ R`` they are never empty. After the intersection an interval
need not be symmetric: the half-width (``Result.accuracy``) stays the larger distance
from the value to an end of the interval, and the interval itself is
``Result.intervals``.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

import duckdb
import pyarrow as pa
from sqlglot import exp

from dpsql.aggregates.avg import value as _avg  # noqa: F401 - tests/test_explain.py
from dpsql.aggregates.variance import value as _variance  # noqa: F401 - the same
from dpsql.analyze.domains import (
    SCALAR_TEXT,
    check_value_lengths,
    column_text,
    length_bounds,
)
from dpsql.analyze.plan import Cell, Plan
from dpsql.errors import PostprocessError, UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits
from dpsql.noise import NoisyGroups
from dpsql.postprocess_arith import evaluate
from dpsql.postprocess_order import sort_rows
from dpsql.released_table import arrow_array, scanned_rows
from dpsql.scratch import checked_sql, scratch
from dpsql.sqlbuild import data_type

ROW_ID = "__rid"


@dataclass
class Answer:
    """The analyst's answer.

    Attributes:
        columns: output names.
        rows: the released values, one tuple per group.
        accuracy: per cell the half-width of its ``1 − alpha`` interval (None: exact).
        intervals: per cell its ``1 − alpha`` interval ``(low, high)`` intersected with
            what the bounds allow (None: exact); ``low <= value <= high``.
        noisy: per column whether it carries an error bar (depends on a noisy cell).
    """

    columns: list[str]
    rows: list[tuple]
    accuracy: list[tuple]
    intervals: list[tuple] = field(default_factory=list)
    noisy: tuple[bool, ...] = ()


def cell_range(plan: Plan, cell: Cell) -> tuple[float, float]:
    """What an aggregate of the analyst's query can be, from public bounds alone.

    See the module's docstring; each family states its range (:mod:`dpsql.aggregates`):
    AVG and quantiles lie within their value bounds, a variance between 0 and its
    largest value over bounded values, a count or sum within its statistic's range.
    """
    return cell.family.range(plan, cell)


def cell_values(plan: Plan, noisy: NoisyGroups) -> dict[str, list]:
    """The released value of every aggregate cell in every released group.

    Each value is consistent with public bounds (:func:`cell_range`): post-processing
    of the noisy statistics, so free under DP.
    """
    out: dict[str, list] = {cell.name: cell.family.values(plan, cell, noisy)
                            for cell in plan.cells}
    for family in dict.fromkeys(cell.family for cell in plan.cells):
        family.after_values(plan, out)  # e.g. quantiles of one histogram put in order
    return out


def postprocess(plan: Plan, noisy: NoisyGroups, alpha: float = 0.05) -> Answer:
    """Evaluates outputs, HAVING, ORDER BY and LIMIT; attaches error bars."""
    cells = cell_values(plan, noisy)
    n = len(noisy.keys)
    data: dict[str, list] = {ROW_ID: list(range(n))}
    for i, key in enumerate(plan.keys):
        data[key.name] = [g[i] for g in noisy.keys]
    data.update(cells)
    table = _table(plan, data, n)
    scanned = scanned_rows(data, n)
    if scanned is None:
        scanned = table().to_pylist()

    result = None
    if _selects_released(plan):
        # the outer query only selects released columns: read them off the same Arrow
        # table DuckDB would scan (same values and Python types, in the same order),
        # and order and cut them as DuckDB would (None: DuckDB must), without a database
        result = [tuple(r[o.expr.name] for o in plan.outputs) + (r[ROW_ID],)
                  for r in scanned]
        if plan.order is not None or plan.limit is not None or plan.offset is not None:
            result = sort_rows(result, [o.name for o in plan.outputs],
                               [o.expr.name for o in plan.outputs], plan.order, plan.limit,
                               plan.offset)
    elif plan.having is None and plan.order is None and plan.limit is None \
            and plan.offset is None:
        result = _computed(plan, scanned)  # arithmetic over released columns (None: DuckDB)
    if result is None:
        with scratch() as con:
            try:
                con.register("__noisy", table())
                result = con.execute(_outer_sql(plan)).fetchall()
            except duckdb.Error as exc:  # depends on noisy values only; charge kept
                raise PostprocessError(
                    f"post-processing the noisy answer failed ({type(exc).__name__})"
                ) from None

    rows, accuracy, intervals = [], [], []
    # what each output's error bar reads, the same in every row
    bar_of = [_error_bar(plan, out, _levels(plan, out, alpha)) for out in plan.outputs]
    for row in result:
        rid = row[-1]
        values = row[:-1]
        rows.append(tuple(values))
        bars = [bar(value, rid, noisy, cells)
                for bar, value in zip(bar_of, values, strict=True)]
        accuracy.append(tuple(b[0] for b in bars))
        intervals.append(tuple(b[1] for b in bars))
    return Answer([o.name for o in plan.outputs], rows, accuracy, intervals,
                  tuple(bool(o.cells) for o in plan.outputs))


def _table(plan: Plan, data: dict[str, list], n: int) -> Callable[[], pa.Table]:
    """The released groups as the Arrow table DuckDB scans, built on first call."""
    built: list[pa.Table] = []  # not functools.cache: a decorator built per answer

    def table() -> pa.Table:
        if not built:
            built.append(pa.table({name: arrow_array(values) for name, values in data.items()})
                         if n else _empty_table(plan))
        return built[0]
    return table


def _computed(plan: Plan, scanned: list[dict]) -> list[tuple] | None:
    """The outputs computed in Python from the rows DuckDB would scan, where each is a
    released column or arithmetic :func:`dpsql.postprocess_arith.evaluate` computes as
    DuckDB does; None as soon as one value is not (the scratch database answers)."""
    out = []
    for row in scanned:
        values = []
        for o in plan.outputs:
            if _released(o.expr):
                values.append(row[o.expr.name])
                continue
            value = evaluate(o.expr, row)
            if value is None:
                return None
            values.append(value)
        out.append((*values, row[ROW_ID]))
    return out


#: id(plan) → (weak reference to the plan, its checked outer SQL): a cached plan's outer
#: query is written and checked once, not per answer.
_OUTER: dict[int, tuple[weakref.ref, str]] = {}


def _outer_sql(plan: Plan) -> str:
    """The DuckDB text of :func:`postprocess_query`, after the output check.

    A pure function of the plan (the text and the check read nothing else), so it is kept
    as long as the plan lives.
    """
    hit = _OUTER.get(id(plan))
    if hit is not None and hit[0]() is plan:
        return hit[1]
    sql = checked_sql(postprocess_query(plan), _names(plan))
    key = id(plan)
    _OUTER[key] = (weakref.ref(plan, lambda _ref: _OUTER.pop(key, None)), sql)
    return sql


def postprocess_query(plan: Plan) -> exp.Select:
    """The analyst's outer query over the table ``__noisy`` of released groups.

    Every expression is wrapped in ``TRY`` so that a value-dependent error (an overflow
    in a cast of a noisy sum, say) yields NULL rather than failing an answer that has
    already been paid for.
    """

    def safe(e: exp.Expression) -> exp.Expression:
        return e.copy() if isinstance(e, exp.Column | exp.Literal) else exp.Try(this=e.copy())

    query = exp.select(
        *(exp.alias_(safe(o.expr), o.name, quoted=True) for o in plan.outputs),
        exp.column(ROW_ID),
    ).from_("__noisy")
    if plan.having is not None:
        query = query.where(safe(plan.having))
    if plan.order is not None:
        order = plan.order.copy()
        for ordered in order.expressions:
            if not isinstance(ordered.this, exp.Literal):
                ordered.set("this", safe(ordered.this))
        query.set("order", order)
    if plan.limit is not None:
        query = query.limit(plan.limit.copy())
    if plan.offset is not None:
        query = query.offset(plan.offset.copy())
    return query


def check_postprocess(plan: Plan, key_types: list[str], limits: Limits = DEFAULT) -> None:
    """Binds the outer query over an empty table of the right types; reads no data.

    Before anything is bound, the length of every value the outer expressions can
    compute is bounded from the plan alone (a constant ``REPLACE`` chain would otherwise
    be folded by DuckDB's planner, gigabytes before the charge).

    Raises:
        UnsupportedQueryError: the outer part (output expressions, HAVING, ORDER BY,
            LIMIT) cannot run, e.g. ``ORDER BY 0``, could compute an over-long value, or
            a group key has a type post-processing cannot hold; refused before any
            charge.
    """
    keys = _key_lengths(plan)

    def leaf(col: exp.Column) -> int:
        return keys.get(col.name, SCALAR_TEXT)

    parts = [o.expr for o in plan.outputs] + [plan.having] + (
        [o.this for o in plan.order.expressions] if plan.order is not None else [])
    for part in parts:
        if part is not None:
            check_value_lengths(part, None, limits, length_bounds(part, leaf))
    columns = [f"{ROW_ID} BIGINT"]
    columns += [f"{k.name} {_column_type(t)}" for k, t in zip(plan.keys, key_types, strict=True)]
    if _plain(plan):
        return  # selecting columns of the table binds whatever their types
    for cell in plan.cells:
        integer = cell.family.integer(plan, cell)
        columns.append(f"{cell.name} {'BIGINT' if integer else 'DOUBLE'}")
    message = _bind(tuple(columns), checked_sql(postprocess_query(plan), _names(plan)))
    if message is not None:
        for k in plan.keys:  # speak the analyst's names, not ours
            message = message.replace(k.name, k.expr.sql(dialect="duckdb"))
        raise UnsupportedQueryError(
            f"the outer part of the query (outputs, HAVING, ORDER BY) is invalid: "
            f"{message[:300]}")


def _plain(plan: Plan) -> bool:
    """Whether the outer query only selects released columns, in their released order
    (then it needs no check: selecting columns binds whatever their types)."""
    return (_selects_released(plan) and plan.order is None and plan.limit is None
            and plan.offset is None)


def _selects_released(plan: Plan) -> bool:
    """Whether the outer query only selects released columns (no HAVING); it may order
    and cut them (checked before the charge, as any outer query)."""
    return plan.having is None and all(_released(o.expr) for o in plan.outputs)


def _released(expr: exp.Expression) -> bool:
    """Whether an output expression is a released column as it is (a key or a cell)."""
    return isinstance(expr, exp.Column) and expr.name.startswith(("__k", "__a"))


def _names(plan: Plan) -> frozenset[str]:
    """Names the outer query may quote besides plain ones: the analyst's output names."""
    return frozenset(o.name for o in plan.outputs)


def _key_lengths(plan: Plan) -> dict[str, int]:
    """The longest text of each group key's values, bounded from its domain or expression."""
    out = {}
    for k in plan.keys:
        if k.domain is not None:
            out[k.name] = max((len(v) if isinstance(v, str) else SCALAR_TEXT
                               for v in k.domain), default=0)
            continue
        found = length_bounds(k.expr, lambda c: column_text(c, plan.scope.column))
        bound = found.get(id(k.expr))
        out[k.name] = SCALAR_TEXT if bound is None else bound
    return out


#: Nested types: no group key post-processing can hold (and no scalar to bind).
_NESTED = {exp.DataType.Type.ARRAY, exp.DataType.Type.LIST, exp.DataType.Type.STRUCT,
           exp.DataType.Type.MAP, exp.DataType.Type.UNION, exp.DataType.Type.USERDEFINED,
           exp.DataType.Type.OBJECT, exp.DataType.Type.NESTED}


def _column_type(type_name: str) -> str:
    """A backend's type name of a key, re-written by sqlglot from its parsed type.

    The text comes from the backend, not from dpsql: it is parsed and written again, so
    only a type sqlglot models reaches the DDL (an ENUM is held as text: its values are
    the backend's); anything else is refused before the charge.
    """
    try:
        parsed = exp.DataType.build(type_name, dialect="duckdb")
    except Exception:  # noqa: BLE001 - sqlglot raises several kinds on bad type text
        parsed = None
    if parsed is not None and parsed.this == exp.DataType.Type.ENUM:
        parsed = data_type("VARCHAR")
    if parsed is None or parsed.this in _NESTED or any(
            isinstance(n, exp.DataType) and n.this in _NESTED for n in parsed.walk()):
        raise UnsupportedQueryError(
            "a group key has a type the post-processing cannot hold; group by a "
            "number, string, date or timestamp")
    return parsed.sql(dialect="duckdb")


# the verdict depends on the two arguments alone: repeated query shapes reuse it
@functools.lru_cache(maxsize=512)
def _bind(columns: tuple[str, ...], sql: str) -> str | None:
    """DuckDB's first error line for the outer query over an empty table, or None.

    ``columns`` are dpsql's generated names with types re-written by sqlglot
    (:func:`_column_type`), ``sql`` passed the output check.
    """
    with scratch() as con:
        try:
            con.execute(f"CREATE TEMP TABLE __noisy ({', '.join(columns)})")
            con.execute("EXPLAIN " + sql).fetchall()
        except duckdb.Error as exc:
            return str(exc).splitlines()[0]
    return None


def _empty_table(plan: Plan) -> pa.Table:
    fields = [pa.field(ROW_ID, pa.int64())]
    fields += [pa.field(k.name, pa.null()) for k in plan.keys]
    fields += [pa.field(c.name, pa.float64()) for c in plan.cells]
    return pa.schema(fields).empty_table()


def stat_half_width(plan: Plan, name: str, alpha: float) -> float:
    """Half-width of a statistic's (1 − alpha) interval, from its noise distribution."""
    return plan.stat(name).mechanism.accuracy(alpha)


def _levels(plan, out, alpha) -> tuple[float, dict[str, float]] | None:
    """An output's level per statistic (``α/m``, union bound) and the statistics' widths.

    None for an output that depends on no noisy statistic.
    """
    if not out.cells:
        return None
    stats = sorted({s for c in plan.cells if c.name in out.cells for s in c.stats})
    level = alpha / len(stats)
    widths = {s: stat_half_width(plan, s, level) for s in stats
              if plan.stat(s).bins is None}  # a histogram has no one half-width
    return level, widths


def _error_bar(plan, out, levels) -> Callable:
    """The function ``(value, rid, noisy, cells) -> (half-width, interval)`` of an
    output: its cell's half-width and interval within the bounds, or (None, None).

    The interval holds the released value; the half-width is the larger distance from
    the value to an end of it, so ``value ± half-width`` covers the interval. ``levels``
    is the output's :func:`_levels`. What does not depend on the row (the output's
    cells, whether it is a statistic itself) is looked up once, here.
    """
    if levels is None:
        return lambda value, rid, noisy, cells: (None, None)
    level, widths = levels
    if isinstance(out.expr, exp.Column):
        cell = next(c for c in plan.cells if c.name == out.expr.name)
        interval = cell.family.interval
        if cell.family.direct:  # the statistic itself: its own (integer) half-width
            width = widths[cell.stats[0]]

            def direct(value, rid, noisy, cells):
                if value is None:
                    return None, None
                return width, interval(plan, cell, rid, noisy, cells, widths, level)
            return direct

        def one_cell(value, rid, noisy, cells):  # the cell's interval is the output's
            if value is None:
                return None, None
            low, high = _Intervals({cell.name: interval(
                plan, cell, rid, noisy, cells, widths, level)}).visit(out.expr)
            return _widened(value, low, high)
        return one_cell
    used = [c for c in plan.cells if c.name in out.cells]

    def computed(value, rid, noisy, cells):
        if value is None:
            return None, None
        env = {}
        for i, key in enumerate(plan.keys):
            env[key.name] = _point(noisy.keys[rid][i])
        for cell in used:
            env[cell.name] = cell.family.interval(plan, cell, rid, noisy, cells, widths,
                                                  level)
        low, high = _Intervals(env).visit(out.expr)
        return _widened(value, low, high)
    return computed


def _widened(value, low: float, high: float):
    """(half-width, interval) of a released value whose truth lies in ``[low, high]``:
    the interval widened to hold the value; (None, None) for a value that is no number."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None, None  # e.g. a CASE over aggregates that answers text
    value = float(value)
    if math.isnan(value):
        return math.inf, (-math.inf, math.inf)
    low, high = min(low, value), max(high, value)
    width = max(value - low, high - value, 0.0)
    if not math.isfinite(width):
        return math.inf, (low, high)
    return width, (low, high)


def _point(value):
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return (value, value)


class _Intervals:
    """Interval evaluation of the output expressions that analysis allows over cells."""

    def __init__(self, env: dict):
        self.env = env

    def visit(self, e: exp.Expression) -> tuple[float, float]:
        """The interval of ``e``; total (it runs after the charge): an end that comes out
        NaN (``-inf + inf``) or an arithmetic error makes the interval the whole line."""
        try:
            low, high = self._visit(e)
        except (ArithmeticError, ValueError):
            return _WHOLE
        if math.isnan(low) or math.isnan(high):
            return _WHOLE
        return (low, high)

    def _visit(self, e: exp.Expression) -> tuple[float, float]:
        if isinstance(e, exp.Column):
            iv = self.env.get(e.name)
            if iv is None:
                return (-math.inf, math.inf)
            return iv
        if isinstance(e, exp.Literal):
            if e.is_string:
                return (-math.inf, math.inf)
            v = float(e.this)
            return (v, v)
        if isinstance(e, exp.Paren):
            return self.visit(e.this)
        if isinstance(e, exp.Neg):
            lo, hi = self.visit(e.this)
            return (-hi, -lo)
        if isinstance(e, exp.Add | exp.Sub | exp.Mul | exp.Div):
            (a, b), (c, d) = self.visit(e.this), self.visit(e.expression)
            if isinstance(e, exp.Add):
                return (a + c, b + d)
            if isinstance(e, exp.Sub):
                return (a - d, b - c)
            if isinstance(e, exp.Div):
                if c <= 0 <= d:
                    return (-math.inf, math.inf)
                c, d = 1 / d, 1 / c
            products = [x * y for x in (a, b) for y in (c, d) if not math.isnan(x * y)]
            return (min(products), max(products)) if products else (-math.inf, math.inf)
        if isinstance(e, exp.Abs):
            lo, hi = self.visit(e.this)
            low = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
            return (low, max(abs(lo), abs(hi)))
        if isinstance(e, exp.Least | exp.Greatest):
            parts = [self.visit(x) for x in [e.this, *e.expressions]]
            pick = min if isinstance(e, exp.Least) else max
            return (pick(p[0] for p in parts), pick(p[1] for p in parts))
        if isinstance(e, exp.Round | exp.Floor | exp.Ceil | exp.Cast | exp.TryCast):
            # monotone: widen by one unit of the rounding on each side
            lo, hi = self.visit(e.this)
            digits = e.args.get("decimals")
            step = 10.0 ** -int(digits.this) if isinstance(digits, exp.Literal) else 1.0
            if isinstance(e, exp.Cast | exp.TryCast) and not e.to.is_type(
                    *exp.DataType.INTEGER_TYPES):
                step = 0.0
            return (lo - step, hi + step)
        if isinstance(e, exp.Pow):
            return _pow_interval(self.visit(e.this), self.visit(e.expression))
        if isinstance(e, exp.Sqrt | exp.Exp | exp.Ln):
            # monotone increasing where defined; a part outside the domain (a negative
            # square root, a logarithm of a value <= 0) is NULL or unbounded
            lo, hi = self.visit(e.this)
            if isinstance(e, exp.Sqrt):
                return (math.sqrt(max(lo, 0.0)), math.sqrt(hi)) if hi >= 0 else _WHOLE
            if isinstance(e, exp.Ln):
                return (math.log(lo) if lo > 0 else -math.inf,
                        math.log(hi)) if hi > 0 else _WHOLE
            return (_exp(lo), _exp(hi))
        return (-math.inf, math.inf)


_WHOLE = (-math.inf, math.inf)


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _pow_interval(base: tuple[float, float], power: tuple[float, float]) -> tuple[float, float]:
    """Bounds of ``x ** p`` for x in ``base`` and a constant ``p`` (POWER over cells).

    For a whole ``p`` the function is monotone on each side of 0, so the extremes lie at
    the ends of ``base`` or at 0 (an even power's minimum); a negative ``p`` is
    unbounded near 0. A fractional ``p`` is defined for x >= 0 only (monotone there).
    Anything else (a non-constant exponent, overflow) gives the whole line: no error
    bar is better than a wrong one.
    """
    lo, hi = base
    p, p_hi = power
    if p != p_hi or not math.isfinite(p) or math.isnan(lo) or math.isnan(hi):
        return _WHOLE
    if p.is_integer() and p < 0 and lo <= 0 <= hi:
        return _WHOLE
    if not p.is_integer() and (lo < 0 or (p < 0 and lo <= 0)):
        return _WHOLE
    candidates = [lo, hi] + ([0.0] if lo < 0 < hi else [])
    try:
        values = [math.pow(x, p) if math.isfinite(x) else (
            math.inf if x > 0 or (p.is_integer() and p % 2 == 0) else -math.inf)
            if p > 0 else 0.0 for x in candidates]
    except (OverflowError, ValueError, ZeroDivisionError):
        return _WHOLE
    return (min(values), max(values))
