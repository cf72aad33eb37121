"""Public domains of GROUP BY expressions, derived from the catalog and the query alone.

A group key with a public domain releases every key of the domain (empty ones with a
noisy 0) and needs no partition selection, so no δ. Its domain must not depend on the
data; the rewrite then keeps only rows whose key lies in it
(:mod:`dpsql.rewrite.restrict_domains`), so a key the data hold outside the domain never
appears, whatever the catalog claims. The rules, in order:

* a bare column: its ``values`` list (or ``{false, true}`` for a bool), or, for an
  ``int`` column with ``lower`` and ``upper`` bounds and at most ``max_int_domain``
  (default 5,000) whole numbers between them, those numbers; for a ``date`` column
  with ``lower`` and ``upper`` dates (at most ``max_domain_inputs`` days), its days,
  the domain ``date_trunc('day', d)`` has too (the catalog's dates are as public as an
  int column's bounds, so ``GROUP BY visit_date`` needs no partition selection);
* ``CASE``/``IF`` whose every result is a literal: those literals (and NULL when a
  branch can be missing or NULL);
* a part of a date with a fixed range (``MONTH``, ``QUARTER``, ``EXTRACT(DOW ...)``, ...):
  that range;
* any other expression whose columns all have a finite public domain — a ``values``
  list, a bool, a bounded int as above, or a date column with lower and upper
  dates — is evaluated on every
  combination of those values in a fresh private in-memory DuckDB
  (:func:`dpsql.scratch.scratch`), reading no data: its image is the domain. So
  ``date_trunc('month', d)`` over bounded dates, ``UPPER(state)`` or
  ``COALESCE(code, 0)`` over a listed domain are public.

Evaluating in process is work done before the charge, so it is bounded a priori by the
owner's :class:`~dpsql.limits.Limits`, before anything runs:

* at most ``max_domain_inputs`` input combinations;
* :func:`length_bounds` bounds the length of every intermediate value from the query
  alone (``REPLACE`` multiplies lengths, ``||`` adds them): a bound over
  ``max_value_length`` refuses the query (:func:`check_value_lengths`), which is fast
  and free whatever the literals ask for;
* inputs × the summed bounds of all nodes, plus the cost of opening a database, must
  fit into ``max_domain_work`` — summed over all the keys of one query when the caller
  passes ``work`` — or the key is not evaluated and comes from the data (partition
  selection);
* afterwards every produced value is checked again, and an image of more than
  :data:`MAX_VALUES` keys or ``max_domain_chars`` characters is not kept.

The bounds of an int column are public like a ``values`` list, so ``GROUP BY age`` over
``[0, 100]`` releases the 101 ages and ``GROUP BY age // 10`` the 11 decades, empty
ones included, with no partition selection and no δ. As for ``values``, rows whose key
lies outside the domain (an age of 150, or NULL in a column not declared nullable) are
left out. A float column's bounds never make a domain (it has no finite set of
values), nor does an int column wider than ``max_int_domain``.

WHERE restricts the released keys (:func:`released_groups`): ``WHERE race IN (1, 2)
GROUP BY race`` releases races 1 and 2 only, decided on the domains alone (the
conditions it evaluates are in :mod:`dpsql.analyze.key_conditions`; the in-process
evaluation and the bounds on value lengths in :mod:`dpsql.analyze.evaluation`).

>>> import datetime
>>> from sqlglot import parse_one
>>> from dpsql.catalog import Column
>>> cols = {"d": Column("d", "date", datetime.date(2020, 1, 30), datetime.date(2020, 3, 2)),
...         "age": Column("age", "int", 0, 100)}
>>> [str(v) for v in domain(parse_one("date_trunc('month', d)", read="duckdb"),
...                         lambda c: cols[c.name])]
['2020-01-01 00:00:00', '2020-02-01 00:00:00', '2020-03-01 00:00:00']
>>> domain(parse_one("CASE WHEN age < 30 THEN 'young' ELSE 'old' END"), lambda c: cols[c.name])
('old', 'young')
>>> domain(parse_one("age // 10", read="duckdb"), lambda c: cols[c.name])
(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
>>> domain(parse_one("income"), lambda c: Column("income", "float", 0, 9)) is None
True
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Sequence

from sqlglot import exp

from dpsql.analyze.bounds import DATE_PARTS, PART_FUNCTIONS
from dpsql.analyze.evaluation import (
    OPEN_COST,
    SCALAR_TEXT,
    _cache,
    _evaluate,
    _text_length,
    _work_per_row,
    check_value_lengths,
    column_text,
    length_bounds,
)
from dpsql.analyze.key_conditions import (
    _CATALOG_KINDS,
    Combinations,
    _evaluate_part,
    _key_condition,
)
from dpsql.catalog import Column
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits
from dpsql.scratch import checked_sql

__all__ = ["MAX_INPUTS", "MAX_VALUES", "OPEN_COST", "SCALAR_TEXT", "Combinations", "_cache",
           "check_value_lengths", "column_text", "column_values", "domain", "length_bounds",
           "released_groups"]

#: Most input combinations evaluated to find an expression's image (the default of the
#: owner's ``max_domain_inputs``).
MAX_INPUTS = DEFAULT.max_domain_inputs
#: Largest image kept as a domain (beyond it, partition selection is cheaper).
MAX_VALUES = 10_000


def domain(expr: exp.Expression, lookup: Callable[[exp.Column], Column],
           limits: Limits = DEFAULT, work: list[int] | None = None) -> tuple | None:
    """The public domain of a group key, or None when it must come from the data.

    Args:
        expr: the key expression.
        lookup: resolves a column to its catalog entry.
        limits: the owner's limits.
        work: one query's running total of image work (a one-element list shared by
            all its keys): once evaluating another image would take it over
            ``limits.max_domain_work``, keys are no longer evaluated in process and
            come from the data. None: each image is bounded on its own.

    Raises:
        UnsupportedQueryError: evaluating the key could produce a value longer than
            ``limits.max_value_length`` (refused before anything is evaluated).
    """
    if isinstance(expr, exp.Column):
        return column_values(lookup(expr), limits=limits)
    if isinstance(expr, exp.Case | exp.If):
        return _literal_results(expr)
    fixed = _fixed_part(expr)
    if fixed is not None:
        nullable = _nullable(expr, lookup)
        return tuple(range(fixed[0], fixed[1] + 1)) + ((None,) if nullable else ())
    return _image(expr, lookup, limits, [0] if work is None else work)


def column_values(col: Column, dates: bool = True, limits: Limits = DEFAULT) -> tuple | None:
    """A column's finite public domain, or None.

    Its ``values``; a bool's two; an ``int`` column's whole numbers from ``lower`` to
    ``upper`` when there are at most ``limits.max_int_domain`` of them; with ``dates``,
    a date column's days from ``lower`` to ``upper`` (at most ``max_domain_inputs``).
    NULL is added when the column is nullable.

    The bounds of an int column are public (the catalog is), so its range is as public
    as a ``values`` list, and is handled exactly like one: a key released from it must
    lie in it (:mod:`dpsql.rewrite.restrict_domains` drops rows whose key is outside,
    such as an age of 150 under ``upper: 100``), so no key comes from the data.
    """
    values = col.values
    if values is None and col.type == "bool":
        values = (False, True)
    if values is None and col.type == "int" and col.bounded \
            and int(col.upper) - int(col.lower) < limits.max_int_domain:
        values = tuple(range(int(col.lower), int(col.upper) + 1))
    if values is None and dates and col.type == "date" and col.bounded:
        days = (col.upper - col.lower).days + 1
        if days <= limits.max_domain_inputs:
            values = tuple(col.lower + datetime.timedelta(days=i) for i in range(days))
    if values is None:
        return None
    return values + ((None,) if col.nullable else ())


def _literal_results(expr: exp.Expression) -> tuple | None:
    if isinstance(expr, exp.Case):
        results = [i.args.get("true") for i in expr.args["ifs"]]
        default = expr.args.get("default")
    else:
        results, default = [expr.args.get("true")], expr.args.get("false")
    values, null = [], default is None
    for r in [*results, default]:
        if r is None:
            continue
        if isinstance(r, exp.Null):
            null = True
        elif isinstance(r, exp.Literal):
            values.append(r.this if r.is_string else _number(r.this))
        elif isinstance(r, exp.Boolean):
            values.append(bool(r.this))
        elif isinstance(r, exp.Neg) and isinstance(r.this, exp.Literal) and not r.this.is_string:
            values.append(-_number(r.this.this))
        else:
            return None
    if not values or len({type(v) for v in values}) > 1:
        return None  # mixed types: let the engine's casts decide, from the data
    return tuple(sorted(set(values))) + ((None,) if null else ())


def _number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eE") else int(text)


def _fixed_part(expr: exp.Expression) -> tuple[int, int] | None:
    part = PART_FUNCTIONS.get(type(expr))
    if isinstance(expr, exp.Extract):
        part = expr.this.name.upper()
    return DATE_PARTS.get(part) if part else None


def _nullable(expr: exp.Expression, lookup) -> bool:
    return any(lookup(c).nullable for c in expr.find_all(exp.Column))


def _image(expr: exp.Expression, lookup, limits: Limits, spent: list[int]) -> tuple | None:
    columns: dict[str, exp.Column] = {}
    for c in expr.find_all(exp.Column):
        columns.setdefault(c.sql(), c)
    if not columns or len(columns) > 3:
        return None
    inputs = []
    for c in columns.values():
        values = column_values(lookup(c), limits=limits)
        if values is None:
            return None
        inputs.append(values)
    combinations = math.prod(len(v) for v in inputs)
    if combinations > limits.max_domain_inputs:
        return None
    # everything below is decided before DuckDB runs: a key that could produce long
    # values is refused, one that would be much work to enumerate comes from the data
    text = {sql: max((_text_length(v) for v in values), default=0)
            for sql, values in zip(columns, inputs, strict=True)}
    found = length_bounds(expr, lambda c: text.get(c.sql(), SCALAR_TEXT))
    check_value_lengths(expr, None, limits, found)
    if found.get(id(expr)) is None:
        return None  # a construct the length bound does not model: not run in process
    work = OPEN_COST + combinations * _work_per_row(expr, found)
    if spent[0] + work > limits.max_domain_work:
        return None
    names = {sql: f"__c{i}" for i, sql in enumerate(columns)}

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.sql() in names:
            return exp.column(names[node.sql()])
        return node

    sources = [f"__in{i}" for i in range(len(inputs))]
    query = exp.select(exp.alias_(exp.Try(this=expr.copy().transform(rename)), "v")) \
        .distinct().from_(sources[0])
    for source in sources[1:]:
        query = query.join(source, join_type="CROSS")
    values = _evaluate(checked_sql(query), tuple(inputs), spent, work)
    if values is None or len(values) > MAX_VALUES:
        return None
    longest = max((_text_length(v) for v in values), default=0)
    if longest > limits.max_value_length:  # the a-priori bound makes this unreachable
        raise UnsupportedQueryError(
            f"a group key's value is {longest} characters long; the limit is "
            f"{limits.max_value_length} (max_value_length)")
    if sum(_text_length(v) for v in values) > limits.max_domain_chars:
        return None  # inlined into the SQL as literals: too long a list
    known = sorted((v for v in values if v is not None), key=lambda v: (str(type(v)), v))
    return tuple(known) + ((None,) if None in values else ())


# -- WHERE restricts public-domain keys ------------------------------------------------

def released_groups(keys: Sequence[tuple[exp.Expression, tuple]],
                    conditions: Sequence[exp.Expression],
                    lookup: Callable[[exp.Column], Column], limits: Limits = DEFAULT,
                    work: list[int] | None = None,
                    outer: Callable[[exp.Column], bool] = lambda c: False
                    ) -> Combinations | None:
    """The key combinations of public-domain keys that rows passing ``conditions`` can have.

    ``WHERE race IN (1, 2) GROUP BY race`` releases races 1 and 2 only; ``WHERE age >= 18
    GROUP BY age // 10`` the decades from 1 on. Each condition (a top-level conjunct of
    WHERE, or of an INNER JOIN's ON) that is *exactly evaluable*
    (:mod:`dpsql.analyze.key_conditions` says which are, and why they mean the same on
    every backend) is evaluated on the domains in a scratch DuckDB, never on the data;
    anything else leaves the condition unused and the keys as they were: a key wrongly
    kept is a noisy empty group, never a wrong one left out. Keys and conditions are
    split into independent parts (:class:`_KeyParts`), each enumerated on its own.

    **DP soundness**: the result is a function of the catalog (domains and bounds) and of
    the query text only; no data are read. So the released key set stays public, as the
    full product of the domains was, and needs no partition selection. A row whose key
    combination is not released still counts towards nothing released (the noise stage
    releases only these combinations; each user touches at most
    ``min(max_groups, len(result))`` of them).

    **Accuracy**: on data that lie within the catalog's domains, a row that passes the
    conditions has input values in the domains, so its combination is in the result: no
    key that holds data is dropped. (A row whose input columns lie outside their domains
    may lose its group, as a row whose key lies outside its domain does.)

    Args:
        keys: each group key's expression and public domain, in GROUP BY order.
        conditions: filters every counted row satisfies.
        lookup: resolves a column to its catalog entry.
        limits: the owner's limits.
        work: the query's running total of in-process work (shared with key images).
        outer: whether a column may be NULL-extended by an outer join (then it is not
            read as an input: its domain would lack the NULL).

    Returns:
        The released combinations (iterated in the order of the product of the
        domains), or None when no condition restricts them (release the whole product).

    >>> from sqlglot import parse_one
    >>> cols = {"race": Column("race", "int", values=(1, 2, 3)),
    ...         "sex": Column("sex", "int", values=(0, 1))}
    >>> keys = [(parse_one("race"), (1, 2, 3)), (parse_one("sex"), (0, 1))]
    >>> list(released_groups(keys, [parse_one("race = 1 AND sex = 0 OR race = 3")],
    ...                      lambda c: cols[c.name]))
    [(1, 0), (3, 0), (3, 1)]
    >>> released_groups(keys, [parse_one("UPPER(race) = 1")], lambda c: cols[c.name]) is None
    True
    """
    spent = [0] if work is None else work
    exprs = [k[0] for k in keys]
    domains = [k[1] for k in keys]
    inputs, key_inputs = _computed_keys(exprs, lookup, limits, outer)
    parts = _KeyParts(len(keys))
    readers: dict[str, list[int]] = {}
    for i, cols in enumerate(key_inputs):
        for sql in cols or ():
            readers.setdefault(sql, []).append(i)
    for members in readers.values():
        parts.union(members)
    usable: list[tuple[exp.Expression, set[int]]] = []
    for condition in conditions:
        found = _key_condition(condition, exprs, domains, inputs, readers)
        if found is not None:
            usable.append(found)
            parts.union(sorted(found[1]))
    if not usable:
        return None
    return _released(parts, usable, exprs, domains, key_inputs, inputs, limits, spent)


def _released(parts: _KeyParts, usable: list[tuple[exp.Expression, set[int]]], exprs,
              domains, key_inputs, inputs, limits: Limits, spent: list[int]
              ) -> Combinations | None:
    """The combinations each part's conditions allow (the other parts unrestricted), or
    None when none could be evaluated or they exceed ``max_domain_cells``."""
    allowed: list[tuple[list[int], set[tuple]]] = []
    for members in parts.groups():
        conds = [c for c, used in usable
                 if parts.find(next(iter(used))) == parts.find(members[0])]
        if not conds:
            continue
        found = _evaluate_part(members, conds, exprs, domains, key_inputs, inputs,
                               limits, spent)
        if found is not None:
            allowed.append((members, found))
    if not allowed:
        return None
    restricted = {i for members, _ in allowed for i in members}
    released = [(tuple(members), tuple(found)) for members, found in allowed]
    released += [((i,), tuple((v,) for v in domains[i])) for i in range(len(domains))
                 if i not in restricted]
    groups = Combinations(tuple(domains), tuple(released))
    return None if len(groups) > limits.max_domain_cells else groups
    # (over the limit: refused by the caller, whose product of domains is larger still)


def _computed_keys(exprs: list[exp.Expression], lookup: Callable[[exp.Column], Column],
                   limits: Limits, outer: Callable[[exp.Column], bool]
                   ) -> tuple[dict[str, tuple[exp.Column, tuple, str | None]],
                              list[set[str] | None]]:
    """The keys computed from their inputs (every input finite), as their images were.

    Returns:
        Each input column's (column, public values, kind) by its SQL, and per key the
        SQL of its input columns (None: the key is not computed from its inputs).
    """

    def finite(col: exp.Column) -> tuple | None:
        if outer(col):
            return None
        try:
            return column_values(lookup(col), limits=limits)
        except Exception:  # noqa: BLE001 - an unresolvable column is simply not used
            return None

    inputs: dict[str, tuple[exp.Column, tuple, str | None]] = {}
    key_inputs: list[set[str] | None] = []
    for e in exprs:
        cols = {c.sql(): c for c in e.find_all(exp.Column)}
        values = {sql: finite(c) for sql, c in cols.items()}
        if cols and len(cols) <= 3 and all(v is not None for v in values.values()):
            for sql, c in cols.items():
                inputs.setdefault(sql, (c, values[sql], _CATALOG_KINDS.get(lookup(c).type)))
            key_inputs.append(set(cols))
        else:
            key_inputs.append(None)
    return inputs, key_inputs


class _KeyParts:
    """Independent parts of the keys: a union-find over key positions (keys sharing an
    input column or a condition go together)."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(self, members: Sequence[int]) -> None:
        for j in members[1:]:
            self.parent[self.find(j)] = self.find(members[0])

    def groups(self) -> list[list[int]]:
        """The parts, each its key positions in order, by their first key."""
        linked: dict[int, list[int]] = {}
        for i in range(len(self.parent)):
            linked.setdefault(self.find(i), []).append(i)
        return list(linked.values())
