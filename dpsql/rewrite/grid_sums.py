"""Pass: a gridded statistic's summands are added exactly, as integers of a fine grid,
and the noise stage rounds the exact total to the noise's grid once.

Why (the argument is :mod:`dpsql.grid_units`): a sum added in double precision can move
further than the ``L∞`` its noise covers, and depend on the order of the rows, so one
user could move a release by more grid units than the privacy map counts. Here the
top-level ``SUM(v) AS __sN`` of each statistic with ``Statistic.grid = k`` becomes

    ``SUM(LEAST(GREATEST(CAST(ROUND(CAST(v AS DOUBLE) * 2^-j) AS BIGINT), -M), M))``

with ``j`` the fine grid's exponent (:func:`dpsql.grid_units.fine_exponent`, 2^24 times
finer than ``2^k``) and ``M = floor(L∞ / 2^j)`` (NULL kept NULL where a summand may be
NULL), whose integer total the engine computes exactly (DuckDB: a HUGEINT; Spark: a
DECIMAL(38, 0); SQLite: dpsql's exact aggregate); each user changes it by its own at
most ``M`` units, at most ``L∞``. The noise stage rounds that total to the grid
(:func:`dpsql.grid_units.to_grid`) and noises it in grid units
(:meth:`~dpsql.mechanisms.laplace.Grid.release_units`). Rounding once, not per user,
keeps the rounding error of a release below half a grid step whatever the number of
users (rounded per user, 1M users' partials drifted past the error bars at ε = 10).
In the per-user step, the partial's own SUM over the user's rows is taken in the same
fine grid (:func:`dpsql.sqlbuild.fine_sum`), or as the exact DECIMAL sum the aggregate
rule wrote (:mod:`dpsql.decimal_sums`). Which statistics are gridded is decided
before the rewrite (:func:`dpsql.grid_units.choose_grids`), never here: the pass only
writes what the plan records, and fails (before the charge: an internal error, as
:meth:`dpsql.Connection.execute` reports a bug) on a statistic recorded as gridded whose
top-level SUM it cannot find, so that no column the noise stage reads as units is in
value units.

Engines without ``EngineTraits.grid_sums`` get no statistic recorded as gridded, so the
tree is unchanged: PostgreSQL sums NUMERICs exactly (:mod:`dpsql.rewrite.bound_summands`).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.grid_units import fine_exponent, fine_limit
from dpsql.rewrite.per_user_aggregate import PER_USER
from dpsql.rewrite.traits import DEFAULT, EngineTraits
from dpsql.sqlbuild import clamp, data_type, fine_sum, scaled


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
    >>> print(sql[sql.index(") SELECT") + 2:sql.index(" FROM __per_user")])
    ... # doctest: +NORMALIZE_WHITESPACE
    SELECT SUM(LEAST(GREATEST(CAST(ROUND(CAST(__s0 AS DOUBLE) * 131072.0e0) AS BIGINT),
               -131072000000), 131072000000)) AS __s0
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
        total.set("this", _fine_units(total.this, stat))
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
        if stat is None or stat.decimal is not None:
            # a DECIMAL sum's partial is exact already (dpsql.decimal_sums)
            continue
        j = fine_exponent(stat.linf, stat.grid)
        for total in list(item.find_all(exp.Sum)):
            if not isinstance(total.this, exp.Distinct):
                total.replace(fine_sum(total.this, j))


def _fine_units(summand: exp.Expression, stat) -> exp.Expression:
    """``CAST(ROUND(CAST(summand AS DOUBLE) * 2^-j) AS BIGINT)`` (FLOOR for a histogram's
    bin) clamped to ``±M``,
    ``M = floor(L∞ / 2^j)`` (:func:`fine_limit`), NULL kept NULL: one summand in whole
    units of the fine grid ``2^j``, at most ``L∞`` in value."""
    j = fine_exponent(stat.linf, stat.grid)
    fine = scaled(summand, j)
    # a histogram's bins are floored: rounded up one by one, they added up to more than
    # the L1 bound L∞ (dpsql.grid_units); a sum's one summand is rounded to nearest
    rounded = exp.Floor(this=fine) if stat.bins is not None else exp.Round(this=fine)
    units = exp.Cast(this=rounded, to=data_type("BIGINT"))
    # M as an integer literal (M < 2^61): a float literal (sqlbuild.number writes whole
    # values from 2^53 as float text) made the clamp, and so the sum, a DOUBLE one
    # (attack review)
    limit = exp.Literal.number(fine_limit(stat.linf, j))
    # a user's partial is COALESCEd to 0 (never NULL); a row's value may be NULL, which
    # the sum skips and a bare clamp would turn into -M
    partial = isinstance(summand, exp.Column) and summand.name in stat.columns
    return clamp(units, exp.Neg(this=limit.copy()), limit, keep_null=not partial)
