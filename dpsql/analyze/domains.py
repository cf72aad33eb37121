"""Public domains of GROUP BY expressions, derived from the catalog and the query alone.

A group key with a public domain releases every key of the domain (empty ones with a
noisy 0) and needs no partition selection, so no δ. Its domain must not depend on the
data; the rewrite then keeps only rows whose key lies in it
(:mod:`dpsql.rewrite.restrict_domains`), so a key the data hold outside the domain never
appears, whatever the catalog claims. The rules, in order:

* a bare column: its ``values`` list (or ``{false, true}`` for a bool);
* ``CASE``/``IF`` whose every result is a literal: those literals (and NULL when a
  branch can be missing or NULL);
* a part of a date with a fixed range (``MONTH``, ``QUARTER``, ``EXTRACT(DOW ...)``, ...):
  that range;
* any other expression whose columns all have a finite public domain — a ``values``
  list, a bool, or a date column with lower and upper dates — is evaluated on every
  combination of those values (at most :data:`MAX_INPUTS`) in a private in-memory DuckDB,
  reading no data: its image is the domain. So ``date_trunc('month', d)`` over bounded
  dates, ``UPPER(state)`` or ``COALESCE(code, 0)`` over a listed domain are public.

Numeric bounds (``lower``/``upper`` of an int) say how to clamp values, not which keys
exist, so they never make a domain: ``GROUP BY age`` goes through partition selection.

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
>>> domain(parse_one("age // 10", read="duckdb"), lambda c: cols[c.name]) is None
True
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable

import duckdb
import pyarrow as pa
from sqlglot import exp

from dpsql.analyze.bounds import DATE_PARTS, PART_FUNCTIONS
from dpsql.catalog import Column
from dpsql.scratch import scratch

#: Most input combinations evaluated to find an expression's image.
MAX_INPUTS = 100_000
#: Largest image kept as a domain (beyond it, partition selection is cheaper).
MAX_VALUES = 10_000

def domain(expr: exp.Expression, lookup: Callable[[exp.Column], Column]) -> tuple | None:
    """The public domain of a group key, or None when it must come from the data."""
    if isinstance(expr, exp.Column):
        return column_values(lookup(expr), dates=False)
    if isinstance(expr, exp.Case | exp.If):
        return _literal_results(expr)
    fixed = _fixed_part(expr)
    if fixed is not None:
        nullable = _nullable(expr, lookup)
        return tuple(range(fixed[0], fixed[1] + 1)) + ((None,) if nullable else ())
    return _image(expr, lookup)


def column_values(col: Column, dates: bool = True) -> tuple | None:
    """A column's finite public domain: its ``values``, a bool's two, or bounded dates."""
    values = col.values
    if values is None and col.type == "bool":
        values = (False, True)
    if values is None and dates and col.type == "date" and col.bounded:
        days = (col.upper - col.lower).days + 1
        if days <= MAX_INPUTS:
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


def _image(expr: exp.Expression, lookup) -> tuple | None:
    columns: dict[str, exp.Column] = {}
    for c in expr.find_all(exp.Column):
        columns.setdefault(c.sql(), c)
    if not columns or len(columns) > 3:
        return None
    inputs = []
    for c in columns.values():
        values = column_values(lookup(c))
        if values is None:
            return None
        inputs.append(values)
    if math.prod(len(v) for v in inputs) > MAX_INPUTS:
        return None
    names = {sql: f"__c{i}" for i, sql in enumerate(columns)}

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.sql() in names:
            return exp.column(names[node.sql()])
        return node

    body = exp.Try(this=expr.copy().transform(rename))
    sources = [f"__in{i}" for i in range(len(inputs))]
    sql = (f"SELECT DISTINCT {body.sql(dialect='duckdb')} AS v FROM "
           + " CROSS JOIN ".join(sources))
    with scratch() as con:
        try:
            for i, values in enumerate(inputs):
                con.register(sources[i], pa.table({f"__c{i}": list(values)}))
            rows = con.execute(sql).fetchall()
        except (duckdb.Error, pa.ArrowException):
            return None  # not evaluable here: the keys come from the data instead
    if len(rows) > MAX_VALUES:
        return None
    values = [r[0] for r in rows]
    known = sorted((v for v in values if v is not None), key=lambda v: (str(type(v)), v))
    return tuple(known) + ((None,) if None in values else ())
