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
GROUP BY race`` releases races 1 and 2 only, decided on the domains alone.

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
import decimal
import hashlib
import itertools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa
from sqlglot import exp

from dpsql.analyze.bounds import DATE_PARTS, PART_FUNCTIONS
from dpsql.catalog import Column
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits
from dpsql.scratch import checked_sql, scratch

#: Most input combinations evaluated to find an expression's image (the default of the
#: owner's ``max_domain_inputs``).
MAX_INPUTS = DEFAULT.max_domain_inputs
#: Largest image kept as a domain (beyond it, partition selection is cheaper).
MAX_VALUES = 10_000
#: Longest text of a value that is not a string (a number, date, timestamp, interval or
#: bool written as VARCHAR): a HUGEINT has 40 characters, an INTERVAL about 70.
SCALAR_TEXT = 128
#: Lengths are capped here while they are combined (a product of many REPLACEs would
#: otherwise grow huge integers); anything this large is far over every limit.
_CAP = 2**62
#: Work units charged for each image evaluated (opening, filling and closing a scratch
#: database: ~40 ms, what ~4 million units of evaluation cost), so many cheap images
#: still add up to a bounded total.
OPEN_COST = 4_000_000


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
    WHERE, or of an INNER JOIN's ON) that is *exactly evaluable* is evaluated on the
    domains, never on the data:

    * after each occurrence of a key expression is replaced by a variable ranging over
      that key's domain, it uses only comparisons (``= <> < <= > >=``, ``IS [NOT]
      DISTINCT FROM``, ``[NOT] IN (list)``, ``BETWEEN``, ``IS [NOT] NULL``), ``AND``,
      ``OR``, ``NOT``, literals, those variables, and columns that are inputs of a key
      whose every input column has a finite public domain (:func:`column_values`; such
      a key is computed from its inputs, as its image was);
    * every comparison is between operands of one kind (numbers, strings, booleans,
      dates, timestamps; NULL goes with all; a strict ISO date string goes with
      dates), with no string literal ending in a space (``CHAR(n)`` pads with spaces
      in PostgreSQL);
    * text is matched (``LIKE``, ``ILIKE``, ``LOWER``, ``UPPER``) only over ASCII, and
      strings are ordered (``<``, ``BETWEEN``) only when all are lower-case or all
      upper-case letters, where every backend and collation agree
      (:func:`_key_condition` gives the reasons).

    These mean the same on DuckDB and on every backend, so evaluating them on the
    domains in a scratch DuckDB (:func:`dpsql.scratch.scratch`, with SQL's
    three-valued logic: a NULL condition keeps no row) decides, for each combination,
    whether any row with it could pass the filter. Anything else (another function, a
    column of a key that is not computed, a column NULL-extended by a LEFT JOIN, work
    over the owner's limits, any error) leaves the condition unused and the keys as
    they were: a key wrongly kept is a noisy empty group, never a wrong one left out.

    Conditions and keys are split into independent parts (keys sharing an input column
    or a condition go together), each enumerated on its own within
    ``max_domain_inputs`` combinations and the shared ``max_domain_work``.

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

    def finite(col: exp.Column) -> tuple | None:
        if outer(col):
            return None
        try:
            return column_values(lookup(col), limits=limits)
        except Exception:  # noqa: BLE001 - an unresolvable column is simply not used
            return None

    # keys computed from their inputs (every input finite), as their images were
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
    # independent parts: union-find over keys
    parent = list(range(len(keys)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(members: Sequence[int]) -> None:
        for j in members[1:]:
            parent[find(j)] = find(members[0])

    readers: dict[str, list[int]] = {}
    for i, cols in enumerate(key_inputs):
        for sql in cols or ():
            readers.setdefault(sql, []).append(i)
    for members in readers.values():
        union(members)
    usable: list[tuple[exp.Expression, set[int]]] = []
    for condition in conditions:
        found = _key_condition(condition, exprs, domains, inputs, readers)
        if found is not None:
            usable.append(found)
            union(sorted(found[1]))
    if not usable:
        return None
    linked: dict[int, list[int]] = {}
    for i in range(len(keys)):
        linked.setdefault(find(i), []).append(i)
    allowed: list[tuple[list[int], set[tuple]]] = []
    for members in linked.values():
        conds = [c for c, used in usable if find(next(iter(used))) == find(members[0])]
        if not conds:
            continue
        found = _evaluate_part(members, conds, exprs, domains, key_inputs, inputs,
                               limits, spent)
        if found is not None:
            allowed.append((members, found))
    if not allowed:
        return None
    restricted = {i for members, _ in allowed for i in members}
    parts = [(tuple(members), tuple(found)) for members, found in allowed]
    parts += [((i,), tuple((v,) for v in domains[i])) for i in range(len(keys))
              if i not in restricted]
    groups = Combinations(tuple(domains), tuple(parts))
    return None if len(groups) > limits.max_domain_cells else groups
    # (over the limit: refused by the caller, whose product of domains is larger still)


@dataclass(frozen=True)
class Combinations:
    """Released key combinations: independent parts, enumerated only when released.

    Each part is some keys and the value tuples they may take together; a combination
    takes one tuple of every part. Its size and each key's values are known at once,
    so the analysis (before the charge) never lists up to ``max_domain_cells``
    combinations; the noise stage iterates them, in the order of the product of the
    keys' domains.

    >>> c = Combinations(((1, 2, 3), (0, 1)), (((0,), ((1,), (3,))), ((1,), ((0,), (1,)))))
    >>> len(c), list(c), c.values(0)
    (4, [(1, 0), (1, 1), (3, 0), (3, 1)], (1, 3))
    """

    #: each key's full public domain, in GROUP BY order
    domains: tuple[tuple, ...]
    #: (keys, their allowed value tuples) per part; every key is in exactly one part
    parts: tuple[tuple[tuple[int, ...], tuple[tuple, ...]], ...]

    def __len__(self) -> int:
        return math.prod(len(tuples) for _, tuples in self.parts)

    def values(self, i: int) -> tuple:
        """The values key ``i`` takes in some combination, in its domain's order."""
        for members, tuples in self.parts:
            if i in members:
                seen = {t[members.index(i)] for t in tuples}
                return tuple(v for v in self.domains[i] if v in seen)
        raise IndexError(i)

    def __iter__(self):
        position = [{v: j for j, v in enumerate(d)} for d in self.domains]

        def rank(members, t):
            return tuple(position[i][v] for i, v in zip(members, t, strict=True))

        parts = sorted(((m, sorted(ts, key=lambda t, m=m: rank(m, t))) for m, ts in self.parts),
                       key=lambda p: min(p[0]))
        order = [i for members, _ in parts for i in members]
        n = len(self.domains)
        # parts of consecutive keys: their product is already in the domains' order
        in_order = order == list(range(n))
        out = []
        for combo in itertools.product(*(ts for _, ts in parts)):
            flat = [v for t in combo for v in t]
            if in_order:
                yield tuple(flat)
                continue
            group: list = [None] * n
            for i, v in zip(order, flat, strict=True):
                group[i] = v
            out.append(tuple(group))
        yield from sorted(out, key=lambda g: rank(range(n), g))


def _evaluate_part(members: list[int], conds: list[exp.Expression], exprs, domains,
                   key_inputs, inputs, limits: Limits, spent: list[int]) -> set[tuple] | None:
    """The combinations of the keys ``members`` that satisfy ``conds``, or None."""
    columns: dict[str, str] = {}  # input column SQL -> __cJ
    tables: list[tuple] = []
    for i in members:
        for sql in sorted(key_inputs[i] or ()):
            if sql not in columns:
                columns[sql] = f"__c{len(tables)}"
                tables.append(inputs[sql][1])
    variables: dict[int, str] = {}
    for i in members:
        if key_inputs[i] is None:
            variables[i] = f"__c{len(tables)}"
            tables.append(domains[i])
    combinations = math.prod(len(t) for t in tables)
    if combinations > limits.max_domain_inputs:
        return None

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table == _VARIABLE:
            return exp.column(f"__{node.name}")
        if isinstance(node, exp.Column) and node.sql() in columns:
            return exp.column(columns[node.sql()])
        return node

    texts = {f"__c{j}": max((_text_length(v) for v in t), default=0)
             for j, t in enumerate(tables)}
    texts.update({f"__v{i}": max((_text_length(v) for v in domains[i]), default=0)
                  for i in members})
    select = []
    for i in members:
        if i in variables:
            select.append(exp.alias_(exp.column(variables[i]), f"__v{i}"))
        else:
            select.append(exp.alias_(exp.Try(this=exprs[i].copy().transform(rename)),
                                     f"__v{i}"))
    select += [exp.column(name) for name in columns.values()]
    renamed = [c.copy().transform(rename) for c in conds]
    per_row = 0
    for node in [*select, *renamed]:
        found = length_bounds(node, lambda c: texts.get(c.name, SCALAR_TEXT))
        if found.get(id(node)) is None or any(
                b is not None and b > limits.max_value_length for b in found.values()):
            return None
        per_row += _work_per_row(node, found)
        for like in node.find_all(exp.Like, exp.ILike):
            # matching with % and _ may try every position of the text for every
            # character of the pattern: charged as their product, not their sum
            per_row += (found.get(id(like.this)) or SCALAR_TEXT) * max(
                len(like.expression.this), 1)
    work = OPEN_COST + combinations * per_row
    if any(c.find(exp.Like) for c in renamed):
        work *= 2  # evaluated twice, case-sensitive and not (below)
    if spent[0] + work > limits.max_domain_work:
        return None
    inner = exp.select(*select).from_("__in0")
    for j in range(1, len(tables)):
        inner = inner.join(f"__in{j}", join_type="CROSS")
    query = exp.select(*(exp.column(f"__v{i}") for i in members)).distinct() \
        .from_(inner.subquery("__t")).where(exp.and_(*renamed))
    rows = _evaluate(checked_sql(query), tuple(tables), spent, work, whole=True)
    if rows is None:
        return None
    if any(c.find(exp.Like) for c in renamed):
        # SQLite's LIKE ignores ASCII case, the other backends' does not: keep the
        # combinations either reading keeps (NOT LIKE makes neither a superset)
        folded = query.copy().transform(
            lambda n: exp.ILike(**n.args) if isinstance(n, exp.Like) else n)
        other = _evaluate(checked_sql(folded), tuple(tables), spent, 0, whole=True)
        if other is None:
            return None
        rows = [*rows, *other]
    # each value as the domain holds it (1 and 1.0 are one key)
    canonical = {i: {v: v for v in domains[i]} for i in members}
    found_rows = set()
    for row in rows:
        values = []
        for i, v in zip(members, row, strict=True):
            v = float(v) if isinstance(v, decimal.Decimal) else v
            if v not in canonical[i]:
                # a value the key's domain does not hold (a type the evaluation does not
                # reproduce): do not guess, release the domain as before
                return None
            values.append(canonical[i][v])
        found_rows.add(tuple(values))
    return found_rows


#: The table name of key variables in a condition (no analyst's alias starts with ``__``).
_VARIABLE = "__keyvar"
#: The kind of each catalog type's values, for comparisons.
_CATALOG_KINDS = {"int": "num", "float": "num", "string": "str", "bool": "bool",
                  "date": "date", "timestamp": "ts"}


def _value_kind(value) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | decimal.Decimal):
        return "num"
    if isinstance(value, str):
        return "str"
    if isinstance(value, datetime.datetime):
        # a zoned timestamp compares through the session's time zone: not evaluated
        return "ts" if value.tzinfo is None else None
    if isinstance(value, datetime.date):
        return "date"
    return None


def _values_kind(values: tuple) -> str | None:
    """The one kind of a domain's values (None: mixed, or none known)."""
    kinds = {_value_kind(v) for v in values if v is not None}
    return kinds.pop() if len(kinds) == 1 else None


def _literal_kind(node: exp.Expression) -> str | None:
    """The kind of a literal operand, or None if the node is not one dpsql evaluates."""
    if isinstance(node, exp.Literal):
        if not node.is_string:
            return "num"
        # CHAR(n) compares ignoring trailing spaces in PostgreSQL, not in DuckDB
        return None if node.this.endswith(" ") else "str"
    if isinstance(node, exp.Boolean):
        return "bool"
    if isinstance(node, exp.Null):
        return "null"
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) \
            and not node.this.is_string:
        return "num"
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) \
            and node.this.is_string:
        if node.to.is_type(exp.DataType.Type.DATE):
            return "date"
        if node.to.is_type(exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ):
            return "ts"
    return None


