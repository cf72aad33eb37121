"""The query's aggregates as cells and the noisy statistics behind them.

:class:`_Analysis` collects them while the query's expressions are rewritten over key
and cell columns (:meth:`_Analysis.post_expr`).
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from dpsql.aggregates import family_for, statistic_rule
from dpsql.aggregates.count import never_null
from dpsql.aggregates.quantile import within_group
from dpsql.analyze import sensitivity
from dpsql.analyze.bounds import MAX_MAGNITUDE, Interval, bounds
from dpsql.analyze.domains import domain
from dpsql.analyze.names import SHADOWS, alias_target
from dpsql.analyze.outputs import OutputNames
from dpsql.analyze.plan import Cell, GroupKey, Statistic
from dpsql.analyze.scope import Scope
from dpsql.errors import UnsupportedQueryError
from dpsql.limits import DEFAULT as DEFAULT_LIMITS
from dpsql.limits import Limits
from dpsql.validate import AGGREGATES

#: ``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x)`` as ``PERCENTILE_CONT(x, q)`` (the
#: quantile family's, :func:`dpsql.aggregates.quantile.within_group`)
_within_group = within_group

class _Analysis:
    """Collects statistics and cells while the query's expressions are rewritten."""

    def __init__(self, scope: Scope, max_rows: int, one_row: bool = False,
                 limits: Limits = DEFAULT_LIMITS):
        #: the owner's resource limits
        self.limits = limits
        #: one running total of in-process image work for all the query's keys
        #: (:func:`dpsql.analyze.domains.domain`, then the WHERE restriction)
        self.domain_work = [0]
        self.scope = scope
        self.table = scope.primary
        self.R = max_rows
        self.one_row = one_row
        self.stats: list[Statistic] = []
        self._by_key: dict[tuple, Statistic] = {}
        self.cells: list[Cell] = []
        self._cell_by_sql: dict[str, Cell] = {}

    def stat(self, kind: str, arg: exp.Expression | None, interval: Interval | None,
             center: float = 0, centred: bool = False) -> Statistic:
        """The statistic of that kind (:mod:`dpsql.aggregates`), added once per query;
        ``centred`` for AVG's and VARIANCE's sums (:attr:`Statistic.centred`)."""
        rule = statistic_rule(kind)
        candidate = Statistic(
            name=rule.fixed_name
            or f"__s{sum(1 for s in self.stats if not s.rule.fixed_name)}",
            kind=kind,
            arg=arg,
            interval=interval,
            center=center,
            centred=centred,
            integer=rule.integer(interval, centred, self.one_row),
            nullable=arg is not None and not never_null(arg, self.scope.column),
            bins=rule.bins(interval),
        )
        key = candidate.key()
        if key in self._by_key:
            return self._by_key[key]
        limits = self.limits
        if len(self.stats) >= limits.max_statistics:
            raise UnsupportedQueryError(
                f"the query needs more than {limits.max_statistics} noisy statistics "
                "(max_statistics); split it")
        rule.check(self.stats, candidate, limits, MAX_MAGNITUDE)
        self._by_key[key] = candidate
        candidate.linf = sensitivity.linf(kind, rule.values_interval(candidate), self.R)
        self.stats.append(candidate)
        return candidate

    def group_keys(self, select: exp.Select) -> list[GroupKey]:
        group = select.args.get("group")
        if not group:
            return []
        if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
            raise UnsupportedQueryError("ROLLUP, CUBE and GROUPING SETS are not supported")
        keys: list[GroupKey] = []
        for item in group.expressions:
            expr = item
            if isinstance(item, exp.Literal) and item.is_int:
                pos = int(item.this)
                if not 1 <= pos <= len(select.expressions):
                    raise UnsupportedQueryError(f"GROUP BY position {pos} is out of range")
                expr = select.expressions[pos - 1]
                expr = expr.this if isinstance(expr, exp.Alias) else expr
            elif isinstance(item, exp.Column) and item.name.startswith("__alias:"):
                expr = alias_target(select, item.name.removeprefix("__alias:"))
            if any(expr.find_all(*AGGREGATES)):
                raise UnsupportedQueryError("aggregates are not allowed in GROUP BY")
            if any(expr.find_all(exp.Pow)):
                raise UnsupportedQueryError(
                    "POWER() is supported over aggregates and group keys, not in a group "
                    "key (group by its argument)")
            if not any(expr.find_all(exp.Column)):
                raise UnsupportedQueryError(
                    f"GROUP BY {expr.sql(dialect='duckdb')} groups by a constant"
                )
            if any(k.expr == expr for k in keys):
                continue
            keys.append(GroupKey(f"__k{len(keys)}", expr.copy(), self._domain(expr)))
        return keys

    def _domain(self, expr: exp.Expression) -> tuple | None:
        left = {s.alias for s in self.scope.sources if s.kind == "left"}

        def lookup(col: exp.Column):
            # a column a LEFT JOIN may NULL-extend can be NULL whatever the catalog
            # says: its domain gets the NULL (a key over it, COALESCE(v.b, 0), takes
            # that row's value too), or the NULL-extended rows' group would be lost
            entry = self.scope.column(col)
            if left and not entry.nullable and (
                    col.table in left or all(s.alias != col.table
                                             for s in self.scope.sources)):
                return dataclasses.replace(entry, nullable=True)
            return entry
        return domain(expr, lookup, self.limits, self.domain_work)

    def post_expr(self, e: exp.Expression, keys: list[GroupKey], where: str,
                  aliases: OutputNames | None = None) -> exp.Expression:
        """Replaces aggregates by cell columns and group keys by key columns.

        Names follow DuckDB's binder (post-processing runs there; the cases are tested
        against DuckDB's own answers in ``tests/test_spellings.py``). In HAVING, a column
        whose name is also an output name is that output (``HAVING income > ...`` with
        ``SUM(income) AS income``) unless the column by itself is a group key: this is
        decided column by column, before expressions are matched to group keys (with
        ``SUM(age) AS age ... GROUP BY age // 10``, DuckDB reads ``HAVING age // 10 >
        3`` as ``SUM(age) // 10 > 3``). Then, top-down, an expression equal to a group
        key is that key. In ORDER BY only a bare name prefers the output (handled by
        the caller); nested in an expression the input column wins, and an ungrouped
        one is refused, as DuckDB refuses it.
        """
        e = e.copy()
        if where == "HAVING" and aliases is not None:
            for col in list(e.find_all(exp.Column)):
                name = col.meta.get(SHADOWS)
                if name is not None and not any(col == k.expr for k in keys):
                    output = aliases.get(name, where)
                    e = output if col is e else e
                    col.replace(output)

        def replace(node: exp.Expression) -> exp.Expression:
            if isinstance(node, AGGREGATES):
                return exp.column(self._cell(node).name)
            for k in keys:
                if node == k.expr:
                    return exp.column(k.name)
            if (isinstance(node, exp.Column) and aliases is not None
                    and node.name.startswith("__alias:")):
                return aliases.get(node.name.removeprefix("__alias:"), where)
            return node

        out = e.transform(replace)
        for col in out.find_all(exp.Column):
            if not col.name.startswith(("__k", "__a")):
                name = col.name.removeprefix("__alias:")
                raise UnsupportedQueryError(
                    f"column {name!r} in {where} must appear in GROUP BY or inside an "
                    "aggregate: only aggregates over groups can be released"
                )
        return out

    def cells_in(self, e: exp.Expression) -> tuple[str, ...]:
        names = []
        for col in e.find_all(exp.Column):
            if col.name.startswith("__a") and col.name not in names:
                names.append(col.name)
        return tuple(names)

    def _cell(self, agg: exp.Expression) -> Cell:
        key = agg.sql()
        if key in self._cell_by_sql:
            return self._cell_by_sql[key]
        arg = agg.this
        if isinstance(arg, exp.Distinct) and not isinstance(agg, exp.Count):
            raise UnsupportedQueryError(
                f"{agg.key.upper()}(DISTINCT ...) is not supported yet"
            )
        if any(arg.find_all(*AGGREGATES)):
            raise UnsupportedQueryError("aggregates inside aggregates are not allowed")
        # the aggregate's family says which statistics it needs (dpsql.aggregates)
        cell = Cell(f"__a{len(self.cells)}", agg, **family_for(agg).cell(self, agg))
        self.cells.append(cell)
        self._cell_by_sql[key] = cell
        return cell

    def interval(self, arg: exp.Expression) -> Interval:
        """The bounds of an aggregate's argument, from the catalog."""
        return bounds(arg, self.scope.column)
