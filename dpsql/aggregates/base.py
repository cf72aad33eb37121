"""What an aggregate family and a kind of noisy statistic must say about themselves.

Two layers, as the plan has them (:mod:`dpsql.analyze.plan`):

* a :class:`StatisticRule` describes one kind of noisy per-group statistic
  (``Statistic.kind``: ``count``, ``sum``, ``hist``...): its label, the range of one
  user's partial (its sensitivity, with the argument in the docstring), its SQL in the
  statistics query and in the per-user step, and the values it can take;
* a :class:`Family` describes the analyst's aggregates it answers (``AVG``,
  ``VAR_SAMP``...): which SQL functions, which statistics a cell needs, and how the
  cell's value, range, interval and predicted error follow from their noisy values.

The methods take the plan's objects (``stat``: a
:class:`~dpsql.analyze.plan.Statistic`, ``cell``: a :class:`~dpsql.analyze.plan.Cell`,
``plan``: a :class:`~dpsql.analyze.plan.Plan`, ``noisy``: a
:class:`~dpsql.noise.NoisyGroups`) without importing them: the plan imports this
package (``Statistic.rule``, ``Cell.family``), and :mod:`dpsql.validate` reads the
registry's SQL functions, so this package stays below both.
"""

from __future__ import annotations

import dataclasses
import math

from sqlglot import exp

from dpsql.sqlbuild import data_type, number

#: Half-width and interval of "no information".
WHOLE = (-math.inf, math.inf)


class StatisticRule:
    """One kind of noisy per-group statistic. Subclasses override what differs."""

    #: ``Statistic.kind``
    kind: str = ""
    #: the rewritten column's fixed name (None: ``__s<n>``)
    fixed_name: str | None = None
    #: a count of rows, users or distinct values: whole and never negative
    counts: bool = False
    #: what the contribution bounds cut, for the notes (:func:`dpsql.bias.bound_notes`):
    #: ``rows`` (capped at max_rows), ``values`` (distinct values kept), ``weights``
    #: (rows reweighted), or None (nothing)
    cut: str | None = None

    def label(self, stat) -> str:
        """Human description of the statistic, e.g. ``SUM(income - 250000)``."""
        raise NotImplementedError

    def counted(self, stat) -> bool:
        """Whether the SQL computes each of ``stat``'s columns as a ``COUNT``: an integer
        on every engine, whatever types the engine reports (SQLite reports none)."""
        return self.counts

    def partial_range(self, interval, max_rows: int) -> tuple[float, float]:
        """Range the SQL clamps one user's partial in one group into (the sensitivity)."""
        raise NotImplementedError

    def values_interval(self, stat):
        """The interval :meth:`partial_range` is stated over for this statistic (None:
        the range does not depend on the values)."""
        return None

    def integer(self, interval, centred: bool, one_row: bool) -> bool:
        """Whether every value of the statistic is whole (then discrete noise);
        ``centred``: AVG's or VARIANCE's sum (:attr:`Statistic.centred`)."""
        return False

    def bins(self, interval):
        """The histogram's bins (histograms only)."""
        return None

    def check(self, stats: list, candidate, limits, max_magnitude: float) -> None:
        """Refuses a statistic the query may not add, before any charge.

        Args:
            stats: the query's statistics so far.
            candidate: the new statistic.
            limits: the owner's :class:`~dpsql.limits.Limits`.
            max_magnitude: the largest bound dpsql takes
                (:data:`dpsql.analyze.bounds.MAX_MAGNITUDE`).
        """

    def select(self, stat, plan) -> list[tuple[exp.Expression, str]]:
        """The statistic's columns in the statistics query: ``(aggregate, name)`` pairs."""
        return [(self.aggregate(stat, plan), stat.name)]

    def aggregate(self, stat, plan) -> exp.Expression:
        """The exact per-group aggregate a non-private engine would compute."""
        raise NotImplementedError

    def clamp(self, stat, aggregate: exp.Expression) -> None:
        """Clamps the per-row values of the aggregate in place (sums only)."""

    def partial(self, stat, aggregate: exp.Expression, max_rows: int) -> exp.Expression | None:
        """One user's partial in one group, clamped into :meth:`partial_range` (None:
        the statistic needs no per-user column)."""
        raise NotImplementedError

    def per_group(self, name: str) -> exp.Expression | None:
        """The per-group aggregate over the per-user rows (None: another pass counts it)."""
        return exp.Sum(this=exp.column(name))

    def distinct_value(self, aggregate: exp.Expression) -> exp.Expression | None:
        """The value whose distinct values are kept per user (COUNT(DISTINCT) only)."""
        return None

    def value_range(self, stat) -> tuple[float, float]:
        """What the statistic's true value can be, from public facts alone."""
        return WHOLE


def shifted(stat):
    """The statistic's bounds minus its centre: the per-row values it adds up."""
    return dataclasses.replace(stat.interval, lower=stat.interval.lower - stat.center,
                               upper=stat.interval.upper - stat.center,
                               integer=stat.integer)


