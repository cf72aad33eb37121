"""The aggregates dpsql answers, one module per family, listed in :data:`AGGREGATES`.

As sqlglot lists its optimizer rules, every family is one line here. A family
(:class:`~dpsql.aggregates.base.Family`) says which SQL functions it answers, which
noisy statistics a cell needs and how the released value, range, interval and
predicted error follow from them; each kind of statistic
(:class:`~dpsql.aggregates.base.StatisticRule`) says its label, its sensitivity (with
the argument), its SQL and the values it can take. The other stages dispatch through
:func:`family_of` and :func:`statistic_rule` (also ``Cell.family`` and
``Statistic.rule``) instead of testing kinds.

To add an aggregate: write its module (a ``Family`` and, if it needs a new kind of
statistic, a ``StatisticRule``), add it below, and add a golden fixture and a test.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.aggregates import avg, count, count_distinct, quantile, sums, variance
from dpsql.aggregates.base import DIRECT, Family, StatisticRule

#: Every family, in the order their ``answers`` are asked.
AGGREGATES: tuple[Family, ...] = (
    count_distinct.FAMILY,
    count.FAMILY,
    sums.FAMILY,
    avg.FAMILY,
    variance.FAMILY,
    quantile.FAMILY,
)

#: The SQL functions answered (sqlglot node classes), each once.
FUNCTIONS: tuple[type[exp.Expression], ...] = tuple(
    dict.fromkeys(f for family in AGGREGATES for f in family.functions))

_RULES: dict[str, StatisticRule] = {
    rule.kind: rule for family in AGGREGATES for rule in family.statistics}
_CELLS: dict[str, Family] = {DIRECT.cell_kinds[0]: DIRECT} | {
    kind: family for family in AGGREGATES for kind in family.cell_kinds
    if family.cell_kinds != DIRECT.cell_kinds}


def family_for(aggregate: exp.Expression) -> Family:
    """The family answering one of the analyst's aggregates (one of :data:`FUNCTIONS`)."""
    return next(family for family in AGGREGATES if family.answers(aggregate))


def family_of(cell_kind: str) -> Family:
    """The family behind a ``Cell.kind``."""
    return _CELLS[cell_kind]


def statistic_rule(kind: str) -> StatisticRule:
    """The rule of a ``Statistic.kind``.

    Raises:
        ValueError: no statistic of that kind exists.
    """
    rule = _RULES.get(kind)
    if rule is None:
        raise ValueError(f"unknown statistic kind {kind!r}")
    return rule


#: The statistic kinds the engine noises.
KINDS: tuple[str, ...] = tuple(_RULES)

__all__ = ["AGGREGATES", "FUNCTIONS", "KINDS", "Family", "StatisticRule", "family_for",
           "family_of", "statistic_rule"]
