"""What the rewrite needs to know of the engine that will run its SQL."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineTraits:
    """The engine's traits that shape the rewritten SQL (never its privacy).

    The plan says what to compute; these say how to write it for one engine. They are
    passed to :func:`dpsql.rewrite.rewrite` beside the plan, which stays as the
    analysis left it.

    Attributes:
        reuse_ctes: the engine computes a CTE referenced several times once (the
            backend's ``supports_materialized_ctes``); it shapes the L0 step's SQL
            (:mod:`dpsql.rewrite.bound_groups`). Either way the same rows are kept.
        filter_after_grouping: a public-domain key of joined rows may be filtered in the
            per-user step's HAVING (:mod:`dpsql.rewrite.restrict_domains`; the backend's
            ``supports_key_filter_after_grouping``). Not on an engine whose transforms
            rewrite the GROUP BY key (Spark wraps it in a UTF-8 validity guard), where a
            HAVING over the bare column names no grouped expression. Either way the same
            rows are kept.
        exact_summands: the engine adds a sum's summands as it computed them (the
            backend's ``supports_exact_summands``). Not on PostgreSQL, whose sums cast
            each float to NUMERIC, rounding it: there each summand gets the clamp
            :mod:`dpsql.rewrite.bound_summands` writes, which the engine's transforms
            repeat after the cast.
        grid_sums: the engine sums a real statistic's summands as whole grid units,
            exactly (the backend's ``supports_grid_sums``: DuckDB, whose BIGINT sums
            are HUGEINTs; Spark and SQLite, whose transforms sum them as DECIMAL(38, 0)
            and with dpsql's exact aggregate):
            :func:`dpsql.grid_units.choose_grids` records which statistics, and
            :mod:`dpsql.rewrite.grid_sums` writes their SQL. Off by default (the golden
            fixtures' traits), and on engines that keep the floating-point sums.
        decimal_sums: the engine adds DECIMALs exactly and a sum whose summand it types
            as a DECIMAL is added as one (the backend's ``supports_decimal_sums``:
            DuckDB): :func:`dpsql.decimal_sums.choose_decimals` records which statistics.
    """

    reuse_ctes: bool = True
    filter_after_grouping: bool = True
    exact_summands: bool = True
    grid_sums: bool = False
    decimal_sums: bool = False

    @classmethod
    def of(cls, backend) -> EngineTraits:
        """The traits of the engine behind ``backend`` (its ``supports_*`` flags)."""
        return cls(reuse_ctes=backend.supports_materialized_ctes,
                   filter_after_grouping=backend.supports_key_filter_after_grouping,
                   exact_summands=backend.supports_exact_summands,
                   grid_sums=backend.supports_grid_sums,
                   decimal_sums=backend.supports_decimal_sums)


#: The traits of an engine that materialises CTEs (DuckDB, PostgreSQL, SQLite).
DEFAULT = EngineTraits()
