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
is rounded to a fine grid ``2^j`` (:func:`fine_exponent`: 2^24 times finer than ``g``)
in SQL, clamped to ``±M = ±floor(L∞ / 2^j)`` (:func:`fine_limit`), and the sum is taken
over those integers (:mod:`dpsql.rewrite.grid_sums`); the noise stage rounds the exact
total to ``g`` once (:func:`to_grid`), adds integer noise to those units and returns
``(units + noise) · 2^k`` as the nearest float
(:meth:`~dpsql.mechanisms.laplace.Grid.release_units`).

Why the privacy map is unchanged. Each summand ``p`` is one user's partial in one group
(or, where the database keeps the user key unique, one user's row), already clamped to
``|p| <= L∞`` by the earlier passes:

* Its fine units ``u = clamp(round(p · 2^-j), −M, M)`` are an integer with
  ``|u| · 2^j <= M · 2^j <= L∞`` whatever the rounding did (``CAST(p AS DOUBLE)``,
  the exact scaling by a power of two, any round-to-nearest); the cast to BIGINT is
  exact because ``|p · 2^-j| < 2^61`` (:func:`fine_exponent`), and a cast the engine
  refuses gives NULL (the totality guard), which SUM skips: 0 units.
* The integer sum is exact: DuckDB sums BIGINT into a 128-bit HUGEINT, Spark into a
  DECIMAL(38, 0) (:func:`dpsql.backends.spark_dialect.spark_sums`; its cast to BIGINT
  rounds first, half up or half to even), SQLite in Python integers
  (:class:`dpsql.backends.sqlite.ExactSum`, chosen where the clamped units are certainly
  integers: :func:`dpsql.backends.sqlite_dialect._whole`; the total a query returns,
  beyond ``2^63``, which SQLite cannot hold, comes back as its digits:
  :class:`~dpsql.backends.sqlite.ExactSumOut`), and fewer than ``2^48`` rows
  (:data:`dpsql.backends.total.MAX_ROWS`) of at most ``2^61`` units stay below
  ``2^109``. ``M`` is written as an integer literal, and before the charge an engine
  that reports types must have typed each gridded column as an integer (or a DECIMAL
  of scale 0): :func:`dpsql.answering.settle_grids`.
* So adding or removing one user changes a group's exact total ``T`` by its own ``u``,
  ``|u| <= M``, and the total rounded to ``g`` (``2^(k-j)`` fine units) moves by at
  most ``floor(M / 2^(k-j)) + 1 <= floor(L∞ / g) + 1`` grid units, the map's count,
  for any monotone rounding. A histogram's bins (weights ``w_b >= 0``, ``Σ w_b <= L∞``)
  take their fine units with FLOOR, not ROUND: rounded up one by one, a user's bins
  added more than ``L∞`` (attack review: 2 bins of ``2^24 − 0.5`` became ``2^25`` units
  of a fine grid where ``L∞ = 2^25 − 1``, and the release moved 4 grid units where 3
  are counted). So ``Σ Δ_b <= floor(Σ w_b / 2^j)``, at most ``L∞`` in value up to the
  weights' own floating-point excess (below ``L∞ · 2^-51``, so below one grid step while
  ``L∞ / g <= 2^50``, :data:`MAX_HISTOGRAM_UNITS`; and ``L∞`` is a whole number, a
  multiple of any ``g <= 1`` and at least 1 below the next multiple of a ``g > 1``);
  then ``Σ (floor(Δ_b / 2^(k-j)) + 1) <= floor(L∞ / g) + width``, the histogram map's
  count, and the bins' grid units add up to at most ``floor(L∞ / g)`` plus one per
  bin, which the Gaussian maps' ``_l2_units`` vertex bound assumes.
* Rounding the total once, not each user's partial, keeps a release within half a grid
  step of the exact sum (plus ``2^-25`` of a step per user), whatever the number of
  users: rounded per user, 1M users' partials drifted out of the error bars at ε = 10
  (the 2026-11-27 benchmark).
