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
    """

    reuse_ctes: bool = True


#: The traits of an engine that materialises CTEs (DuckDB, PostgreSQL, SQLite).
DEFAULT = EngineTraits()
