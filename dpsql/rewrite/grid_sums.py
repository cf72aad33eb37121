"""Pass: each summand of a gridded statistic is rounded to the grid in SQL, and the sum
is taken over integers of grid units, exactly.

Why (the argument is :mod:`dpsql.grid_units`): a sum added in double precision can move
further than the ``L∞`` its noise covers, so one user could move a release by more grid
units than the privacy map counts. Here the top-level ``SUM(v) AS __sN`` of each
statistic with ``Statistic.grid = k`` becomes

    ``SUM(CAST(ROUND(CAST(v AS DOUBLE) * 2^-k) AS BIGINT)) AS __sN``

(``2^-k`` a DOUBLE literal, exactly the power of two), whose integer total the engine
computes exactly (DuckDB: a HUGEINT; Spark: a DECIMAL(38, 0)), and each user changes it
by exactly its own rounded partial. The noise stage reads that column as units
(:meth:`~dpsql.mechanisms.laplace.Grid.release_units`). Which statistics are gridded is
decided before the rewrite (:func:`dpsql.grid_units.choose_grids`), never here: the pass
only writes what the plan records, and fails (before the charge: an internal error, as
:meth:`dpsql.Connection.execute` reports a bug) on a statistic recorded as gridded whose
top-level SUM it cannot find, so that no column the noise stage reads as units is in value
units.

Engines without ``EngineTraits.grid_sums`` get no statistic recorded as gridded, so the
tree is unchanged: PostgreSQL sums NUMERICs exactly (:mod:`dpsql.rewrite.bound_summands`).
On Spark the BIGINT units are summed as DECIMAL(38, 0) by its dialect's transforms, on
SQLite by dpsql's exact aggregate (:func:`dpsql.backends.sqlite_dialect.sqlite_sums`).
"""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.rewrite.per_user_aggregate import PER_USER
from dpsql.rewrite.traits import DEFAULT, EngineTraits
from dpsql.sqlbuild import fine_sum, power_of_two

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


def grid_sums(expression: exp.Select, plan: Plan,
              engine: EngineTraits = DEFAULT) -> exp.Select:
    """Sums each gridded statistic's summands as whole grid units.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.grid_units import choose_grids
    >>> from dpsql.rewrite import rewrite
    >>> from dpsql.rewrite.traits import EngineTraits
    >>> plan = _demo_plan("SELECT SUM(income) FROM pums_dup", max_rows=2)
    >>> duckdb = EngineTraits(grid_sums=True)
    >>> choose_grids(plan, duckdb)
    True
    >>> sql = rewrite(plan, engine=duckdb).sql()
    >>> sql[sql.index(") SELECT") + 2:sql.index(" FROM __per_user")]
    'SELECT SUM(CAST(ROUND(CAST(__s0 AS DOUBLE) * 0.0078125e0) AS BIGINT)) AS __s0'
    """
    gridded = {s.name: s for s in plan.stats if s.grid is not None}
    if not gridded:
        return expression
    if not engine.grid_sums:
        # dpsql's own bug: execute() reports it as an internal error, before the charge
        raise RuntimeError("a statistic is planned in grid units on an engine without them")
    # a histogram's bins are columns <name>_<j> of one statistic
    by_column = {c: s for s in gridded.values() for c in s.columns}
    found = set()
    for item in expression.expressions:
        column = item.alias_or_name
        stat = by_column.get(column)
        total = item.this if isinstance(item, exp.Alias) else None
        if stat is None or not isinstance(total, exp.Sum) \
                or isinstance(total.this, exp.Distinct):
            continue
        total.set("this", _units(total.this, stat.grid))
        found.add(column)
    missing = [c for c in by_column if c not in found]
    if missing:
        raise RuntimeError(f"statistic column {missing[0]} has no top-level SUM to grid")
    _exact_partials(expression, by_column)
    return expression


def _exact_partials(expression: exp.Select, by_column: dict) -> None:
    """In the per-user step, each gridded partial's ``SUM`` over the user's rows is
    taken exactly, in integers of a finer grid (:func:`dpsql.sqlbuild.fine_sum`), so
    the partial is a function of the user's rows alone, whatever order the engine adds
    them in."""
    with_ = expression.args.get("with_")
    ctes = {c.alias: c.this for c in with_.expressions} if with_ else {}
    per_user = ctes.get(PER_USER)
    if per_user is None:  # one row per user: the top-level SUM adds rows, rounded above
        return
    for item in per_user.expressions:
        stat = by_column.get(item.alias_or_name)
        if stat is None:
            continue
        j = fine_exponent(stat.linf, stat.grid)
        for total in list(item.find_all(exp.Sum)):
            if not isinstance(total.this, exp.Distinct):
                total.replace(fine_sum(total.this, j))


def _units(summand: exp.Expression, k: int) -> exp.Expression:
    """``CAST(ROUND(CAST(summand AS DOUBLE) * 2^-k) AS BIGINT)``."""
    scaled = exp.Mul(this=exp.Cast(this=summand.copy(), to=exp.DataType.build("DOUBLE")),
                     expression=power_of_two(-k))
    return exp.Cast(this=exp.Round(this=scaled), to=exp.DataType.build("BIGINT"))