* That own partial is a function of the user's rows alone. A user's partial over
  several rows (the per-user step) adds the user's clamped rows; added in double
  precision, its rounding would depend on the order the engine adds them (storage
  order, threads), and a partial on a grid half-line could round either way (attack
  review: 8 units moved where 7 are counted, ``tests/privacy/test_float_sums.py``). So
  each gridded partial's ``SUM`` over rows is taken in the same fine grid:
  ``CAST(SUM(CAST(CAST(v AS DOUBLE) * 2^-j AS BIGINT)) AS DOUBLE) * 2^j``. Each row's
  rounding and the integer total depend on that row and that multiset only; what
  follows (the rescale, the clamp to the partial's range, the fine units) is computed
  from that value and the user's counts.

The decision is taken once per plan, before the rewrite, and recorded on each statistic
(``Statistic.grid``; ``j`` is a function of it and ``L∞``): the rewrite pass reads it to
write the SQL and the noise stage to read the column back as fine units, and the plan
cache keeps it with the plan. It is taken again, before the charge, after
:func:`dpsql.answering.statistic_types` may have turned an integer statistic into a grid
one; the engine rewrites the query when it changed
(:meth:`dpsql.Connection._check`), so what the SQL computes and what the noise stage
reads cannot disagree. Engines without the trait (PostgreSQL, whose NUMERIC sums are
exact already) get no grid. Where DuckDB types a sum's summand as a DECIMAL, its rows
are added as DECIMALs instead, exactly (:mod:`dpsql.decimal_sums`, decided first).
"""

from __future__ import annotations

import math

from dpsql.mechanisms.laplace import Grid

#: Largest ``L∞ / g`` gridded: a group's released units stay exact in a double and
#: the fine grid 2^24 times finer than ``g`` (or as fine as a summand's 2^61 units allow).
#: Beyond it (an ε share above about ``2^39``) the statistic keeps the floating-point path.
MAX_UNITS = 2.0**52
#: ... for a histogram: its bins' weights are computed in floating point (within a part
#: in 2^51 of their exact sum, at most ``L∞``), and that excess must stay below a grid
#: step (an ε share above about ``2^37``: the floating-point path).
MAX_HISTOGRAM_UNITS = 2.0**50


def grid_of(stat, engine) -> int | None:
    """The grid exponent ``k`` the engine should sum ``stat`` in, or None.

    A statistic is gridded when the engine sums grid units (``engine.grid_sums``), it
    is not a count (counts add whole numbers: exact already), it is not a sum of rows
    released as an exact DECIMAL (:mod:`dpsql.decimal_sums`), its mechanism is a grid
    mechanism, and one summand's units fit :data:`MAX_UNITS`.
    """
    if not getattr(engine, "grid_sums", False) or stat.rule.counts:
        return None
    if stat.decimal is not None and stat.decimal.top:
        return None  # released as the exact DECIMAL sum of rows (dpsql.decimal_sums)
    mechanism = stat.mechanism
    if not isinstance(mechanism, Grid):
        return None
    linf = float(stat.linf)
    limit = MAX_UNITS if stat.bins is None else MAX_HISTOGRAM_UNITS
    if not (math.isfinite(linf) and linf / mechanism.grid <= limit):
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


#: A user's rows are added in a grid ``2^FINE_STEPS`` times finer than the noise's
#: (:func:`fine_exponent`).
FINE_STEPS = 24
#: ... and never finer than ``|value| / 2^j < 2^FINE_BITS``: a BIGINT holds a row's
#: units, and ``2^48`` rows of them stay below ``2^110`` in the HUGEINT sum.
FINE_BITS = 61


def fine_exponent(linf: float, k: int) -> int:
    """The exponent ``j`` of the finer grid ``2^j`` a user's rows are added up in, for
    a statistic of range ``L∞`` noised on the grid ``2^k``.

    ``j = max(k − 24, e − 61, −1022)`` where ``L∞ < 2^e``:

    * each row a partial adds is at most ``L∞`` in magnitude (a sum's rows lie in
      ``[L, U]`` and its range is ``R·[min(L, 0), max(U, 0)]``; a variance's squares
      likewise), so ``|value| / 2^j < 2^61`` fits a BIGINT;
    * ``2^j`` and ``2^-j`` are normal doubles (``j >= −1022``; ``k <= 1011`` since the
      scale is a finite double);
    * a row's rounding moves its partial by at most ``2^(j-1)``, ``2^-25`` of a grid
      step, and at most ``2^-37`` of the noise's scale (``2^k <= scale·2^-12``);
    * at ordinary ε a row is then at most about ``2^37`` units, which DuckDB adds in its
      fast path (units near ``2^61`` cost about 15% more on PUMS 1M).

    >>> fine_exponent(1500000.0, 8), fine_exponent(1.0, -100), fine_exponent(0.0, -2000)
    (-16, -60, -1022)
    """
    e = math.frexp(float(linf))[1] if linf > 0 else -1073
    return max(k - FINE_STEPS, e - FINE_BITS, -1022)


def fine_limit(linf: float, j: int) -> int:
    """``floor(L∞ / 2^j)``: the most fine units one summand may add (exact: ``L∞·2^-j``
    is below ``2^61``, a scaling of a double by a power of two).

    >>> fine_limit(1.9999999999999998, -1), fine_limit(6.0, -24)
    (3, 100663296)
    """
    return math.floor(math.ldexp(float(linf), -j))


def to_grid(total: int, j: int, k: int) -> int:
    """An exact total of fine units ``2^j`` in whole units of the grid ``2^k``, rounded
    half to even in integer arithmetic (``k < j`` only for a grid finer than ``2^-1022``:
    a multiplication).

    >>> to_grid(5, -1, 0), to_grid(7, -1, 0), to_grid(-5, -1, 0), to_grid(3, 2, 1)
    (2, 4, -2, 6)
    """
    shift = k - j
    if shift <= 0:
        return total << -shift
    quotient, remainder = divmod(total, 1 << shift)
    half = 1 << (shift - 1)
    if remainder > half or (remainder == half and quotient % 2 == 1):
        quotient += 1
    return quotient
