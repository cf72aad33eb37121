"""Quantiles (``MEDIAN``, ``PERCENTILE_CONT``/``_DISC``, ``QUANTILE``, ``MIN``, ``MAX``).

Each is read off one noisy histogram of its argument over the argument's bounds
(:mod:`dpsql.mechanisms.quantile`): quantiles of the same expression share it.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
from sqlglot import exp

from dpsql.aggregates.base import Family, StatisticRule, readable, scaled
from dpsql.errors import UnsupportedQueryError
from dpsql.mechanisms import quantile
from dpsql.mechanisms.quantile import Bins, edge_errors
from dpsql.sqlbuild import clamp, number

#: MIN/MAX read a histogram bin as empty unless its noisy count clears the level that
#: noise in *any* empty bin exceeds with this probability: 0.1 % of answers move to a
#: spurious extreme bin (at 5 % a MAX at ε = 10⁵ still jumped 10 years now and then).
EMPTY_BIN_LEVEL = 0.001


class Histogram(StatisticRule):
    """A histogram of ``arg`` over ``bins``: one column ``<name>_<j>`` per bin."""

    kind = "hist"
    cut = "weights"

    def label(self, stat) -> str:
        return (f"HISTOGRAM({stat.arg.sql(dialect='duckdb')}, {stat.bins.count} bins "
                f"over [{stat.interval.lower:g}, {stat.interval.upper:g}])")

    def partial_range(self, interval, max_rows):
        """A vector of one count per bin, each in ``[0, R]``, of L1 (and L2) norm <= R.

        The SQL scales the user's bin counts ``c_j`` in the group by ``min(T, R) / T``,
        ``T = Σ_j c_j`` (:meth:`partial`), so the partials are non-negative and sum to at
        most R. The noise is calibrated to that vector bound, with the bins as ``width``
        coordinates (:func:`dpsql.mechanisms.laplace.laplace`).
        """
        return (0, max_rows)

    def integer(self, interval, centred, one_row):
        # rescaled per user (see partial): fractional, unless each user has one row
        return one_row

    def counted(self, stat) -> bool:
        # with one row per user (integer) each bin is COUNT(CASE WHEN ... THEN 1 END)
        # (bin_count); else a per-user rescaled sum
        return stat.integer

    def bins(self, interval):
        return Bins.for_interval(interval.lower, interval.upper, interval.integer)

    def check(self, stats, candidate, limits, max_magnitude):
        hists = [s for s in stats if s.kind == self.kind]
        if len(hists) >= limits.max_quantiles:
            # each is a histogram of up to 64 noisy bins, i.e. 64 columns to rewrite,
            # compute and noise: refused here, before any of that is built
            raise UnsupportedQueryError(
                f"the query asks quantiles (MEDIAN, PERCENTILE_CONT, MIN, MAX...) of more "
                f"than {limits.max_quantiles} different expressions (max_quantiles); "
                "quantiles of the same expression cost one")
        # the rewrite writes the argument out about twice per bin (up to 64 bins):
        # counted here, so a long argument cannot become megabytes of SQL
        copies = sum(s.width * sum(1 for _ in s.arg.walk()) for s in hists)
        copies += candidate.width * sum(1 for _ in candidate.arg.walk())
        if 2 * copies > 2 * limits.max_nodes:
            raise UnsupportedQueryError(
                f"the quantiles' arguments, written out once per histogram bin, would "
                f"exceed {2 * limits.max_nodes} syntax nodes (twice max_nodes); "
                "shorten the arguments or ask fewer quantiles")

    def select(self, stat, plan):
        return [(bin_count(stat, j, stat.arg.copy()), column)
                for j, column in enumerate(stat.columns)]

    def partial(self, stat, aggregate, max_rows):
        # the user's bin counts scaled to min(count, R) rows in all: non-negative, at
        # most R together, since each row is in at most one bin
        value = bin_argument(aggregate)
        total = scaled(aggregate.copy(), value, max_rows)
        return clamp(exp.Coalesce(this=total, expressions=[number(0)]), 0, max_rows)


HISTOGRAM = Histogram()


def bin_count(stat, j: int, arg: exp.Expression) -> exp.Expression:
    """``COUNT(CASE WHEN <arg in bin j> THEN 1 END)`` for a histogram statistic.

    Bin ``j`` is ``[e_j, e_{j+1})``, the first open below and the last open above, so
    values outside the bounds land in the end bins (the clamp) and each row matches at
    most one bin: ``x < a`` and ``x >= a`` never hold together.

    >>> from dpsql.engine import _demo_plan
    >>> stat = _demo_plan("SELECT MEDIAN(age) FROM pums").stats[0]
    >>> bin_count(stat, 0, exp.column("age")).sql()
    'COUNT(CASE WHEN age < 1.5e0 THEN 1 END)'
    >>> bin_count(stat, 1, exp.column("age")).sql()
    'COUNT(CASE WHEN age >= 1.5e0 AND age < 3.5e0 THEN 1 END)'
    """
    edges = stat.bins.edges
    last = stat.bins.count - 1
    parts = []
    if j > 0:
        parts.append(exp.GTE(this=arg, expression=number(float(edges[j]))))
    if j < last:
        parts.append(exp.LT(this=arg.copy(), expression=number(float(edges[j + 1]))))
    if not parts:  # a single bin: every non-NULL value
        parts.append(exp.Not(this=exp.Is(this=arg, expression=exp.Null())))
    condition = exp.and_(*parts) if len(parts) > 1 else parts[0]
    return exp.Count(this=exp.Case(ifs=[exp.If(this=condition, true=exp.Literal.number(1))]))


def bin_argument(aggregate: exp.Expression) -> exp.Expression:
    """The per-row expression inside a :func:`bin_count`."""
    condition = aggregate.this.args["ifs"][0].this
    return condition.this if isinstance(condition, exp.GTE | exp.LT) else condition.this.this


def within_group(node: exp.Expression) -> exp.Expression:
    """``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x [DESC])`` as ``PERCENTILE_CONT(x, q)``.

    >>> from sqlglot import parse_one
    >>> e = parse_one("SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY x DESC) FROM t")
    >>> e.transform(within_group).sql()
    'SELECT PERCENTILE_CONT(x, 0.1) FROM t'
    """
    if not isinstance(node, exp.WithinGroup):
        return node
    order = node.expression
    if not isinstance(order, exp.Order) or len(order.expressions) != 1:
        raise UnsupportedQueryError("WITHIN GROUP needs exactly one ORDER BY expression")
    ordered = order.expressions[0]
    literal_value(node.this.this, node.this.sql_name())  # refuses a bad one
    literal = node.this.this.copy()
    if ordered.args.get("desc"):  # exact decimal arithmetic: 1 - 0.9 is 0.1
        literal = exp.Literal.number(str(1 - Decimal(literal.this)))
    return type(node.this)(this=ordered.this.copy(), expression=literal)


def parts(agg: exp.Expression) -> tuple[exp.Expression, float]:
    """The aggregated expression and the quantile ``q`` of a quantile aggregate."""
    if isinstance(agg, exp.Min | exp.Max):
        if agg.expressions:
            raise UnsupportedQueryError(f"{agg.sql_name()} takes one argument")
        return agg.this, 0.0 if isinstance(agg, exp.Min) else 1.0
    if isinstance(agg, exp.Median):
        return agg.this, 0.5
    literal = agg.args.get("quantile") if isinstance(
        agg, exp.Quantile | exp.ApproxQuantile) else agg.args.get("expression")
    if literal is None:
        raise UnsupportedQueryError(f"{agg.sql_name()} needs a quantile, e.g. 0.5")
    return agg.this, literal_value(literal, agg.sql_name())


def literal_value(e: exp.Expression, name: str) -> float:
    """The quantile ``q`` written as a number literal in ``[0, 1]``; refuses anything else."""
    if isinstance(e, exp.Literal) and not e.is_string:
        q = float(e.this)
        if 0 <= q <= 1:
            return q
    raise UnsupportedQueryError(
        f"{name} needs one quantile given as a number literal between 0 and 1, "
        f"not {e.sql(dialect='duckdb')[:40]}")


def rank_error(plan, cell, level: float) -> float:
    """``2W``: the rank error (rows) within which the ± interval's edges lie.

    Read off a noisy histogram of ``B`` bins of width ``s``: with ``W`` the largest rank
    error of :func:`dpsql.mechanisms.quantile.edge_errors` at the cell's level, the ``±``
    interval lies within ``[x(q − 2W/n) − s, x(q + 2W/n) + s]``, where ``x(p)`` is the
    group's true ``p``-quantile (``L`` for ``p <= 0``, ``U`` for ``p >= 1``): every edge
    inside it has a true rank within ``2W`` of the target. In values the worst case is
    ``U − L`` (:meth:`Quantile.predicted_width`); the prediction is given in rank.
    """
    stat = plan.stat(cell.stats[0])
    count = stat.bins.count
    w = edge_errors(stat.mechanism, cell.quantile, count, level / (count + 1))
    return 2 * float(np.max(w))


def order(plan, values: dict[str, list], cells: list) -> None:
    """MIN <= quantiles <= MAX for the quantiles read off one histogram, in every group.

    Each quantile is estimated on its own (MIN and MAX ignore bins below the noise
    level, the others do not), so the estimates of one histogram can come out of order
    (a MIN above the MEDIAN). The true quantiles of the group are ordered by ``q``, so
    the estimates are *rearranged*: sorted and given back in the order of their ``q``
    (Chernozhukov, Fernández-Val and Galichon 2010: for any non-decreasing target,
    sorting never moves the vector of estimates further from it, in any Lp norm).

    Why it is free: it reads the released estimates of one noisy histogram only (and
    each cell's ``q``, from the query), so it is post-processing: no extra budget, no
    new statistic. Each cell's interval is later widened, if needed, to hold its new
    value (:meth:`Quantile.interval`): an interval that held the true quantile still
    does, so coverage is kept cell by cell.

    Over whole numbers MIN and MAX stay whole: a MIN that takes a fractional value
    goes down to the whole number below it, a MAX up to the one above, which keeps the
    order and stays within the bounds (they are whole numbers there).
    """
    by_stat: dict[str, list] = {}
    for cell in cells:
        by_stat.setdefault(cell.stats[0], []).append(cell)
    for name, group_cells in by_stat.items():
        if len(group_cells) < 2:
            continue
        bins = plan.stat(name).bins
        ordered = sorted(group_cells, key=lambda c: c.quantile)  # stable: equal q keep order
        for row, group in enumerate(zip(*(values[c.name] for c in ordered), strict=True)):
            for cell, value in zip(ordered, sorted(group), strict=True):
                if bins.integer and cell.quantile in (0.0, 1.0) and math.isfinite(value):
                    value = bins.clip(math.floor(value) if cell.quantile == 0.0
                                      else math.ceil(value))
                values[cell.name][row] = value


class Quantile(Family):
    """The quantiles, MIN and MAX."""

    name = "quantile"
    functions = (exp.Median, exp.PercentileCont, exp.PercentileDisc, exp.Quantile,
                 exp.ApproxQuantile, exp.Min, exp.Max)
    statistics = (HISTOGRAM,)
    cell_kinds = ("quantile",)

    def cell(self, analysis, aggregate):
        arg, q = parts(aggregate)
        interval = analysis.interval(arg)
        hist = analysis.stat("hist", arg, interval)
        return {"kind": "quantile", "stats": (hist.name,), "center": 0,
                "lower": interval.lower, "upper": interval.upper, "quantile": q}

    def values(self, plan, cell, noisy):
        stat = plan.stat(cell.stats[0])
        # MIN and MAX: bins below the noise level count as empty
        threshold = stat.mechanism.accuracy(EMPTY_BIN_LEVEL / stat.bins.count)
        return [quantile.estimate(h, cell.quantile, stat.bins, threshold)
                for h in noisy.stats[stat.name]]

    def after_values(self, plan, values):
        order(plan, values, [c for c in plan.cells if c.kind in self.cell_kinds])

    def interval(self, plan, cell, rid, noisy, values, widths, level):
        stat = plan.stat(cell.stats[0])
        low, high = quantile.interval(noisy.stats[stat.name][rid], cell.quantile, stat.bins,
                                      stat.mechanism, level)
        released = values[cell.name][rid]
        return (min(low, released), max(high, released))

    def predicted_width(self, plan, cell, level, n):
        return float(cell.upper - cell.lower)

    def prediction(self, plan, cell, level, conf, sizes):
        rank = rank_error(plan, cell, level)
        stat = plan.stat(cell.stats[0])
        span = stat.bins.upper - stat.bins.lower
        sizes = ", ".join(f"{100 * rank / n:.3g} at n = {n:,}" for n in sizes)
        return {"rank_error": rank, "by_size": None, "meaning": (
            f"with probability >= {conf} the quantile's confidence interval (the ± shown "
            f"is that interval, stretched to the released value if needed) lies between "
            f"the group's true "
            f"quantiles at ranks q ± {readable(rank)}/n (n = the group's rows), widened by "
            f"one bin ({readable(span / stat.bins.count)}); in percentile points: ± {sizes}. "
            f"In values the worst case is the whole range, {readable(span)}")}


FAMILY = Quantile()
