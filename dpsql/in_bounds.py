"""Columns the owner says hold only values within their bounds, checked on the data: the
clamp of a sum of such a column is left out where it would keep every value as it is.

A sum clamps each row's value into the bounds its sensitivity was derived from
(:mod:`dpsql.rewrite.clamp_values`, :mod:`dpsql.decimal_sums`). On a table whose values
all lie inside, the clamp changes nothing and only costs time: ``segment_balance`` (TPC-H
``customer`` alone, ``AVG(c_acctbal)`` by segment) spent 0.15 of its 0.82 ms there at
sf 0.1 and 0.5 of 1.7 ms at sf 1, against a plain query of 0.64 and 1.09 ms. The owner
says so in the catalog (``in_bounds: true`` beside ``lower`` and ``upper``); dpsql does
not take the owner's word for it:

* **The check: the owner's fact, never the analyst's expression.** Before the charge,
  one query over the table counts, for every ``in_bounds`` column of it at once, the
  rows outside ``[lower, upper]`` (:func:`_within`: the engine's own ``BETWEEN``; NULL
  counts as outside unless the column is ``nullable``; a NaN is outside), on frozen data
  only (:mod:`dpsql.frozen_facts`: base tables, remembered per backend). A column is
  *proven* when its count is 0. What is counted depends on the catalog alone, so the
  time of a query can tell no more than whether the owner's declaration holds (an attack
  review timed the first version, which counted the rows on which the analyst's own
  summand changed under its clamp: ``SUM(CASE WHEN income = g THEN NULL ELSE age END)``
  lost its clamp exactly when no row held ``g``, an existence oracle at almost no ε).
* **Which sums.** A ``sum`` statistic (SUM, and AVG's centred sum; not VARIANCE's squares)
  whose per-row value is a bare proven column of a private or public catalog table read
  as the FROM table or an INNER join (never a derived table, a hidden path join or a
  null-supplied side), whose clamp interval holds the column's bounds (an interval the
  query narrowed keeps its clamp), and whose clamp keeps a NULL as NULL where the column
  may hold one (:attr:`~dpsql.analyze.plan.Statistic.nullable`).

Why removing that clamp changes no summand: every row the query sums carries the value
of one of the table's own rows, within ``[lower, upper]`` and so within the clamp's
interval ``[L, U]``; the clamp is ``LEAST(GREATEST(v, L), U)`` over the value, or over
``TRY_CAST(v AS DECIMAL(P, s))`` with ``L`` and ``U`` rounded outwards to ``s`` places
(:mod:`dpsql.decimal_sums`: a widening cast, exact), which returns ``v`` itself; a NULL
stays NULL under the clamp's NULL guard, or is read as 0 by the ``COALESCE`` that stays.
So the per-user partials (whose clamps stay, and still bound each user), the L0 step
and the answer's size are those of the query with it.

**Nothing the analyst sees depends on the check**, as with :mod:`dpsql.values_only`:
the plan keeps its statistics as they were (``in_bounds`` only on the plan that runs),
so the noise, notes, ``Result.sql`` and ``explain()`` are those of the query with the
clamp. A false declaration keeps every clamp of the column and goes to the owner's log
and ``dpsql catalog validate -d``.
"""

from __future__ import annotations

import math
import weakref
from decimal import Decimal
from fractions import Fraction

from sqlglot import exp

from dpsql import types as sqltypes
from dpsql.analyze.plan import Plan, Statistic
from dpsql.decimal_sums import shortest
from dpsql.frozen_facts import bare_column, every_row, frozen
from dpsql.sqlbuild import number

#: Per backend, (table, its declarations) -> :func:`_facts` (the data behind a frozen
#: backend never changes; :mod:`dpsql.frozen_facts` keeps each count too).
_checked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def stats_in_bounds(plan: Plan, backend) -> frozenset[str]:
    """The names of ``plan.stats`` whose clamp the data proves needless (module
    docstring); checks each table's declared columns, once per backend."""
    out = set()
    for stat in plan.stats:
        found = _declared(plan, stat)
        if found is not None and _proven(backend, *found):
            out.add(stat.name)
    return frozenset(out)


def _proven(backend, table, column) -> bool:
    """Whether ``column``'s values all lie within its bounds: counted with every other
    ``in_bounds`` column of ``table`` (one query, the same whatever the query asks)."""
    return _facts(backend, table)[column.name]


def _declared(plan: Plan, stat: Statistic):
    """(table, column) of a sum whose value is a bare ``in_bounds`` column read through
    one FROM or INNER source, clamped to an interval that holds the column's bounds and
    keeping its NULLs (module docstring); None otherwise."""
    if stat.kind != "sum" or stat.in_bounds or stat.interval is None:
        return None
    found = bare_column(plan, stat.arg, first_source=False)
    if found is None:
        return None
    table, column = found
    if not column.in_bounds or column.lower is None or column.upper is None:
        return None
    if not (stat.interval.lower <= column.lower and column.upper <= stat.interval.upper):
        return None
    if column.nullable and not stat.nullable:
        return None
    return table, column


def check_declared(backend, table) -> dict[str, bool] | None:
    """Each ``in_bounds`` column of a catalog ``table`` and whether the data proves it
    (every value within ``lower`` and ``upper``, or NULL where the column is nullable;
    the owner's view: ``dpsql catalog validate -d``); None when the backend's data can
    change, so nothing is checked and every query keeps its clamps.

    >>> import tempfile, pathlib
    >>> from dpsql.backends.duckdb import DuckDBBackend
    >>> from dpsql.catalog import load_catalog
    >>> from dpsql.datasets import catalog_path, load_pums
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pums.duckdb"
    >>> load_pums(path)
    >>> backend = DuckDBBackend(path)
    >>> check_declared(backend, load_catalog(catalog_path("pums_dup")).table("pums_dup"))
    {'age': True, 'income': True}
    >>> backend.close()
    """
    if not any(c.in_bounds for c in table.columns.values()) \
            or not frozen(backend, table.name):
        return None
    return _facts(backend, table)