def scaled(total: exp.Expression, arg: exp.Expression, max_rows: int) -> exp.Expression:
    """``total · min(COUNT(arg), R) / COUNT(arg)`` in floating point; NULL for no rows."""
    count = exp.Count(this=arg.copy())
    capped = exp.Cast(this=exp.Least(this=count.copy(), expressions=[number(max_rows)],
                                     ignore_nulls=True), to=data_type("DOUBLE"))
    return exp.Div(this=exp.Mul(this=total, expression=capped),
                   expression=exp.Nullif(this=count, expression=number(0)))


def double(arg: exp.Expression) -> exp.Expression:
    """``CAST(arg AS DOUBLE)``: dpsql's own arithmetic on a value cannot overflow."""
    return exp.Cast(this=arg, to=data_type("DOUBLE"))


def clip(value, low: float, high: float):
    """``value`` moved into ``[low, high]``; an integer stays an integer."""
    if value < low:
        return int(low) if isinstance(value, int) else float(low)
    if value > high:
        return int(high) if isinstance(value, int) else float(high)
    return value


def readable(x: float) -> str:
    """A number to four significant figures with thousands separators (``7,381,000``)."""
    if not math.isfinite(x):
        return str(x)
    if x == 0 or not 1e-3 <= abs(x) < 1e15:
        return f"{x:.4g}"
    rounded = float(f"{x:.4g}")
    if rounded.is_integer():
        return f"{int(rounded):,}"
    return f"{rounded:,.{max(0, 3 - math.floor(math.log10(abs(rounded))))}f}".rstrip("0")


def radius(cell) -> float:
    """The largest distance from the cell's centre to one of its bounds."""
    return max(cell.center - cell.lower, cell.upper - cell.center)


class Family:
    """A family of the analyst's aggregates. Subclasses override what differs."""

    #: the family's name
    name: str = ""
    #: the sqlglot node classes of the SQL functions it answers (every spelling)
    functions: tuple[type[exp.Expression], ...] = ()
    #: the statistic kinds it owns
    statistics: tuple[StatisticRule, ...] = ()
    #: the ``Cell.kind`` values it owns
    cell_kinds: tuple[str, ...] = ()
    #: a cell's error does not depend on the data (the statistic itself is released)
    direct: bool = False

    def answers(self, aggregate: exp.Expression) -> bool:
        """Whether this family answers the analyst's aggregate node."""
        return isinstance(aggregate, self.functions)

    def cell(self, analysis, aggregate: exp.Expression) -> dict:
        """The :class:`~dpsql.analyze.plan.Cell` fields (but its name and aggregate).

        ``analysis`` adds the statistics (``stat(kind, arg, interval, center)``, which
        deduplicates them), bounds expressions (``interval(arg)``) and resolves names
        (``scope``, a :class:`~dpsql.analyze.scope.Scope`).
        """
        raise NotImplementedError

    def values(self, plan, cell, noisy) -> list:
        """The cell's released value in every released group (post-processing)."""
        raise NotImplementedError

    def after_values(self, plan, values: dict[str, list]) -> None:
        """Adjusts the released values of all this family's cells together (free)."""

    def range(self, plan, cell) -> tuple[float, float]:
        """What the aggregate can be, from public bounds alone."""
        return (cell.lower, cell.upper)

    def integer(self, plan, cell) -> bool:
        """Whether the released values are whole numbers."""
        return False

    def interval(self, plan, cell, rid: int, noisy, values, widths, level: float):
        """The cell's interval in released group ``rid``, its statistics at ``level``."""
        raise NotImplementedError

    def predicted_width(self, plan, cell, level: float, n: int | None) -> float:
        """Error bound at ``level`` per statistic for a group of ``n`` rows (None: any)."""
        raise NotImplementedError

    def formula(self, plan, cell, level: float) -> str:
        """The predicted bound's formula in words, for ``explain`` (or '')."""
        return ""

    def prediction(self, plan, cell, level: float, conf: str, sizes) -> dict | None:
        """A prediction of its own for an output that is just this cell, or None.

        ``conf`` is the confidence in words, ``sizes`` the group sizes predictions are
        evaluated at; the dict updates :func:`dpsql.accuracy.predict_outputs`'s entry.
        """
        return None


def stat_width(plan, name: str, level: float) -> float:
    """Half-width of a statistic's ``1 − level`` interval, from its noise distribution."""
    return float(plan.stat(name).mechanism.accuracy(level))


class Direct(Family):
    """Cells that release one statistic as it is (``Cell.kind == "stat"``)."""

    cell_kinds = ("stat",)
    direct = True

    def values(self, plan, cell, noisy) -> list:
        low, high = self.range(plan, cell)
        return [clip(v, low, high) for v in noisy.stats[cell.stats[0]]]

    def range(self, plan, cell) -> tuple[float, float]:
        stat = plan.stat(cell.stats[0])
        return stat.rule.value_range(stat)

    def integer(self, plan, cell) -> bool:
        return plan.stat(cell.stats[0]).integer

    def interval(self, plan, cell, rid, noisy, values, widths, level):
        # around the released (clamped) value, cut to the range: it holds the truth
        # whenever the interval around the noisy value does, and is never empty
        v, h = values[cell.name][rid], widths[cell.stats[0]]
        low, high = self.range(plan, cell)
        return (clip(v - h, low, high), clip(v + h, low, high))

    def predicted_width(self, plan, cell, level, n):
        return stat_width(plan, cell.stats[0], level)


DIRECT = Direct()
