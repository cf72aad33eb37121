"""``AVG(x)`` answered from a cached ``SUM(x)`` and ``COUNT(x)`` of one answer, free.

A query whose select items are ``AVG(x)`` and items of an answered query, over the same
frame (FROM, WHERE, GROUP BY and everything else but the select list, the same ε, δ,
options, bounds, mechanism, confidence, catalog and schema versions, analyst), where
that answer released ``SUM(x)`` and ``COUNT(x)`` (or ``COUNT(*)`` when ``x`` is never
NULL per the catalog), is answered from that one answer: ``AVG = SUM / COUNT`` per
released group, with an error bar by interval arithmetic; the backend is not asked and
nothing is charged. HAVING, ORDER BY, LIMIT and OFFSET of the AVG query are then applied
to those rows as :mod:`dpsql.answer_derive` does.

**Why it releases nothing new.** The answer is a deterministic function of (a) one
Result released to this same analyst of this same data set (the answer cache's entry
for the other query's core, :mod:`dpsql.answer_cache`) and (b) public things: the two
queries' texts, the catalog (bounds of ``x``, whether ``x`` may be NULL) and the noise
calibration of the cached answer's plan, which analysis computes from the query text,
ε, δ, options and catalog alone (it reads no data; :func:`matches_split` checks it
against the split the cached Result carries). Neighbouring databases with the same
cached Result therefore give the same derived answer: it is post-processing of what
the analyst already holds, and costs nothing. Its rows are the cached rows (the same
released groups, in the same order); each copied column keeps its values and error
bars; each AVG is computed from the SUM and COUNT of its own row.

**Same bounds.** The frame key carries ε, δ, ``max_rows``, ``max_groups``, mechanism,
α, options, catalog (bounds of ``x``) and schema version, so SUM and COUNT were
computed under the contribution bounds and the clamp ``[L, U]`` of ``x`` a fresh
``AVG(x)`` would use; and ``SUM`` and ``COUNT`` come from one answer, so from one set
of released groups (a group that answer did not release is not in this one either). The
AVG's ``x`` must be the SUM's argument as written; the COUNT must count the same
statistic as ``AVG(x)`` would: ``COUNT(x)``, or ``COUNT(*)`` where the analysis maps
``COUNT(x)`` to it (``x`` NOT NULL, :func:`dpsql.aggregates.count.never_null`).

**One row per user.** A fresh AVG scales each user's sum to the rows its count keeps
(their mean times ``min(count, max_rows)``, :meth:`dpsql.aggregates.sums.Sum.partial`),
while a released SUM adds up all of a user's clamped rows (their partial sum clamped
to ``max_rows`` rows' worth) and a COUNT caps them at ``max_rows``: for a user with more
rows than ``max_rows`` in a group, ``SUM / COUNT`` estimates another number than
``AVG``. Both are the same where no user has more than ``max_rows`` rows in a group,
which the plan knows publicly only when each user has one row
(``Plan.one_row_per_user``: row privacy, or a user key the database keeps unique);
otherwise the AVG is not derived (answered afresh and charged).

**Which cached answer.** Each answer stored under its core also leaves a pointer under
its frame's key (:meth:`dpsql.answer_cache.AnswerCache.pointers`): the text of the
query. The AVG query reads the pointers of its own frame, keeps a query whose select
items supply its own (:func:`match`), and reads that query's core entry; the plan is
that query's, re-analysed (or from the plan cache) for the half-widths and ranges.

**Value.** ``clamp(S / max(N, 1), L, U)`` from the released (already consistent) sum
``S`` and count ``N``: a count below 1 is read as 1, as the fresh path's AVG does
(:func:`dpsql.aggregates.avg.value`), and the result lies within the value bounds, as
an average of values clamped to ``[L, U]`` does. A NULL sum or count gives a NULL AVG
without an error bar.

**Error bar.** The AVG depends on two noisy statistics, so each is taken at level
``α/2`` (as :mod:`dpsql.postprocess` does for an output of ``m`` statistics: the union
bound gives ``1 − α``): ``s ∈ [S − h_S, S + h_S] ∩ range(SUM)`` and ``n ∈ [N − h_N,
N + h_N] ∩ range(COUNT)``, each holding the true value with probability ``1 − α/2``
(clamping to a range that holds the true value keeps coverage, see
:mod:`dpsql.postprocess`). On both events the true mean ``s/n`` (defined when
``n >= 1``) lies between the extremes of ``s/c`` over the corners, ``c`` taken in
``[max(N − h_N, 1), max(N + h_N, 1)]`` (``s/c`` is monotone in each argument for
``c > 0``); the ends are then clamped into ``[L, U]``, which holds the true mean, and
widened to hold the released value. An end that comes out NaN makes the interval
``[L, U]``.
"""

from __future__ import annotations

import dataclasses
import math

from sqlglot import exp