#: Comparisons that mean the same on every backend for operands of one kind.
_ORDERINGS = (exp.LT, exp.LTE, exp.GT, exp.GTE)
_EQUALITIES = (exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.NullSafeNEQ)


def _key_condition(condition: exp.Expression, exprs, domains, inputs, readers
                   ) -> tuple[exp.Expression, set[int]] | None:
    """``condition`` over key variables, and the keys it restricts; or None.

    Besides the comparisons of :func:`released_groups`, text is evaluated where every
    backend gives it one meaning on the strings involved (the domains of the variables
    and input columns the condition reads, and its literals):

    * ``LIKE``/``ILIKE`` (and ``NOT LIKE``) with a constant pattern without backslash
      (PostgreSQL's and Spark's default escape), ``LOWER``, ``UPPER``: only when every
      string involved is ASCII. Case mapping of ASCII is the same everywhere (SQLite's
      ``lower`` maps ASCII only). SQLite's ``LIKE`` ignores ASCII case, the others do
      not: :func:`_evaluate_part` evaluates the condition both ways and keeps the
      combinations that either reading keeps.
    * ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN`` over strings: only when every string
      involved is lower-case ASCII letters, or every one upper-case ASCII letters (the
      byte order, every ICU and glibc locale's order and ``NOCASE`` agree on those;
      digits, spaces and punctuation are where collations differ).
    * a string literal compared with a date is read as the date it writes when it is
      a strict ISO date (``'2024-03-30'``), which every backend reads the same way.

    Whatever is not evaluated leaves the condition unused, which releases more keys
    (noisy empty groups), never fewer. Nothing here reads data: the decision and the
    evaluation depend on the catalog's domains and the query text only.
    """

    def substitute(node: exp.Expression) -> exp.Expression:
        for i, e in enumerate(exprs):
            if node == e:
                return exp.column(f"v{i}", table=_VARIABLE)
        return node

    condition = condition.copy().transform(substitute)
    used: set[int] = set()
    kinds: dict[int, str | None] = {}
    strings: list = []  # every string the condition can compare (domains, literals)
    needs: set[str] = set()  # "ascii": LIKE or case mapping; "order": string ordering

    def kind_of(node: exp.Expression) -> str | None:
        if isinstance(node, exp.Paren):
            return kind_of(node.this)
        if isinstance(node, exp.Column):
            if node.table == _VARIABLE:
                i = int(node.name[1:])
                used.add(i)
                if i not in kinds:
                    kinds[i] = _values_kind(domains[i])
                    if kinds[i] == "str":
                        strings.extend(domains[i])
                return kinds[i]
            sql = node.sql()
            if sql not in readers:
                return None  # not an input of a key computed from its inputs
            used.update(readers[sql])
            if inputs[sql][2] == "str":
                strings.extend(inputs[sql][1])
            return inputs[sql][2]
        if isinstance(node, exp.Lower | exp.Upper):
            if kind_of(node.this) != "str":
                return None
            needs.add("ascii")
            return "str"
        if isinstance(node, exp.Predicate | exp.Connector | exp.Not):
            return _predicate(node)
        found = _literal_kind(node)
        if found == "str":
            strings.append(node.this)
        return found

    def same(*operands: exp.Expression) -> str | None:
        found = [kind_of(o) for o in operands]
        if any(k is None for k in found):
            return None
        real = {k for k in found if k != "null"}
        if real == {"date", "str"} and all(
                k != "str" or _iso_date(o) for o, k in zip(operands, found, strict=True)):
            return "date"  # '2024-03-30' against a date: that date on every backend
        if len(real) > 1:
            return None
        return real.pop() if real else "null"

    def ordered(*operands: exp.Expression) -> bool:
        k = same(*operands)
        if k == "str":
            needs.add("order")
        return k is not None

    def _predicate(node: exp.Expression) -> str | None:
        if isinstance(node, exp.And | exp.Or):
            ok = kind_of(node.this) == "bool" and kind_of(node.expression) == "bool"
            return "bool" if ok else None
        if isinstance(node, exp.Not):
            return "bool" if kind_of(node.this) == "bool" else None
        if isinstance(node, _EQUALITIES):
            return "bool" if same(node.this, node.expression) else None
        if isinstance(node, _ORDERINGS):
            return "bool" if ordered(node.this, node.expression) else None
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                return None
            ok = ordered(node.this, node.args.get("low"), node.args.get("high"))
            return "bool" if ok else None
        if isinstance(node, exp.In):
            if any(node.args.get(a) is not None for a in ("query", "unnest", "field")) \
                    or not node.expressions:
                return None
            return "bool" if same(node.this, *node.expressions) else None
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                return None
            return "bool" if kind_of(node.this) is not None else None
        if isinstance(node, exp.Like | exp.ILike):
            pattern = node.expression
            if not (isinstance(pattern, exp.Literal) and _literal_kind(pattern) == "str"
                    and "\\" not in pattern.this) or kind_of(node.this) != "str":
                return None
            strings.append(pattern.this)
            needs.add("ascii")
            return "bool"
        return None

    if kind_of(condition) != "bool" or not used:
        return None
    texts = [v for v in strings if isinstance(v, str)]
    if needs and not all(v.isascii() for v in texts):
        return None
    if "order" in needs and not (all(_LOWER.fullmatch(v) for v in texts)
                                 or all(_UPPER.fullmatch(v) for v in texts)):
        return None
    return condition, used


