"""The plan: everything the later stages need, decided before any data is read."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from sqlglot import exp

from dpsql.accounting import Cost
from dpsql.aggregates import Family, StatisticRule, family_of, statistic_rule
from dpsql.analyze.bounds import Interval
from dpsql.analyze.domains import Combinations
from dpsql.analyze.scope import Scope
from dpsql.catalog import Table
from dpsql.decimal_sums import DecimalSum
from dpsql.mechanisms import LaplaceThreshold, Noise
from dpsql.mechanisms.quantile import Bins


@dataclass
class Statistic:
    """One noisy per-group statistic computed by the backend.

    Attributes:
        name: column name in the rewritten SQL (``__s0``, ...; ``__users`` for users).
        kind: ``count`` (rows), ``sum`` (clamped values), ``sumsq`` (squares, for
            VARIANCE), ``users`` (distinct users), ``distinct`` (distinct values) or
            ``hist`` (a histogram of ``arg`` over ``bins``, for quantiles: one column
            ``<name>_<j>`` per bin); its :attr:`rule` says what the kind means.
        arg: the per-row value (None for ``COUNT(*)`` and ``users``).
        interval: bounds the per-row value is clamped to (sums only).
        center: subtracted from each clamped value (normalised sums for AVG).
        centred: AVG's or VARIANCE's sum, which goes with a count capped at ``max_rows``
            and is rescaled per user to match it, whatever its :attr:`center` (a centre
            of 0, as for bounds ``[0, 1]``, is still a centred sum; ``SUM(x)`` of the same
            ``x`` is another statistic).
        integer: whether every value is whole (then discrete noise).
        nullable: whether the per-row value may be NULL (the clamp must keep NULLs).
        linf: per-group sensitivity (see :mod:`dpsql.analyze.sensitivity`).
        epsilon: the share of the query's ε spent on this statistic (Laplace).
        rho: the share of the query's ρ spent on this statistic (Gaussian).
        mechanism: the calibrated noise.
        bins: the histogram's bins (``hist`` only).
        grid: the exponent ``k`` when the engine returns this statistic as a whole
            number of grid units ``2^k`` (:mod:`dpsql.grid_units`); None: in value units.
            Set before the rewrite (and only there), read by the rewrite and the noise
            stage, so the SQL and the release agree on it.
        decimal: how a sum of DECIMAL values is added exactly in the engine's own fixed
            point (:mod:`dpsql.decimal_sums`); None: as :attr:`grid` says. Set before the
            rewrite, with :attr:`grid`.
        whole: a user's partial is written as a BIGINT (:mod:`dpsql.whole_sums`: its
            summand is a whole number the engine adds exactly). Set before the rewrite,
            with :attr:`decimal`.
        in_bounds: the data proves that the clamp of the per-row value keeps every value
            as it is (:mod:`dpsql.in_bounds`): the rewrite writes no clamp. Set only on
            the plan that runs, never on the one the answer comes from.
    """

    name: str
    kind: str
    arg: exp.Expression | None = None
    interval: Interval | None = None
    center: float = 0
    centred: bool = False
    integer: bool = True
    nullable: bool = False
    linf: float = 0
    epsilon: float = 0.0
    rho: float | None = None
    mechanism: Noise | None = None
    bins: Bins | None = None
    grid: int | None = None
    decimal: DecimalSum | None = None
    whole: bool = False
    in_bounds: bool = False

    @property
    def width(self) -> int:
        """Coordinates per group: the number of bins of a histogram, else 1."""
        return self.bins.count if self.bins is not None else 1

    @property
    def columns(self) -> list[str]:
        """Its columns in the rewritten SQL, one per coordinate."""
        if self.bins is None:
            return [self.name]
        return [f"{self.name}_{j}" for j in range(self.bins.count)]

    @property
    def rule(self) -> StatisticRule:
        """What its kind says: label, sensitivity, SQL (:mod:`dpsql.aggregates`)."""
        return statistic_rule(self.kind)

    @property
    def label(self) -> str:
        """Human description, e.g. ``SUM(income - 250000)``."""
        return self.rule.label(self)

    def key(self) -> tuple:
        """Identity used to noise a statistic only once when several aggregates need it."""
        return (self.kind, self.arg.sql() if self.arg is not None else None, self.center,
                self.centred)


@dataclass
class GroupKey:
    """One GROUP BY expression; ``domain`` holds its public values, if the catalog has them."""

    name: str
    expr: exp.Expression
    domain: tuple | None = None
    #: Every value the rows can hold for it lies in ``domain``: proven before the
    #: charge from a public table whose data cannot change (:mod:`dpsql.public_keys`),
    #: or, on the plan that runs only, from a ``values_only`` column's table
    #: (:mod:`dpsql.values_only`, :mod:`dpsql.proven_run`).
    in_domain: bool = False


@dataclass
class Cell:
    """One aggregate of the analyst's query, answered from one or two statistics.

    ``kind`` is ``stat`` (the statistic's noisy value), ``avg``
    (``clamp(center + sum / max(count, 1), lower, upper)``), or a variance kind
    (``var_pop``, ``var_samp``, ``std_pop``, ``std_samp``) from sums of squares, sums
    and counts, or ``quantile`` (the ``quantile``-th quantile read off a histogram);
    its :attr:`family` computes the value, range and intervals.
    """

    name: str
    aggregate: exp.Expression
    kind: str
    stats: tuple[str, ...]
    center: float = 0
    lower: float = 0
    upper: float = 0
    quantile: float = 0.5

    @property
    def family(self) -> Family:
        """The aggregate family behind its kind (:mod:`dpsql.aggregates`)."""
        return family_of(self.kind)


@dataclass
class Output:
    """One output column: ``expr`` is over key columns ``__k*`` and cell columns ``__a*``."""

    name: str
    expr: exp.Expression
    cells: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """What one private query computes, at what sensitivity and cost.

    Frozen: :func:`dpsql.analyze.analyze` returns it complete, and what the rewrite needs
    of the engine travels beside it (:class:`dpsql.rewrite.traits.EngineTraits`). Its
    statistics are still objects the engine may recalibrate before the charge
    (:func:`dpsql.answering.statistic_types`), and its key, cell and output lists are not
    copied: nothing writes to them after the analysis.
    """

    sql: str
    table: Table
    scope: Scope
    where: exp.Expression | None
    keys: list[GroupKey]
    stats: list[Statistic]
    cells: list[Cell]
    outputs: list[Output]
    having: exp.Expression | None
    order: exp.Order | None
    limit: exp.Expression | None
    offset: exp.Expression | None
    max_groups: int
    max_rows: int
    bound_groups: bool
    epsilon: float
    delta: float
    selection: LaplaceThreshold | None = None
    seed: int = 0
    mechanism: str = "laplace"
    rho: float | None = None
    #: Each user has exactly one row (row privacy, or a unique user key in the database).
    one_row_per_user: bool = False
    notes: tuple[str, ...] = ()
    #: The public key combinations released when WHERE restricts them
    #: (:class:`~dpsql.analyze.domains.Combinations`); None: the whole product.
    groups: Combinations | None = None
    #: The bias check (:class:`dpsql.bias.BiasCheck`), when the query asked for one.
    bias: object | None = None

    @property
    def uid(self) -> exp.Column | None:
        """The expression giving each joined row's user id (None: row privacy)."""
        return self.scope.uid

    @property
    def public_keys(self) -> bool:
        """Whether every group key has a public domain (no partition selection)."""
        return all(k.domain is not None for k in self.keys)

    @property
    def domain_size(self) -> int:
        if self.groups is not None:
            return len(self.groups)
        return math.prod(len(k.domain) for k in self.keys if k.domain is not None)

    def public_groups(self) -> list[tuple]:
        """The key combinations released from public domains (all keys public)."""
        if self.groups is not None:
            return list(self.groups)
        return list(itertools.product(*(k.domain for k in self.keys)))

    def stat(self, name: str) -> Statistic:
        """The statistic behind a rewritten column (``__s3`` or a histogram bin ``__s3_7``)."""
        base = name.rsplit("_", 1)[0] if name[-1].isdigit() and name.count("_") > 2 else name
        # by name, built once: the error bars and values ask it per cell and row (tens of
        # thousands of scans per second of TPC-H q10); the list only grows in analysis
        index = self.__dict__.get("_stat_index")
        if index is None or len(index) != len(self.stats):
            index = {s.name: s for s in self.stats}
            object.__setattr__(self, "_stat_index", index)
        return index[base]

    @property
    def cost(self) -> tuple[float, float]:
        """The (epsilon, delta) this query spends; 0 when nothing is noised."""
        if not self.stats and self.selection is None and (
                self.bias is None or self.bias.free):
            return (0.0, 0.0)
        return (self.epsilon, self.delta)

    @property
    def charge(self) -> Cost:
        """The cost as the ledger records it, with its zCDP view."""
        eps, delta = self.cost
        if self.rho is not None and (eps, delta) != (0.0, 0.0):  # a ρ-accounted family
            ps_delta = self.selection.delta if self.selection is not None else 0.0
            return Cost(eps, delta, rho=self.rho, rho_delta=ps_delta)
        return Cost(eps, delta)
