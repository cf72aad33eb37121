"""Real-valued sums taken exactly, in whole units of the noise's grid.

A real statistic (a sum, AVG's centred sum, VARIANCE's squares, a quantile's histogram)
is released by a grid mechanism (:class:`~dpsql.mechanisms.laplace.Grid`): rounded to
the grid ``g = 2^k``, noised in whole grid units. Its privacy map counts
``floor(L∞ / g) + 1`` units per group (``+ width`` for a histogram), which holds when
neighbours' *exact* sums differ by at most ``L∞``. An engine that adds the summands in
double precision rounds each partial total, and the two neighbours' roundings differ: one
user moved a DuckDB sum two grid units where one was counted
(``tests/privacy/test_float_sums.py``).

On an engine that can (``EngineTraits.grid_sums``: DuckDB, Spark, SQLite), each summand
is rounded to the grid in SQL and the sum is taken over integers
(:mod:`dpsql.rewrite.grid_sums`):
``SUM(CAST(ROUND(CAST(v AS DOUBLE) * 2^-k) AS BIGINT))``; the noise stage adds integer
noise to those integer units and returns ``(units + noise) · 2^k`` as the nearest float
(:meth:`~dpsql.mechanisms.laplace.Grid.release_units`).

Why the privacy map is unchanged. Each summand ``p`` is one user's partial in one group
(or, where the database keeps the user key unique, one user's row), already clamped to
``|p| <= L∞`` by the earlier passes:

* ``CAST(p AS DOUBLE)`` is still at most ``L∞`` in magnitude (rounding to a double is
  monotone and ``L∞`` is a double); multiplying by the power of two ``2^-k`` is exact
  (an underflow only happens for values far below half a unit, which round to 0 anyway);
  ``ROUND`` gives a whole double ``u`` with ``|u| <= floor(L∞ / g) + 1`` for any
  round-to-nearest (DuckDB's half-away-from-zero included); the cast to BIGINT is exact
  because ``|u| <= 2^52 + 1`` (:data:`MAX_UNITS`, checked here before the charge).
* The integer sum is exact: DuckDB sums BIGINT into a 128-bit HUGEINT, Spark into a
  DECIMAL(38, 0) (:func:`dpsql.backends.spark_dialect.spark_sums`; its cast to BIGINT
  rounds first, half up or half to even, either a round-to-nearest), SQLite in Python
  integers (:class:`dpsql.backends.sqlite.ExactSum`; a total beyond ``2^63``, which
  SQLite cannot hold, comes back as the nearest double), and fewer than
  ``2^48`` rows (:data:`dpsql.backends.total.MAX_ROWS`) of at most ``2^52 + 1`` units
  stay below ``2^101``.
* So adding or removing one user changes each of its groups' totals by exactly its own
  rounded partial: at most ``floor(L∞ / g) + 1`` units, the map's count. A histogram's
  bin partials ``w_j >= 0`` with ``Σ w_j <= L∞`` move ``Σ round(w_j / g) <=
  Σ (floor(w_j / g) + 1) <= floor(L∞ / g) + width`` units, the histogram map's count
  (the Gaussian maps' ``_l2_units`` bound the same per-coordinate moves).
* That own partial is a function of the user's rows alone. A user's partial over
  several rows (the per-user step) adds the user's clamped rows; added in double
  precision, its rounding would depend on the order DuckDB adds them (storage order,
  threads), and a partial on a grid half-line could round either way (attack review:
  8 units moved where 7 are counted, ``tests/privacy/test_float_sums.py``). So each
  gridded partial's ``SUM`` over rows is taken in integers of a finer grid ``2^j``
  (:func:`dpsql.rewrite.grid_sums.fine_exponent`):
  ``CAST(SUM(CAST(CAST(v AS DOUBLE) * 2^-j AS BIGINT)) AS DOUBLE) * 2^j``. Each row's
  rounding and the integer total depend on that row and that multiset only; the
  conversions after it are functions of the total. What
  follows (the rescale, the clamp to the partial's range, the rounding to ``g``) is
  computed from that value and the user's counts, so the partial's units depend on
  nothing else either. A cast the engine refuses (a row far outside ``L∞``, which the
  clamps exclude) is turned into NULL by the totality guard and skipped: still a
  function of that row.
* A summand the engine cannot convert (a NaN, which the clamps already remove; the
  totality guard turns a failing cast into NULL) is skipped by SUM: it contributes 0,
  also within the count.

The decision is taken once per plan, before the rewrite, and recorded on each statistic
(``Statistic.grid``): the rewrite pass reads it to write the SQL and the noise stage to
read the column back as units, and the plan cache keeps it with the plan. It is taken
again, before the charge, after :func:`dpsql.answering.statistic_types` may have turned
an integer statistic into a grid one; the engine rewrites the query when it changed
(:meth:`dpsql.Connection._check`), so what the SQL computes and what the noise stage
reads cannot disagree. Engines without the trait (PostgreSQL, whose NUMERIC sums are
exact already) get no grid.
"""