#: Strings whose order every collation agrees on (see :func:`_key_condition`).
_LOWER = re.compile("[a-z]*")
_UPPER = re.compile("[A-Z]*")
#: A date literal every backend reads as the same date.
_ISO = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _iso_date(node: exp.Expression) -> bool:
    """Whether ``node`` is a string literal that is a strict, valid ISO date."""
    if not (isinstance(node, exp.Literal) and node.is_string and _ISO.fullmatch(node.this)):
        return False
    try:
        datetime.date.fromisoformat(node.this)
    except ValueError:
        return False
    return True


#: Images already evaluated: (checked SQL, digest of the inputs) → values. The image is a
#: function of the query text and the catalog alone, so a repeated key expression (the
#: same query again, or epsilon_for's search) skips evaluating it. The cache holds at
#: most _CACHE_CHARS characters of values in all (least recently used out first).
_cache: OrderedDict[tuple, tuple[list | None, int]] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_CHARS = 5_000_000
_cache_chars = 0


def _evaluate(sql: str, inputs: tuple[tuple, ...], spent: list[int],
              work: int, whole: bool = False) -> list | None:
    """The distinct values of ``sql`` over the input columns ``__in0 ...``, or None.

    Charges ``work`` to ``spent``, cached or not. ``whole``: every row as a
    tuple, not only its first value.
    """
    global _cache_chars
    # a digest, not the inputs themselves: up to max_domain_inputs values per key
    key = (sql, hashlib.sha256(repr(inputs).encode()).digest(), whole)
    # charged on a cache hit too: whether a key is public must not depend on what other
    # queries of the process evaluated before (another analyst's query text)
    spent[0] += work
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][0]
    with scratch() as con:
        try:
            for i, values in enumerate(inputs):
                con.register(f"__in{i}", pa.table({f"__c{i}": list(values)}))
            values = [r if whole else r[0] for r in con.execute(sql).fetchall()]
        except (duckdb.Error, pa.ArrowException):
            values = None  # not evaluable here: the keys come from the data instead
    size = 16 + sum(_text_length(v) for row in values or ()
                    for v in (row if whole else (row,)))
    if size <= _CACHE_CHARS // 4:
        with _cache_lock:
            if key not in _cache:
                _cache[key] = (values, size)
                _cache_chars += size
            while _cache_chars > _CACHE_CHARS:
                _cache_chars -= _cache.popitem(last=False)[1][1]
    return values


