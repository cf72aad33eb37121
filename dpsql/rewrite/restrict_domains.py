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

**Why there is a filter even without an L0 step.** Left out where no L0 step keeps a
user's groups, every key value the data hold would come back as a group, and the noise
stage would pick the domain's by their Python keys. An attack review found two reasons
not to (kept as tests in ``tests/privacy/test_key_collisions.py``): the answer's size
and the memory it takes after the charge then grow with the distinct values in the data
(2M strings outside a two-value domain: 0.9 s -> 7.3 s, 250 -> 861 MB), an outcome
that depends on the data; and Python's equality is looser than the engine's at the
edges (a PostgreSQL NUMERIC group holding the float 0.1's exact binary value is read as
the domain's 0.1), so one added user could replace a cell's statistics. The filter
makes the engine's own ``=`` decide, before any row reaches Python.

**Where the filter goes.** In WHERE by default. Where the rows are joined
(``FROM a JOIN b``) and the key is a plain column of a private table whose domain holds
only whole numbers, strings and booleans, it goes in HAVING instead, as a test
of the group's key (the per-user step folds it into its own HAVING,
:mod:`dpsql.rewrite.per_user_aggregate`):
DuckDB counts every WHERE conjunct as a filter of its own when it estimates a join's
sides, and the extra ones made TPC-H q1's lineitem look smaller than orders, so the
hash table was built over lineitem (q1 at sf 0.1: 2.2-2.7x its floor with the filter in
WHERE, 1.2x in HAVING). A condition on an aggregate cannot be pushed below it, so the
join keeps the floor's plan. A key that WHERE already tests with the very same
condition (``l_shipmode IN ('MAIL', 'SHIP')`` written by the analyst, with the domain
narrowed to it) gets no second copy: ``A AND A`` keeps the rows ``A`` keeps.

Why HAVING keeps exactly the rows WHERE kept. The filter ``f`` is a test of the key's
value alone: ``k IN (d1, ...)`` (``k = d1 OR ...``), ``k BETWEEN lo AND hi`` and
``k IS NULL``, with literals ``d`` fixed by the catalog. GROUP BY puts two rows in one
group only when their keys are both NULL or compare equal under the engine's own
``=`` for the column's type and collation; ``=`` is an equivalence and ``<=`` a total
order consistent with it, so two such values give ``f`` the same truth value, and a
NULL gives NULL for ``IN``/``BETWEEN`` and TRUE for ``IS NULL`` in every row alike.
So ``f`` is constant on each group: a group is either made only of rows WHERE would
keep, or only of rows it would drop, and dropping the second kind after grouping
leaves the first kind's rows, and so their aggregates, untouched (the dropped groups'
aggregates are computed and thrown away; they read the same row expressions as the
kept ones, which the totality proof covers for any row). Per engine:

* the catalog refuses any column whose collation makes different strings equal
  (:meth:`dpsql.engine.Connection` schema check), so a string key's ``=`` and grouping
  are both byte equality (PostgreSQL ``char(n)``: both ignore trailing spaces, and a
  literal compared with it is read as ``char`` too);
* whole numbers, booleans and dates: grouping and ``=`` are equality of the value, on
  DuckDB, PostgreSQL and Spark by the declared type; on SQLite, whose columns may hold
  values of other storage classes, GROUP BY and ``=`` both use the same comparison
  (values of different classes never equal, INTEGER against REAL compared exactly:
  9007199254740993 and 9007199254740992.0 are two groups and unequal), with the
  column's affinity applied to the literals once, whatever the row;
* floats (-0.0 equal to 0.0, NaN), dates and timestamps would hold by the same argument
  but keep the WHERE form: nothing measured needs them, the restriction is the
  conservative reading of the proof, and PostgreSQL writes a date key as a CASE in
  SELECT and GROUP BY, which left a HAVING test of the bare column ungrouped (the
  query was refused before the charge). So do key expressions, whose GROUP BY and HAVING
  matching differs between engines.
"""

from __future__ import annotations

import datetime

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.errors import DpsqlError
from dpsql.rewrite._sql import constant
from dpsql.rewrite.traits import DEFAULT, EngineTraits


def restrict_domains(expression: exp.Select, plan: Plan,
                     engine: EngineTraits = DEFAULT) -> exp.Select:
    """Adds ``key IN (domain)`` to WHERE (or HAVING) for each public-domain group key.

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
        if key.domain is None or key.in_domain:  # in_domain: dpsql.public_keys
            continue
        cond = domain_condition(key, plan)
        if _tested(expression, cond):  # the analyst's WHERE has this very conjunct
            continue
        if not isinstance(cond, exp.Boolean) and engine.filter_after_grouping \
                and _after_grouping(expression, key, plan):
            expression = expression.having(cond, copy=False)
        else:
            expression = expression.where(cond, copy=False)
    return expression