from __future__ import annotations

import math

from dpsql.mechanisms.laplace import Grid

#: Largest ``L∞ / g`` gridded: a summand's units are whole doubles at most ``2^52 + 1``,
#: exact in a double and in a BIGINT. Beyond it (an ε share above about ``2^39``) the
#: statistic keeps the floating-point path.
MAX_UNITS = 2.0**52


def grid_of(stat, engine) -> int | None:
    """The grid exponent ``k`` the engine should sum ``stat`` in, or None.

    A statistic is gridded when the engine sums grid units (``engine.grid_sums``), it
    is not a count (counts add whole numbers: exact already), its mechanism is a grid
    mechanism, and one summand's units fit :data:`MAX_UNITS`.
    """
    if not getattr(engine, "grid_sums", False) or stat.rule.counts:
        return None
    mechanism = stat.mechanism
    if not isinstance(mechanism, Grid):
        return None
    linf = float(stat.linf)
    if not (math.isfinite(linf) and linf / mechanism.grid <= MAX_UNITS):
        return None
    return mechanism.k


def choose_grids(plan, engine) -> bool:
    """Records on each statistic of ``plan`` the grid its sum is taken in (before the
    charge); True when that changed, so the query must be rewritten."""
    changed = False
    for stat in plan.stats:
        k = grid_of(stat, engine)
        if k != stat.grid:
            stat.grid = k
            changed = True
    return changed


def grids_agree(plan) -> bool:
    """Whether every gridded statistic's mechanism is a grid of the recorded step (the
    invariant the noise stage relies on; checked before the charge)."""
    return all(s.grid is None or (isinstance(s.mechanism, Grid) and s.mechanism.k == s.grid)
               for s in plan.stats)


def settle_grids(plan, expression, schema, backend):
    """After :func:`dpsql.answering.statistic_types` (before the charge): the grids
    decided again, and the query rewritten and bound again if they changed.

    ``statistic_types`` turns an integer statistic the engine types as a fraction into a
    grid one (it leaves gridded ones be): that one is summed in grid units too, so the
    SQL is written again from the recorded decision. Nothing changes a mechanism after
    this, and the invariant is checked, so the SQL and the noise stage agree.

    Returns:
        the expression to run and its bound schema.

    Raises:
        RuntimeError: (dpsql's own bug, reported as an internal error before the charge)
            the decision did not settle.
    """
    from dpsql.answering import statistic_types
    from dpsql.rewrite import EngineTraits, rewrite

    traits = EngineTraits.of(backend)
    if choose_grids(plan, traits):
        expression = rewrite(plan, engine=traits)
        schema = backend.check(expression)
        statistic_types(plan, dict(schema), backend.reports_types)
    if not grids_agree(plan) or choose_grids(plan, traits):
        raise RuntimeError("a statistic's grid changed after its rewrite")
    return expression, schema
