"""Pass: on an engine that converts what it adds, each summand of a noisy sum is clamped
to the sensitivity the noise covers, as the last step before the sum.

Why: the noise of a statistic covers one user changing it by at most ``L∞``
(:mod:`dpsql.analyze.sensitivity`); each summand of the statistics query's sum is one
user's partial (or, where the database keeps the user key unique, one user's row),
already clamped to ``[−L∞, L∞]`` or narrower by the earlier passes. That holds as
computed, in the engine's float arithmetic, exactly against the analysis' own floats.
PostgreSQL, however, adds NUMERICs (:func:`dpsql.backends.postgres_dialect.postgres_sums`:
a float8 sum raises on overflow), and its cast of a float to NUMERIC keeps 15 (float8) or
6 (float4) significant digits: it rounded a clamped partial of 0.49999999999999994 to
0.5, one grid unit past a sensitivity that sat just below a grid line (attack review).
Whatever the shape of the summand (a centred value, a square, a rescaled partial), this
pass writes its range as the summand's outermost expression, ``LEAST(GREATEST(v, −L∞),
L∞)``, NULL kept NULL; the engine's transforms clamp it again after their conversion,
in NUMERIC, to decimals inside ``[−L∞, L∞]``
(:func:`dpsql.backends.postgres_dialect._numeric_value`). A summand that lay inside the
range is unchanged; one the conversion pushed past it is moved back to it; so each user
changes the sum by at most ``L∞``, whatever the conversion did.

Engines that add the summands as computed (DuckDB, SQLite, Spark:
``EngineTraits.exact_summands``) get the tree unchanged. The exact NUMERIC sum then
reaches the grid as it is, not as the nearest float (:func:`dpsql.noise._number`).

Histograms (quantiles) are left out: their bound is the L1 norm ``R`` of a user's bin
weights, a whole number, which no per-coordinate clamp expresses. The cast can raise
that norm by a few parts in 10**15, and the privacy map counts ``floor(R / g) + width``
units: a whole ``R`` is itself a multiple of any grid step ``g <= 1`` and lies at least
1 below the next multiple of a step ``g > 1``, so such an excess reaches the next grid
line only for a step below about ``R·10**-15`` (an ε share near 10**11).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.rewrite.traits import DEFAULT, EngineTraits
from dpsql.sqlbuild import clamp

#: Statistics whose summands may be fractional (counts add whole numbers: exact).
KINDS = ("sum", "sumsq")


def bound_summands(expression: exp.Select, plan: Plan,
                   engine: EngineTraits = DEFAULT) -> exp.Select:
    """Clamps each sum statistic's summand to ``[−L∞, L∞]`` on an inexact engine.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite import rewrite
    >>> from dpsql.rewrite.traits import EngineTraits
    >>> plan = _demo_plan("SELECT SUM(income) FROM pums_dup", max_rows=2)
    >>> sql = rewrite(plan, engine=EngineTraits(exact_summands=False)).sql()
    >>> sql[sql.index(") SELECT"):]
    ') SELECT SUM(LEAST(GREATEST(__s0, -1000000), 1000000)) AS __s0 FROM __per_user'
    """
    if engine.exact_summands:
        return expression
    by_name = {s.name: s for s in plan.stats if s.kind in KINDS}
    for item in expression.expressions:
        stat = by_name.get(item.alias_or_name)
        total = item.this if isinstance(item, exp.Alias) else None
        if stat is None or not isinstance(total, exp.Sum) \
                or isinstance(total.this, exp.Distinct):
            continue
        summand = total.this
        # a user's partial is COALESCEd to 0 (never NULL); a row's value may be NULL,
        # which the sum skips and a bare clamp would turn into -L∞
        partial = isinstance(summand, exp.Column) and summand.name == stat.name
        total.set("this", clamp(summand.copy(), -stat.linf, stat.linf, keep_null=not partial))
    return expression
