"""Values the owner says lie within their bounds, checked on the data: the clamp of a
summed value is left out where it would keep every value as it is.

A sum clamps each row's value into the bounds its sensitivity was derived from
(:mod:`dpsql.rewrite.clamp_values`, :mod:`dpsql.decimal_sums`). On a table whose values
all lie inside, the clamp changes nothing and only costs time: ``segment_balance`` (TPC-H
``customer`` alone, ``AVG(c_acctbal)`` by segment) spent 0.15 of its 0.82 ms there at
sf 0.1 and 0.5 of 1.7 ms at sf 1, against a plain query of 0.64 and 1.09 ms. The owner
says so in the catalog (``in_bounds: true`` beside ``lower`` and ``upper``); dpsql does
not take the owner's word for it:

* **The check.** Before the charge, one query over the table counts the rows on which
  the clamped value and the value without the clamp differ (``IS DISTINCT FROM``), both
  built by the statistic's own rule exactly as the rewrite writes them
  (:func:`summands`), centre and casts included, over the table's own columns
  (:mod:`dpsql.frozen_facts`: frozen data, base tables, remembered per backend). A
  value the clamp would move, a NULL it would turn into a bound, a NaN, an error: each
  fails the check, and the clamp stays. The statistic is *proven* when the count is 0.
* **Which sums.** A ``sum`` statistic (SUM, and AVG's centred sum; not VARIANCE's
  squares) whose per-row value reads only columns declared ``in_bounds``, all of one
  source: a private or public catalog table read as the FROM table or an INNER join,
  never a derived table, a hidden path join or a null-supplied side. And a value built
  only from columns, literals, casts and arithmetic (:data:`_PURE`): a function of the
  row's own values, the same in the check and in any query, with no clock, no
  randomness, no subquery.

So every row the query sums carries, in those columns, the values of one of the table's
own rows, on which the check found the clamp to change nothing; the value is the same
function of them, so the clamp changes no summand of the query either, and removing it
changes no row: the per-user partials, their clamps (which stay, and still bound each
user), the L0 step and the answer's size are those of the query with it.

**Nothing the analyst sees depends on the check**, as with :mod:`dpsql.values_only`:
the plan keeps its statistics as they were (``in_bounds`` only on the plan that runs),
so the noise, notes, ``Result.sql`` and ``explain()`` are those of the query with the
clamp. A false declaration keeps the clamp and goes to the owner's log and ``dpsql
catalog validate -d``. What is left is time, as there: dpsql's model does not cover it,
and with the declaration the columns whose check could show in it are the ones the owner
named.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from dpsql.analyze.plan import Plan, Statistic
from dpsql.frozen_facts import every_row
from dpsql.sqlbuild import number

#: The nodes a checked value may hold: the row's own columns, literals, casts and
#: arithmetic, each a function of its operands alone (``TRY_CAST`` and DECIMAL casts are
#: what the rewrite itself adds).
_PURE = (exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Paren,
         exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Cast, exp.TryCast, exp.DataType,
         exp.DataTypeParam, exp.Coalesce, exp.Greatest, exp.Least, exp.Case, exp.If,
         exp.Is, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not)


def stats_in_bounds(plan: Plan, backend) -> frozenset[str]:
    """The names of ``plan.stats`` whose clamp the data proves needless (module
    docstring); checks, one query per table, what the backend has not checked yet."""
    by_table: dict[str, list[tuple[str, exp.Expression, str]]] = {}
    for stat in plan.stats:
        table = _declared(plan, stat)
        condition = table and same_summand(plan, stat)
        if condition is not None:
            by_table.setdefault(table, []).append(
                (stat.name, condition, f"in_bounds: {stat.label} over {table}"))
    out = set()
    for table, items in by_table.items():
        facts = every_row(backend, table, [c for _, c, _ in items], [w for _, _, w in items],
                          "the clamp of that value")
        out |= {name for (name, _, _), fact in zip(items, facts, strict=True) if fact}
    return frozenset(out)


def summands(plan: Plan, stat: Statistic) -> tuple[exp.Expression, exp.Expression]:
    """The per-row value ``stat`` adds up, clamped and not, as its rule writes it.

    >>> from dpsql.engine import _demo_plan
    >>> plan = _demo_plan("SELECT SUM(income) FROM pums")
    >>> [s.sql() for s in summands(plan, plan.stats[0])]
    ['LEAST(GREATEST(income, 0), 500000)', 'income']
    """
    out = []
    for one in (stat, replace(stat, in_bounds=True)):
        aggregate = one.rule.aggregate(one, plan)
        one.rule.clamp(one, aggregate)
        out.append(aggregate.this)
    return out[0], out[1]


def same_summand(plan: Plan, stat: Statistic) -> exp.Expression | None:
    """The condition that the clamp keeps a row's value (over the table's own columns,
    quoted), or None where the rule writes no clamp to leave out."""
    clamped, bare = summands(plan, stat)
    if clamped == bare:
        return None
    condition = exp.NullSafeEQ(this=clamped, expression=bare)
    return condition.transform(
        lambda n: exp.column(n.name, quoted=True) if isinstance(n, exp.Column) else n)


def _declared(plan: Plan, stat: Statistic) -> str | None:
    """The table whose ``in_bounds`` columns are all a sum's value reads, through one
    FROM or INNER source (module docstring); None where there is none."""
    if stat.kind != "sum" or stat.in_bounds or stat.arg is None or stat.interval is None:
        return None
    if any(not isinstance(n, _PURE) for n in stat.arg.walk()):
        return None
    columns = list(stat.arg.find_all(exp.Column))
    aliases = {c.table for c in columns}
    if not columns or len(aliases) != 1 or any(c.args.get("db") or c.args.get("catalog")
                                               for c in columns):
        return None
    alias = aliases.pop()
    # an unqualified name is the one source's only where there is one source
    source = next((s for s in plan.scope.sources if s.alias == alias), None) if alias \
        else plan.scope.sources[0] if plan.scope.single else None
    if source is None or source.derived is not None or source.hidden \
            or source.kind not in ("from", "inner") or source.table.derived:
        return None
    table = source.table
    if not all(table.has_column(c.name) and table.column(c.name).in_bounds for c in columns):
        return None
    return table.name


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
    columns = [c for c in table.columns.values() if c.in_bounds]
    probe = exp.select(exp.Count(this=exp.Star())).from_(
        exp.Table(this=exp.to_identifier(table.name, quoted=True)))
    if not columns or backend.frozen_row(probe) is None:
        return None
    facts = every_row(backend, table.name, [_within(c) for c in columns],
                      [f"in_bounds: {table.name}.{c.name} within its bounds" for c in columns],
                      "the clamp of sums of that column")
    return {c.name: fact for c, fact in zip(columns, facts, strict=True)}


def _within(column) -> exp.Expression:
    """``c BETWEEN lower AND upper`` over the table's own column (NULL inside only where
    the column is nullable)."""
    name = exp.column(column.name, quoted=True)
    inside = exp.Between(this=name, low=number(column.lower), high=number(column.upper))
    if not column.nullable:
        return inside
    return exp.func("COALESCE", inside, exp.Is(this=name.copy(), expression=exp.Null()))
