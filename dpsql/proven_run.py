"""The SQL that runs: the checked query, or the same query without the steps the data
proves would keep every row.

Two facts of the owner's catalog, each checked on data that cannot change before dpsql
relies on it, make a step of the rewrite the identity:

* ``one_per_user`` columns (:mod:`dpsql.one_per_user`): a query whose keys read only
  them gives each user one group, so the L0 window keeps every row;
* ``values_only`` columns (:mod:`dpsql.values_only`): every row of the table holds one
  of the declared values, so a key's domain filter keeps every row;
* ``in_bounds`` columns (:mod:`dpsql.in_bounds`): every value of a sum read from them
  lies within its bounds, so the sum's clamp keeps every value.

The query that runs is the plan rewritten without those steps (``bound_groups`` off,
the keys marked ``in_domain``, the statistics ``in_bounds``) and checked again by the
engine's own pre-charge checks.
The plan the analyst's answer comes from, and the SQL shown (``Result.sql``,
``explain()``), are the query's with every step: noise, notes and the answer cache's
comparisons never read the proof, and only time does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.in_bounds import stats_in_bounds
from dpsql.one_per_user import window_needless
from dpsql.rewrite import rewrite
from dpsql.rewrite.traits import EngineTraits
from dpsql.values_only import keys_in_domain


def run_proven(plan: Plan, backend, check: Callable, expression: exp.Expression,
               read: Callable) -> tuple[exp.Expression, Callable, str]:
    """What to run: the checked ``expression`` and its key reader ``read`` as they are,
    or, where the data proves steps needless (module docstring), the query rewritten
    and checked again without them; and the SQL to show, ``expression``'s whichever
    runs.

    ``check`` is the engine's pre-charge check, ``(plan, expression, backend) ->
    (expression, read)``: the SQL that runs passes every check the SQL shown passed.
    """
    shown = backend.to_sql(expression)
    unbounded = plan.bound_groups and window_needless(plan, backend)
    in_domain = keys_in_domain(plan, backend)
    in_bounds = stats_in_bounds(plan, backend)
    if not unbounded and not in_domain and not in_bounds:
        return expression, read, shown
    keys = [replace(k, in_domain=True) if i in in_domain else k
            for i, k in enumerate(plan.keys)]
    stats = [replace(s, in_bounds=True) if s.name in in_bounds else s for s in plan.stats]
    run = replace(plan, bound_groups=plan.bound_groups and not unbounded, keys=keys,
                  stats=stats)
    return (*check(run, rewrite(run, engine=EngineTraits.of(backend)), backend), shown)