from dpsql.aggregates.count import never_null
from dpsql.analyze.names import output_name
from dpsql.analyze.plan import Plan
from dpsql.answer_cache import CACHED_NOTE
from dpsql.answering import asymmetry_notes, split_table
from dpsql.postprocess import cell_range, stat_half_width
from dpsql.result import Result

#: The note an AVG derived from a cached SUM and COUNT carries.
AVG_NOTE = ("derived from the answer cache: each AVG is the SUM divided by the COUNT "
            "of an answer released before over the same FROM, WHERE and GROUP BY, with "
            "the same epsilon, delta, options and bounds (its error bar by interval "
            "arithmetic, each statistic at alpha/2), on that answer's released rows; "
            "nothing was spent")


def frame(core: exp.Select) -> str | None:
    """The text of ``core`` with its select list replaced by ``*``: what two queries
    must share for one to be answered from the other's released statistics."""
    tree = core.copy()
    tree.set("expressions", [exp.Star()])
    try:
        return tree.sql(dialect="duckdb")
    except Exception:  # noqa: BLE001 - no frame, nothing derived
        return None


def _avg_arg(item: exp.Expression) -> exp.Expression | None:
    """``x`` of a plain ``AVG(x)`` item (no DISTINCT, no FILTER), else None."""
    e = item.unalias()
    if type(e) is exp.Avg and not isinstance(e.this, exp.Distinct | exp.Star):
        return e.this
    return None


def has_avg(items) -> bool:
    """Whether any select item is a plain ``AVG(x)``."""
    return any(_avg_arg(i) is not None for i in items)


@dataclasses.dataclass(frozen=True)
class _Avg:
    """Output column: ``AVG`` from the cached columns ``total`` (SUM) and ``count``."""

    total: int
    count: int


def match(items, cached_items) -> list | None:
    """Per select item of the AVG query, where it comes from in the cached answer: an
    index (the same expression, alias aside) or an :class:`_Avg`; None when an item
    has no source. Only the cached items' text is read."""
    cached = [i.unalias() for i in cached_items]
    out = []
    for item in items:
        x = _avg_arg(item)
        if x is None:
            same = [j for j, c in enumerate(cached) if c == item.unalias()]
            if not same:
                return None
            out.append(same[0])
            continue
        sums = [j for j, c in enumerate(cached) if type(c) is exp.Sum and c.this == x]
        counts = [j for j, c in enumerate(cached) if type(c) is exp.Count
                  and (c.this == x or isinstance(c.this, exp.Star))]
        # COUNT(x) first; COUNT(*) is checked against the catalog in derive_avg
        counts.sort(key=lambda j: isinstance(cached[j].this, exp.Star))
        if not sums or not counts:
            return None
        out.append(_Avg(sums[0], counts[0]))
    return out


def same_relation(a: Plan, b: Plan) -> bool:
    """Whether two analysed plans group the same rows the same way: the same FROM and
    joins, WHERE, group keys (expressions and public domains, in order), released
    combinations, partition selection and contribution bounds.

    Compared on the analysed plans, not on the text: ``GROUP BY ALL``, ``GROUP BY 1``
    and a select alias in GROUP BY or WHERE take their meaning from the select list,
    which differs between the two queries.
    """
    def relation(p: Plan):
        first, joins = p.scope.from_clause()
        tree = exp.select("1").from_(first)
        for join in joins:
            tree.append("joins", join)
        return (tree.sql(dialect="duckdb"),
                None if p.where is None else p.where.sql(dialect="duckdb"),
                [(k.expr.sql(dialect="duckdb"), k.domain) for k in p.keys],
                p.groups, _selection(p), p.max_groups, p.max_rows, p.bound_groups,
                p.one_row_per_user, p.uid and p.uid.sql(dialect="duckdb"))

    try:
        return relation(a) == relation(b)
    except Exception:  # noqa: BLE001 - not comparable: not derived, answered afresh
        return False


def _selection(p: Plan):
    s = p.selection
    return None if s is None else (type(s).__name__, s.epsilon, s.delta, s.max_groups,
                                   s.threshold)


def matches_split(plan: Plan, cached: Result) -> bool:
    """Whether ``plan`` is the one ``cached`` was answered with: the same statistics,
    shares and noise scales (so its half-widths are those of the released noise)."""
    def shape(split):
        return [(s.get("name"), s.get("statistic"), s.get("epsilon"), s.get("rho"),
                 s.get("mechanism"), s.get("scale")) for s in split]

    return shape(split_table(plan, cached.alpha)) == shape(cached.split)


def _direct(plan: Plan, column: int, kind: str):
    """The cell and statistic behind output ``column`` when it is exactly one statistic
    of ``kind`` (released as it is), else None."""
    if column >= len(plan.outputs):
        return None
    expr = plan.outputs[column].expr
    if not isinstance(expr, exp.Column):
        return None
    cell = next((c for c in plan.cells if c.name == expr.name), None)
    if cell is None or cell.kind != "stat" or len(cell.stats) != 1:
        return None
    stat = plan.stat(cell.stats[0])
    if stat.kind != kind or stat.centred or stat.bins is not None:
        return None
    return cell, stat


