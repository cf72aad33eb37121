"""A user's partial sum of whole numbers, written as the BIGINT it is.

In the per-user step a sum's partial is ``LEAST(GREATEST(COALESCE(SUM(v), 0), L), U)``
(:meth:`dpsql.aggregates.sums.Sum.partial`). Where ``v`` is a whole number of up to 64
bits (TPC-H q12's ``CASE WHEN ... THEN 1 ELSE 0 END``), DuckDB adds it exactly into a
128-bit HUGEINT; but the released sum then adds HUGEINTs, which the totality guard
(:mod:`dpsql.backends.duckdb_total`: a 128-bit total of 128-bit values may overflow)
adds as DOUBLEs, and the statistic, no longer a whole number by its type, goes on the
binary grid (:mod:`dpsql.grid_units`): every row converted to DOUBLE, scaled and cast,
every partial rounded to grid units and clamped again. q12 spent 7% of its statement
there at TPC-H sf 0.1.

Here the partial of such a statistic is ``CAST(... AS BIGINT)``: the clamp keeps it in
``[L, U]``, whole numbers below 2^53 written as integer literals
(:func:`whole_candidates` requires it), so the clamp stays an integer and the cast
changes no value and cannot fail; the released sum adds BIGINTs into a HUGEINT, exactly,
and the statistic keeps the integer noise it was analysed with, as a count does. A
summand the engine types as anything else (a DOUBLE, a DECIMAL, a HUGEINT, whatever the
catalog says) keeps the partial as it was: the cast would round it. The engine's types
come from the one bind-only probe of the summands
(:func:`dpsql.decimal_sums.summand_types`); they choose the form, never the bound: the
partial's clamp is the same either way, and ``answering.statistic_types`` still reads
the released column's type before the charge.
"""

from __future__ import annotations

from dpsql import types as sqltypes

#: Summand types DuckDB adds exactly into a HUGEINT (64 bits at most).
WHOLE_TYPES = frozenset({"TINYINT", "UTINYINT", "SMALLINT", "USMALLINT", "INTEGER",
                         "UINTEGER", "BIGINT", "BOOLEAN"})
#: The partial's bounds must be written as integer literals (:func:`dpsql.sqlbuild.number`
#: writes a whole bound from 2^53 as a DOUBLE, whose clamp is a DOUBLE: a bound 7 below
#: 2^63 was written as 2^63, and the cast of a partial clamped there failed; attack
#: review), and so lie inside a BIGINT.
_WHOLE_LITERAL = 2**53


def whole_candidates(plan, engine) -> list:
    """The sums whose per-user partial may be a BIGINT: a per-user step, an uncentred
    ``sum`` statistic analysed as whole numbers with integer noise, on an engine that
    sums grid units (DuckDB, whose guard widens HUGEINT sums), and a partial range of
    whole numbers written as integer literals (below 2^53, inside a BIGINT)."""
    if not getattr(engine, "grid_sums", False) or plan.uid is None or plan.one_row_per_user:
        return []
    out = []
    for s in plan.stats:
        if s.kind != "sum" or s.centred or s.bins is not None or s.arg is None \
                or s.interval is None or not s.integer or s.decimal is not None:
            continue
        low, high = s.rule.partial_range(s.rule.values_interval(s), plan.max_rows)
        if all(float(b).is_integer() and abs(b) < _WHOLE_LITERAL for b in (low, high)):
            out.append(s)
    return out


def choose_whole(stats: list, summand_types: dict[str, str | None]) -> None:
    """Records :attr:`~dpsql.analyze.plan.Statistic.whole` on each of ``stats`` whose
    summand the engine types as a whole number of at most 64 bits."""
    for stat in stats:
        type_name = summand_types.get(stat.name)
        parsed = sqltypes.parse(type_name) if type_name else None
        stat.whole = parsed is not None and not parsed.array and parsed.base in WHOLE_TYPES
