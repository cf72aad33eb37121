"""Pass: keep only rows whose public-domain group keys lie inside their domain.

A key released from a public domain must not come from the data: a value outside the
declared domain would otherwise appear as a group of its own. Filtering such rows out
also means a user can reach at most as many groups as the domain has.

The domain here is each key's values in the released combinations: a ``values`` list,
an int column's bounds, an expression's image, each narrowed by the WHERE conditions
evaluated on the domains (:func:`dpsql.analyze.domains.released_groups`). All of it is
computed from the catalog and the query text, so the filter is public too. The noise
stage releases only those combinations, whatever rows come back, so the filter is
what keeps rows outside the domain (an age of 150 under ``upper: 100``, a NULL in a
column not declared nullable) from taking one of a user's ``max_groups`` places; it is
not what keeps a data-only key from being released (the noise stage is).
"""

from __future__ import annotations

import datetime

from sqlglot import exp

from dpsql.analyze.plan import Plan


def restrict_domains(expression: exp.Select, plan: Plan) -> exp.Select:
    """Adds ``key IN (domain)`` to WHERE for each public-domain group key.

    Runs of four or more consecutive whole numbers are written ``key BETWEEN lo AND
    hi`` (:func:`_runs`), NULL in the domain as ``OR key IS NULL``, and an empty
    domain (WHERE lets no key through) as ``FALSE``.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite.statistics_query import statistics_query
    >>> plan = _demo_plan("SELECT sex, COUNT(*) FROM pums GROUP BY sex")
    >>> restrict_domains(statistics_query(plan), plan).sql()
    'SELECT sex AS __k0, COUNT(*) AS __s0 FROM pums WHERE sex IN (0, 1) GROUP BY sex'
    """
    for key in plan.keys:
        if key.domain is None:
            continue
        # bracketed: DuckDB reads ``age < 5 IN (FALSE, TRUE)`` as ``age < (5 IN ...)``
        subject = key.expr if isinstance(key.expr, exp.Column) else exp.paren(key.expr)
        values = [v for v in key.domain if v is not None]
        terms: list[exp.Expression] = []
        singles, runs = _runs(values)
        if singles:
            terms.append(exp.In(this=subject.copy(),
                                expressions=[exp.convert(v) for v in singles]))
        terms += [exp.Between(this=subject.copy(), low=exp.convert(lo), high=exp.convert(hi))
                  for lo, hi in runs]
        if None in key.domain:
            terms.append(exp.Is(this=subject.copy(), expression=exp.Null()))
        if not terms:  # WHERE lets no key of the domain through: nothing is released
            cond: exp.Expression = exp.false()
        elif len(terms) == 1:
            cond = terms[0]
        else:
            cond = exp.paren(exp.or_(*terms))
        expression = expression.where(cond, copy=False)
    return expression


#: Shortest run of consecutive whole numbers written as BETWEEN rather than listed.
MIN_RUN = 4


def _runs(values: list) -> tuple[list, list[tuple[int, int]]]:
    """Splits a domain into listed values and runs of consecutive whole numbers or days.

    A run ``lo..hi`` of Python ints becomes ``BETWEEN lo AND hi``: a bounded int column
    of thousands of keys stays one short condition (listing them costs about a second
    of checking per query). For a whole-number key it keeps the same rows as the list;
    a fraction between them (a REAL in SQLite's dynamically typed INTEGER column) would
    make a group of its own, which the noise stage never releases, since it releases
    only the domain's combinations.

    >>> _runs([1, 2, 3, 4, 5, 7, 9, 10])
    ([7, 9, 10], [(1, 5)])
    >>> _runs([False, True, 2, 3])  # booleans are listed
    ([False, True, 2, 3], [])

    Runs of consecutive days (a bounded date column, a public domain at day grain)
    become ``BETWEEN`` too: a date column holds whole days only, so the range keeps the
    same rows as the list. (Timestamps are listed.)

    >>> import datetime
    >>> _runs([datetime.date(2024, 2, 28) + datetime.timedelta(days=i) for i in range(4)])
    ([], [(datetime.date(2024, 2, 28), datetime.date(2024, 3, 2))])
    """
    if values and all(type(v) is datetime.date for v in values):
        step = datetime.timedelta(days=1)
    elif values and all(type(v) is int for v in values):
        step = 1
    else:
        return values, []
    ordered = sorted(values)
    singles, runs, start = [], [], 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + step:
            if i - start >= MIN_RUN:
                runs.append((ordered[start], ordered[i - 1]))
            else:
                singles.extend(ordered[start:i])
            start = i
    return singles, runs