def domain_condition(key, plan: Plan | None, subject: exp.Expression | None = None,
                     whole: bool | None = None) -> exp.Expression:
    """The test that keeps the rows whose ``key`` lies in its domain (of ``subject``,
    the key's own expression by default): ``IN`` lists, ``BETWEEN`` runs, ``IS NULL``,
    or ``FALSE`` for an empty domain. ``whole``: whether runs may be ``BETWEEN``
    (:func:`_whole`, asked of ``plan`` when None).

    >>> from dpsql.engine import _demo_plan
    >>> plan = _demo_plan("SELECT sex, COUNT(*) FROM pums GROUP BY sex")
    >>> domain_condition(plan.keys[0], plan).sql()
    'sex IN (0, 1)'
    """
    subject = key.expr if subject is None else subject
    # bracketed: DuckDB reads ``age < 5 IN (FALSE, TRUE)`` as ``age < (5 IN ...)``
    subject = subject if isinstance(subject, exp.Column) else exp.paren(subject)
    values = [v for v in key.domain if v is not None]
    terms: list[exp.Expression] = []
    if whole is None:
        whole = _whole(key, plan)
    singles, runs = _runs(values) if whole else (values, [])
    terms += [exp.In(this=subject.copy(), expressions=[constant(v) for v in part])
              for part in _parts(singles)]
    terms += [exp.Between(this=subject.copy(), low=constant(lo), high=constant(hi))
              for lo, hi in runs]
    if None in key.domain:
        terms.append(exp.Is(this=subject.copy(), expression=exp.Null()))
    if not terms:  # WHERE lets no key of the domain through: nothing is released
        return exp.false()
    return terms[0] if len(terms) == 1 else exp.paren(exp.or_(*terms))


#: Python types of domain values whose SQL values group exactly as ``=`` compares them on
#: every engine (module docstring); bool is listed for clarity (it is an int subclass).
#: Dates would qualify too, but PostgreSQL's form of a date key (a CASE that keeps it
#: within Python's years, in SELECT and GROUP BY) left a HAVING test of the bare column
#: ungrouped, and the query was refused (attack review): they keep WHERE.
_EXACT = (int, bool, str)


def _after_grouping(expression: exp.Select, key, plan: Plan) -> bool:
    """Whether the key's filter goes in HAVING: joined rows, exact values, and a plain
    column of a private catalog table.

    A public table's column keeps WHERE: such tables are small (TPC-H's nation has 25
    rows), filtering them before the join costs nothing, and the estimate it changes is
    of the side already chosen to build on (q10 at sf 1: 1.02x its floor with the filter
    in WHERE, 1.10x in HAVING, where every (user, nation) group tests it).
    """
    if not expression.args.get("joins") or not isinstance(key.expr, exp.Column) \
            or not all(type(v) in _EXACT for v in key.domain if v is not None) \
            or not _whole(key, plan):  # a float or timestamp column keeps WHERE
        return False
    source = next((s for s in plan.scope.sources if s.alias == key.expr.table), None)
    return source is not None and source.derived is None and source.inner is None \
        and not source.table.public


def _tested(expression: exp.Select, cond: exp.Expression) -> bool:
    """Whether WHERE already has ``cond`` as one of its top-level AND-ed conditions.

    Compared as generated text (not sqlglot's equality, which ignores identifier case
    and quoting), so only the very same condition counts.
    """
    where = expression.args.get("where")
    if where is None:
        return False
    text = cond.sql()
    stack = [where.this]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.And):
            stack += [node.this, node.expression]
        elif isinstance(node, exp.Paren):
            stack.append(node.this)
        elif node.sql() == text:
            return True
    return False


#: Shortest run of consecutive whole numbers written as BETWEEN rather than listed.
MIN_RUN = 4

#: A list of a few values is written as IN lists of at most :data:`IN_PART` values
#: joined by OR (:func:`_parts`); longer ones stay one list.
IN_PART, IN_PARTS_UP_TO = 4, 8


def _parts(values: list) -> list[list]:
    """The domain's listed values as the IN lists to OR together.

    ``k IN (a, b, c, d) OR k IN (e)`` keeps exactly the rows ``k IN (a, b, c, d, e)``
    keeps, NULL included (NULL OR NULL is NULL). DuckDB turns an IN list of five or more
    constants into a join against the list, which for a handful of values costs more
    than the test (TPC-H ``segment_balance``, five segments: 3.8 -> 3.3 ms at sf 1, its
    plain query 1.2 ms); a long list keeps the join, whose lookup does not grow with it.

    >>> _parts([1, 2, 3]), _parts(list("abcde")), len(_parts(list(range(9))))
    ([[1, 2, 3]], [['a', 'b', 'c', 'd'], ['e']], 1)
    >>> _parts([])
    []
    """
    if len(values) <= IN_PART or len(values) > IN_PARTS_UP_TO:
        return [values] if values else []
    return [values[i:i + IN_PART] for i in range(0, len(values), IN_PART)]


def _whole(key, plan: Plan) -> bool:
    """Whether runs of the key's domain may be written as ``BETWEEN`` (:func:`_runs`):
    not for a plain column the catalog types as a float or a timestamp, where values
    between two whole numbers or days exist (0.5, noon) and would each make a group of
    their own. Never released, such a group would still take one of its user's
    ``max_groups`` places from the groups of the domain (attack review). Listed, the
    values keep exactly the domain's rows."""
    if not isinstance(key.expr, exp.Column):
        return True
    try:
        kind = plan.scope.column_type(key.expr)
    except (DpsqlError, KeyError, AttributeError, IndexError):  # a derived table's column
        return True
    return kind not in ("float", "timestamp")


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
