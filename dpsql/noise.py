"""Noise stage: exact per-group statistics become noisy ones, and keys are selected.

Which groups are released is decided here, never by the data alone:

* every group key has a public domain: every combination of the domains is released
  (or those WHERE lets through, decided on the domains alone), empty ones included
  (their exact statistics are 0);
* otherwise: keys found in the data are released only if their noisy user count
  clears the partition-selection threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from dpsql.analyze.plan import Plan
from dpsql.errors import DpsqlError
from dpsql.keys import order_key


@dataclass
class NoisyGroups:
    """The released groups: their keys and each statistic's noisy value per group."""

    keys: list[tuple]
    #: per statistic, its noisy value in each released group (a histogram: a list of
    #: bin counts per group)
    stats: dict[str, list]


def add_noise(plan: Plan, columns: list[str], rows: list[tuple]) -> NoisyGroups:
    """Selects the groups to release and noises every statistic of the plan.

    Args:
        plan: the query's plan.
        columns: column names of the rewritten query (``__k*`` then statistics).
        rows: its exact result, one row per group found in the data.
    """
    nk = len(plan.keys)
    index = {name: i for i, name in enumerate(columns)}
    exact = {tuple(row[:nk]): row for row in rows}

    def values(name: str, groups: list[tuple]) -> list:
        """Exact values, group by group; a histogram's bins one after the other."""
        stat = plan.stat(name)
        columns = [index[c] for c in stat.columns]
        out = []
        for g in groups:
            row = exact.get(g)
            out.extend(_number(row[i] if row is not None else 0, stat.integer)
                       for i in columns)
        return out

    noisy: dict[str, list] = {}
    if plan.selection is None:
        groups = plan.public_groups()
    else:
        # a data-independent order: the backend's hash order could depend on the data
        candidates = sorted(exact, key=order_key)
        counts, keep = plan.selection.release(values("__users", candidates))
        groups = [g for g, k in zip(candidates, keep, strict=True) if k]
        noisy["__users"] = [c for c, k in zip(counts, keep, strict=True) if k]
    for stat in plan.stats:
        if stat.name in noisy:
            continue
        # a histogram's L1 bound covers all its bins at once, so one release noises
        # every coordinate at the calibrated scale
        released = stat.mechanism.release(values(stat.name, groups))
        if stat.bins is not None:
            b = stat.bins.count
            released = [released[i * b:(i + 1) * b] for i in range(len(groups))]
        noisy[stat.name] = released
    return NoisyGroups(groups, noisy)


def _number(value, integer: bool):
    if value is None:  # SUM over only NULLs
        return 0
    if isinstance(value, Decimal):
        value = int(value) if integer and value == value.to_integral_value() else float(value)
    if not integer:
        return float(value)
    # The backend's column types are checked against the catalog before the query runs,
    # so a fraction cannot happen here; rounding it would change the sensitivity.
    if isinstance(value, float) and not value.is_integer():
        raise DpsqlError("internal error: an integer statistic is not whole")
    return int(value)