def _facts(backend, table) -> dict[str, bool]:
    """Each ``in_bounds`` column of ``table`` and whether its values lie within its
    bounds (one count over the table for all of them, remembered per backend with the
    declarations it checked); a column whose type the check cannot compare exactly is
    not proven."""
    declared = tuple((c.name, c.lower, c.upper, c.nullable)
                     for c in table.columns.values() if c.in_bounds)
    known = _checked.setdefault(backend, {})
    key = (table.name, declared)
    if key not in known:
        known[key] = _count_facts(backend, table)
    return known[key]


def _count_facts(backend, table) -> dict[str, bool]:
    types = backend.columns(table.name) or {}
    columns = [c for c in table.columns.values() if c.in_bounds]
    checked = [(c, _within(c, types.get(c.name))) for c in columns]
    checked = [(c, cond) for c, cond in checked if cond is not None]
    facts = every_row(backend, table.name, [cond for _, cond in checked],
                      [f"in_bounds: {table.name}.{c.name} within its bounds"
                       for c, _ in checked], "the clamp of sums of that column")
    proven = {c.name: fact for (c, _), fact in zip(checked, facts, strict=True)}
    return {c.name: proven.get(c.name, False) for c in columns}


def _within(column, db_type: str | None) -> exp.Expression | None:
    """The column's values within its bounds, compared exactly in the column's own type
    (NULL inside only where the column is nullable); None for a type it cannot compare.

    * A DECIMAL(p, t) or an integer: its values are whole multiples of ``10^-t``, so
      ``v >= L`` is ``v >= ceil_t(L)`` and ``v <= U`` is ``v <= floor_t(U)``, with ``L`` and
      ``U`` the bounds' shortest decimal text (the values the clamps start from:
      :func:`dpsql.decimal_sums.shortest`), written in at most ``t`` places and ``p - t``
      digits, so the engine compares in the column's own type, exactly. (Against a
      DOUBLE literal it compared in DOUBLE, and a DECIMAL half an ulp past the bound
      passed, then summed whole on the exact DECIMAL path: attack review. A literal of
      more places than the column's is rounded to them in DuckDB.) A bound the type
      cannot reach is left out.
    * A DOUBLE or a REAL: compared with the bound's float literal, in DOUBLE, as the
      clamp compares it (:func:`dpsql.sqlbuild.number`).

    >>> from dpsql.catalog import Column
    >>> print(_within(Column("v", "float", 0.05, 9999.999), "DECIMAL(6,2)").sql())
    "v" >= 0.05 AND "v" <= 9999.99
    >>> print(_within(Column("v", "float", 0.5, 1e300), "DOUBLE").sql())
    "v" BETWEEN 0.5e0 AND 1e+300
    """
    name = exp.column(column.name, quoted=True)
    parsed = sqltypes.parse(db_type) if db_type else None
    if parsed is None or parsed.array:
        return None
    if parsed.base in sqltypes.FLOAT_NAMES:
        inside = exp.Between(this=name, low=number(column.lower), high=number(column.upper))
    elif parsed.base in sqltypes.DECIMAL_NAMES | sqltypes.INTEGER_NAMES:
        if parsed.base in sqltypes.DECIMAL_NAMES:
            try:
                p, t = (int(x) for x in parsed.params)
            except ValueError:
                return None
            largest = Decimal(10) ** (p - t)
        else:
            t, largest = 0, Decimal(2) ** _INTEGER_BITS.get(parsed.base, 128)
        low = _on_grid(column.lower, t, math.ceil)
        high = _on_grid(column.upper, t, math.floor)
        sides = []
        for bound, side in ((low, exp.GTE), (high, exp.LTE)):
            if abs(bound) >= largest and (bound < 0) == (side is exp.GTE):
                continue  # no value of the type lies beyond it
            if len(format(abs(bound), "f").replace(".", "")) > 38:
                return None  # a literal of more digits would be a DOUBLE
            sides.append(side(this=name.copy(), expression=_literal(bound)))
        inside = exp.and_(*sides) if sides else exp.true()
        if low > high:
            inside = exp.false()
    else:
        return None
    if not column.nullable:
        return inside
    return exp.func("COALESCE", inside, exp.Is(this=name.copy(), expression=exp.Null()))


#: Bits of each integer type's range, sign included (``2^bits`` past its largest value).
_INTEGER_BITS = {"TINYINT": 7, "SMALLINT": 15, "INTEGER": 31, "INT": 31, "BIGINT": 63,
                 "HUGEINT": 127, "UTINYINT": 8, "USMALLINT": 16, "UINTEGER": 32,
                 "UBIGINT": 64, "UHUGEINT": 128}


def _on_grid(bound: float, places: int, toward) -> Decimal:
    """The bound's shortest text moved to a multiple of ``10^-places`` (``toward``:
    ``math.ceil`` for a lower bound, ``math.floor`` for an upper one)."""
    value = Fraction(shortest(bound))
    return Decimal(toward(value * 10**places)).scaleb(-places)


def _literal(value: Decimal) -> exp.Expression:
    """A DECIMAL or integer literal of exactly ``value`` (no exponent: never a DOUBLE)."""
    literal = exp.Literal.number(format(abs(value), "f"))
    return exp.Neg(this=literal) if value < 0 else literal
