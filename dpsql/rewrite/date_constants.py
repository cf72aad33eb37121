"""Pass: a date column compared with constant date arithmetic is compared with its date.

``l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR`` (TPC-H's way of writing a date
range) becomes ``l_shipdate < DATE '1995-01-01'``.

Why: on DuckDB, PostgreSQL and Spark, ``DATE + INTERVAL`` is a TIMESTAMP, so the column
is cast to TIMESTAMP on every row to be compared. That cast fails for a date beyond
TIMESTAMP's range (DuckDB: years past 294246), so the backend's totality guard wraps the
comparison in ``TRY`` (:mod:`dpsql.backends.total`), which keeps DuckDB from pushing the
filter into the scan: TPC-H q6 ran about 8% slower at sf 1 with it. Compared with a DATE,
the column needs no cast and no guard.

Why the two mean the same. The constant is ``D ± n UNIT`` with ``D`` a date literal,
``n`` a whole number and ``UNIT`` one of DAY, WEEK, MONTH, YEAR, so its TIMESTAMP is
midnight of the day ``D'`` computed here; for MONTH and YEAR only when ``D``'s day of
the month is at most 28, where no engine has a month end to clamp (January 31 plus one
month is February 29 on DuckDB and PostgreSQL; this pass leaves such a constant alone).
Casting a date ``d`` to TIMESTAMP gives midnight of ``d``, and midnights are ordered as
their days, so ``d op midnight(D')`` and ``d op D'`` agree for every comparison ``op``
(=, <>, <, <=, >, >=) and BETWEEN, on every date the cast accepts. A date the cast
refuses made the guarded comparison NULL (the row left out); compared with ``D'`` it
gets its true answer instead. Only columns the catalog types as DATE are rewritten (a
string column compared with a DATE would be cast differently), and only in the
statistics query's own WHERE and join conditions, where the plan's scope names each
column's table. A TIMESTAMP column is left alone: it is not cast (``DATE + INTERVAL`` is
already a TIMESTAMP), so there is nothing to gain, and SQLite, which keeps timestamps as
text, compares ``'1994-01-10 00:00:00'`` with the date text ``'1994-01-10'`` as longer,
so a midnight and its day would not compare alike there.

The pass never changes what is released or charged: it rewrites a row condition into
one with the same truth on every row the original could evaluate, and the result still
goes through the backend's own typing and guards, which see a DATE compared with a date
constant.

>>> from dpsql.engine import _demo_plan
>>> from dpsql.rewrite.statistics_query import statistics_query
>>> plan = _demo_plan("SELECT COUNT(*) FROM orders WHERE o_orderdate < "
...                   "DATE '1994-01-01' + INTERVAL '3' MONTH", catalog="tpch")
>>> date_constants(statistics_query(plan), plan).sql()
"SELECT COUNT(*) AS __s0 FROM orders WHERE o_orderdate < CAST('1994-04-01' AS DATE)"
"""

from __future__ import annotations

import datetime

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.errors import DpsqlError
from dpsql.rewrite._sql import constant

#: Comparisons whose truth on dates and on their midnights is the same.
_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
#: Catalog types rewritten (see the module docstring on TIMESTAMP).
_TEMPORAL = ("date",)
_DAYS = {"DAY": 1, "DAYS": 1, "WEEK": 7, "WEEKS": 7}
_MONTHS = {"MONTH": 1, "MONTHS": 1, "YEAR": 12, "YEARS": 12}


def date_constants(expression: exp.Select, plan: Plan) -> exp.Select:
    """Replaces ``D ± INTERVAL 'n' UNIT`` compared with a date column of the statistics
    query's own scope by the date it stands for (module docstring)."""
    for node in list(expression.find_all(*_COMPARISONS, exp.Between)):
        if node.find_ancestor(exp.Select) is not expression:
            continue  # a derived table's condition: its columns are not the plan scope's
        if isinstance(node, exp.Between):
            columns, constants = [node.this], ["low", "high"]
        else:
            columns, constants = [node.this, node.expression], ["this", "expression"]
        if not any(_date_column(c, plan) for c in columns):
            continue
        for arg in constants:
            day = _date_of(node.args.get(arg))
            if day is not None:
                node.set(arg, constant(day))
    return expression


def _date_column(node: exp.Expression, plan: Plan) -> bool:
    """Whether ``node`` is a column of a catalog table the catalog types DATE."""
    if not isinstance(node, exp.Column):
        return False
    scope = plan.scope
    if node.table:
        source = next((s for s in scope.sources if s.alias == node.table), None)
        if source is None or source.derived is not None or source.inner is not None:
            return False
    elif not scope.single:
        return False
    try:
        return scope.column_type(node) in _TEMPORAL
    except (DpsqlError, KeyError, AttributeError, IndexError):
        return False


def _date_of(node: exp.Expression | None) -> datetime.date | None:
    """The day of ``DATE 'x' ± INTERVAL 'n' UNIT`` (either order for +), or None."""
    if not isinstance(node, exp.Add | exp.Sub):
        return None
    left, right = node.this, node.expression
    if isinstance(node, exp.Add) and isinstance(left, exp.Interval):
        left, right = right, left
    day, step = _date_literal(left), _interval(right)
    if day is None or step is None:
        return None
    count, unit = step
    if isinstance(node, exp.Sub):
        count = -count
    try:
        if unit in _DAYS:
            return day + datetime.timedelta(days=count * _DAYS[unit])
        if day.day > 28:  # a month end to clamp: engines may differ, left alone
            return None
        months = day.year * 12 + day.month - 1 + count * _MONTHS[unit]
        return datetime.date(months // 12, months % 12 + 1, day.day)
    except (OverflowError, ValueError):  # outside years 1..9999: left alone
        return None


def _date_literal(node: exp.Expression) -> datetime.date | None:
    """The date of ``CAST('YYYY-MM-DD' AS DATE)`` (how ``DATE 'YYYY-MM-DD'`` parses)."""
    if not (isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DATE)
            and isinstance(node.this, exp.Literal) and node.this.is_string):
        return None
    text = node.this.this
    if len(text) != 10 or text[4] != "-" or text[7] != "-":
        return None
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        return None


def _interval(node: exp.Expression) -> tuple[int, str] | None:
    """``(n, UNIT)`` of ``INTERVAL 'n' UNIT`` / ``INTERVAL n UNIT`` with a whole ``n``."""
    if not isinstance(node, exp.Interval) or not isinstance(node.this, exp.Literal):
        return None
    unit = node.args.get("unit")
    name = unit.name.upper() if isinstance(unit, exp.Var) else None
    if name not in _DAYS and name not in _MONTHS:
        return None
    text = node.this.this.strip()
    if not text.isdigit() or len(text) > 6:
        return None
    return int(text), name