@dataclasses.dataclass(frozen=True)
class _Ratio:
    """What one AVG column needs: the two columns, half-widths, ranges and bounds."""

    total: int
    count: int
    h_total: float
    h_count: float
    total_range: tuple[float, float]
    count_range: tuple[float, float]
    lower: float
    upper: float


def _ratio(plan: Plan, source: _Avg, alpha: float) -> _Ratio | None:
    """The SUM and COUNT behind ``source`` checked against the cached plan; None when
    they are not what a fresh ``AVG(x)`` would read (see the module docstring)."""
    total, count = _direct(plan, source.total, "sum"), _direct(plan, source.count, "count")
    if total is None or count is None:
        return None
    (total_cell, total_stat), (count_cell, count_stat) = total, count
    x = total_stat.arg
    if x is None or total_stat.interval is None:
        return None
    if count_stat.arg is None:
        if not never_null(x, plan.scope.column):  # COUNT(*) counts rows with x NULL
            return None
    elif count_stat.arg != x:
        return None
    level = alpha / 2  # two statistics feed each AVG: the union bound
    return _Ratio(source.total, source.count,
                  stat_half_width(plan, total_stat.name, level),
                  stat_half_width(plan, count_stat.name, level),
                  cell_range(plan, total_cell), cell_range(plan, count_cell),
                  float(total_stat.interval.lower), float(total_stat.interval.upper))


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    v = float(v)
    return v if not math.isnan(v) else None


def _clamp(v: float, lower: float, upper: float) -> float:
    return min(max(v, lower), upper)


def avg_cell(r: _Ratio, total, count) -> tuple[float | None, float | None,
                                               tuple[float, float] | None]:
    """One AVG: its value, half-width and interval from a released sum and count (see
    the module docstring); ``(None, None, None)`` when either is NULL."""
    s, n = _number(total), _number(count)
    if s is None or n is None:
        return None, None, None
    value = _clamp(s / max(n, 1.0), r.lower, r.upper)
    s_lo = max(s - r.h_total, r.total_range[0])
    s_hi = min(s + r.h_total, r.total_range[1])
    n_lo = max(n - r.h_count, r.count_range[0])
    n_hi = min(n + r.h_count, r.count_range[1])
    c_lo, c_hi = max(n_lo, 1.0), max(n_hi, 1.0)
    corners = [a / c for a in (s_lo, s_hi) for c in (c_lo, c_hi)]
    if any(math.isnan(q) for q in corners):
        low, high = r.lower, r.upper
    else:
        low, high = _clamp(min(corners), r.lower, r.upper), _clamp(max(corners),
                                                                     r.lower, r.upper)
    low, high = min(low, value), max(high, value)
    return value, max(value - low, high - value, 0.0), (low, high)


def derive_avg(cached: Result, plan: Plan, items, cached_items) -> Result | None:
    """The AVG query's core answered from ``cached`` (answered with ``plan``, whose core
    items are ``cached_items``), free; None when it cannot be (see the module
    docstring)."""
    sources = match(items, cached_items)
    if sources is None or not any(isinstance(s, _Avg) for s in sources):
        return None
    if not plan.one_row_per_user:  # SUM / COUNT is another number (module docstring)
        return None
    if len(cached_items) != len(cached.columns) or not matches_split(plan, cached):
        return None
    ratios = {}
    for s in sources:
        if isinstance(s, _Avg):
            r = _ratio(plan, s, cached.alpha)
            if r is None:
                return None
            ratios[s] = r
    noisy = cached.noisy_columns
    rows, accuracy, intervals = [], [], []
    for i, row in enumerate(cached.rows):
        acc = cached.accuracy[i] if cached.accuracy else (None,) * len(row)
        ivs = cached.intervals[i] if cached.intervals else (None,) * len(row)
        out_row, out_acc, out_ivs = [], [], []
        for s in sources:
            if isinstance(s, _Avg):
                r = ratios[s]
                value, width, interval = avg_cell(r, row[r.total], row[r.count])
            else:
                value, width, interval = row[s], acc[s], ivs[s]
            out_row.append(value)
            out_acc.append(width)
            out_ivs.append(interval)
        rows.append(tuple(out_row))
        accuracy.append(tuple(out_acc))
        intervals.append(tuple(out_ivs))
    derived = dataclasses.replace(
        cached, columns=[output_name(i) for i in items], rows=rows, accuracy=accuracy,
        intervals=intervals, cost=(0.0, 0.0),
        noisy=tuple(True if isinstance(s, _Avg) else noisy[s] for s in sources))
    # the cached answer's notes but its own asymmetry notes (they name its columns);
    # this answer's, computed as the fresh path does (from released values only)
    dropped = {CACHED_NOTE, *(asymmetry_notes(cached) if cached.intervals else ())}
    return dataclasses.replace(derived, notes=(
        *(n for n in cached.notes if n not in dropped), *asymmetry_notes(derived),
        AVG_NOTE))