def _work_per_row(expr: exp.Expression, found: dict[int, int | None]) -> int:
    """Characters (at least 8 per node) one evaluation of ``expr`` may touch.

    A node of fixed-size type (a number, date, bool) counts 8, whatever its text would
    be: only strings carry their length through the evaluation.
    """
    total = 0
    for node in expr.walk():
        bound = found.get(id(node))
        if bound is None:
            continue
        scalar = isinstance(node, _SCALAR) and not (
            isinstance(node, exp.Literal) and node.is_string) or (
            isinstance(node, exp.Cast | exp.TryCast)
            and not node.to.is_type(*exp.DataType.TEXT_TYPES))
        total += 8 if scalar else max(bound, 8)
    return total


def _text_length(value) -> int:
    """Characters of a value written as text (an a-priori bound for non-strings)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int) and -10**40 < value < 10**40:
        return len(str(value))
    return SCALAR_TEXT


# -- a-priori bounds on the length of computed values ------------------------------------

#: Value nodes whose text is that of their first argument (or shorter): case mapping
#: is one character to one in DuckDB, trimming and slicing only shorten.
_SAME_AS_FIRST = (exp.Paren, exp.Alias, exp.Lower, exp.Upper, exp.Trim, exp.Substring,
                  exp.Left, exp.Right, exp.Nullif, exp.Min, exp.Max, exp.Cast, exp.TryCast,
                  exp.Try)
#: Value nodes that return one of several arguments.
_ONE_OF = (exp.Coalesce, exp.Least, exp.Greatest)
#: Value nodes whose value is a number, bool, date, timestamp or interval: fixed size.
_SCALAR = (exp.Literal, exp.Null, exp.Boolean, exp.Add, exp.Sub, exp.Mul, exp.Div,
           exp.IntDiv, exp.Mod, exp.Neg, exp.Abs, exp.Sign, exp.Sqrt, exp.Ln, exp.Exp,
           exp.Round, exp.Floor, exp.Ceil, exp.Length, exp.Extract, exp.TimestampTrunc,
           exp.DateTrunc, exp.Interval, exp.Predicate, exp.Connector, exp.Not, exp.Xor,
           exp.Count, exp.Sum, exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev,
           exp.StddevSamp, exp.StddevPop, exp.Median, exp.PercentileCont,
           exp.PercentileDisc, exp.Quantile, exp.ApproxQuantile, *PART_FUNCTIONS)
#: Nodes that are not values themselves (their children are still bounded).
_STRUCTURE = (exp.Query, exp.Subquery, exp.From, exp.Join, exp.Where, exp.Group,
              exp.Having, exp.Order, exp.Ordered, exp.Limit, exp.Offset, exp.Table,
              exp.TableAlias, exp.Identifier, exp.DataType, exp.DataTypeParam, exp.Var,
              exp.Star, exp.Distinct, exp.With, exp.CTE, exp.WithinGroup, exp.Tuple)


def length_bounds(expr: exp.Expression,
                  column: Callable[[exp.Column], int]) -> dict[int, int | None]:
    """An upper bound on the text length of every value node of ``expr``, by ``id()``.

    Args:
        expr: any expression or query.
        column: the longest text of a column's values. For a string column whose
            values are not listed, pass 1: the bound of an expression is then its growth,
            the characters it can produce per character of the data.

    Returns:
        ``id(node) → bound`` for every node of the tree; None for nodes that are no
        values (:data:`_STRUCTURE`) and for value nodes this function does not model
        (and everything built on them), which callers must treat as unbounded.

    >>> from sqlglot import parse_one
    >>> e = parse_one("replace(replace(CAST(x AS VARCHAR), '0', '00000'), '0', 'xyz') || 'ab'")
    >>> length_bounds(e, lambda c: 3)[id(e)]   # 3 → 3·5 → 3·5·3, then + 2
    47
    """
    out: dict[int, int | None] = {}
    # post-order without recursion: children are bounded before their parent
    stack: list[tuple[exp.Expression, bool]] = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in node.iter_expressions())
            continue
        out[id(node)] = _bound(node, out, column)
    return out


def _bound(node: exp.Expression, out: dict, column) -> int | None:
    def of(child) -> int | None:
        return None if child is None else out.get(id(child))

    def total(children, combine) -> int | None:
        bounds = [of(c) for c in children if c is not None]
        if not bounds or any(b is None for b in bounds):
            return None
        return min(combine(bounds), _CAP)

    if isinstance(node, exp.Literal):
        return len(node.this) if node.is_string else SCALAR_TEXT
    if isinstance(node, exp.Column):
        return min(int(column(node)), _CAP) if not isinstance(node.this, exp.Star) else None
    if isinstance(node, exp.Replace):
        text, new = of(node.this), of(node.args.get("replacement"))
        if text is None or new is None:
            return None
        # every occurrence of a (non-empty) pattern becomes the replacement
        return min(text * max(new, 1), _CAP)
    if isinstance(node, exp.Concat):
        return total(node.expressions, sum)
    if isinstance(node, exp.DPipe):
        return total([node.this, node.expression], sum)
    if isinstance(node, exp.Case):
        results = [i.args.get("true") for i in node.args.get("ifs") or []]
        return total([*results, node.args.get("default")], max)
    if isinstance(node, exp.If):
        return total([node.args.get("true"), node.args.get("false")], max)
    if isinstance(node, _ONE_OF):
        return total([node.this, *node.expressions], max)
    if isinstance(node, exp.Cast | exp.TryCast) and not node.to.is_type(
            *exp.DataType.TEXT_TYPES):
        return SCALAR_TEXT
    if isinstance(node, _SAME_AS_FIRST):
        return of(node.this)
    if isinstance(node, _SCALAR):
        return SCALAR_TEXT
    return None


def check_value_lengths(expr: exp.Expression, lookup: Callable[[exp.Column], Column] | None,
                        limits: Limits = DEFAULT,
                        found: dict[int, int | None] | None = None) -> None:
    """Refuses a query that could compute a value longer than ``limits.max_value_length``.

    A static check over the whole tree (outputs, WHERE, keys, HAVING, inside aggregates):
    a string built from literals with ``REPLACE`` and ``||`` can be made gigabytes long
    from a short query, and any engine that folds constants (the DuckDB planner, the
    post-processing check) would build it before the charge. Data strings whose length
    the catalog does not bound count as length 1, so for them the check bounds the
    growth factor instead.

    Args:
        expr: the query (or one expression of it).
        lookup: resolves a column to its catalog entry (None or a failing lookup: the
            column counts as a string of length 1 or a scalar, whichever is longer).
        limits: the owner's limits.
        found: the bounds already computed by :func:`length_bounds`, if any.

    Raises:
        UnsupportedQueryError: names the expression and the limit; nothing is evaluated.

    >>> from sqlglot import parse_one
    >>> check_value_lengths(parse_one("replace('0', '0', '" + "0" * 999 + "') || 'x'"), None)
    >>> check_value_lengths(parse_one(
    ...     "replace(replace('00', '0', '" + "0" * 999 + "'), '0', '" + "0" * 999 + "')"), None)
    Traceback (most recent call last):
    ...
    dpsql.errors.UnsupportedQueryError: REPLACE(REPLACE('00' ... of up to 1996002 characters...
    """
    if found is None:
        found = length_bounds(expr, lambda c: column_text(c, lookup))
    for node in expr.walk():
        bound = found.get(id(node))
        if bound is not None and bound > limits.max_value_length:
            shown = node.sql(dialect="duckdb")
            shown = shown if len(shown) <= 40 else shown[:20] + " ..."
            raise UnsupportedQueryError(
                f"{shown} could compute a value of up to {bound} characters; the limit is "
                f"{limits.max_value_length} (max_value_length)")


def column_text(col: exp.Column, lookup) -> int:
    """The longest text of a column's values, as :func:`check_value_lengths` counts it."""
    try:
        entry = lookup(col) if lookup is not None else None
    except Exception:  # noqa: BLE001 - an unresolvable name is reported elsewhere
        entry = None
    if entry is None:
        return SCALAR_TEXT
    if entry.type != "string":
        return SCALAR_TEXT
    if entry.values:
        return max(_text_length(v) for v in entry.values)
    return 1
