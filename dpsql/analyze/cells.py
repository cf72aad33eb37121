"""The query's aggregates as cells and the noisy statistics behind them.

:class:`_Analysis` collects them while the query's expressions are rewritten over key
and cell columns (:meth:`_Analysis.post_expr`).
"""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal

from sqlglot import exp

from dpsql.analyze import sensitivity
from dpsql.analyze.bounds import MAX_MAGNITUDE, Interval, bounds
from dpsql.analyze.domains import domain
from dpsql.analyze.names import SHADOWS, alias_target
from dpsql.analyze.outputs import OutputNames
from dpsql.analyze.plan import Cell, GroupKey, Statistic
from dpsql.analyze.scope import Scope
from dpsql.errors import UnboundedExpressionError, UnsupportedQueryError
from dpsql.limits import DEFAULT as DEFAULT_LIMITS
from dpsql.limits import Limits
from dpsql.mechanisms.quantile import Bins
from dpsql.validate import AGGREGATES, QUANTILES

_VARIANCES = (exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevSamp, exp.StddevPop)


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
             center: float = 0) -> Statistic:
        candidate = Statistic(
            name="__users" if kind == "users"
            else f"__s{sum(1 for s in self.stats if s.kind != 'users')}",
            kind=kind,
            arg=arg,
            interval=interval,
            center=center,
            # AVG's and VARIANCE's sums and histograms are rescaled per user (see
            # per_user_aggregate): fractional, so they take the grid mechanism
            integer=kind in ("count", "users", "distinct") or (
                kind == "sum" and not center and interval.integer) or (
                kind == "hist" and self.one_row),
            nullable=arg is not None and not self._never_null(arg),
            bins=Bins.for_interval(interval.lower, interval.upper, interval.integer)
            if kind == "hist" else None,
        )
        key = candidate.key()
        if key in self._by_key:
            return self._by_key[key]
        limits = self.limits
        if len(self.stats) >= limits.max_statistics:
            raise UnsupportedQueryError(
                f"the query needs more than {limits.max_statistics} noisy statistics "
                "(max_statistics); split it")
        if kind == "hist" and sum(s.kind == "hist" for s in self.stats) >= limits.max_quantiles:
            # each is a histogram of up to 64 noisy bins, i.e. 64 columns to rewrite,
            # compute and noise: refused here, before any of that is built
            raise UnsupportedQueryError(
                f"the query asks quantiles (MEDIAN, PERCENTILE_CONT, MIN, MAX...) of more "
                f"than {limits.max_quantiles} different expressions (max_quantiles); "
                "quantiles of the same expression cost one")
        if kind == "hist":
            # the rewrite writes the argument out about twice per bin (up to 64 bins):
            # counted here, so a long argument cannot become megabytes of SQL
            copies = sum(s.width * sum(1 for _ in s.arg.walk())
                         for s in self.stats if s.kind == "hist")
            copies += candidate.width * sum(1 for _ in arg.walk())
            if 2 * copies > 2 * limits.max_nodes:
                raise UnsupportedQueryError(
                    f"the quantiles' arguments, written out once per histogram bin, would "
                    f"exceed {2 * limits.max_nodes} syntax nodes (twice max_nodes); "
                    "shorten the arguments or ask fewer quantiles")
        self._by_key[key] = candidate
        if kind in ("sum", "sumsq"):
            shifted = Interval(interval.lower - center, interval.upper - center, candidate.integer)
            if kind == "sumsq" and shifted.magnitude > math.sqrt(MAX_MAGNITUDE):
                # the squares' bound would overflow the noise scale (a float OverflowError)
                raise UnboundedExpressionError(
                    f"the centred bounds of {arg.sql(dialect='duckdb')[:80]!r} reach "
                    f"{shifted.magnitude:.3g}; VARIANCE and STDDEV square them, so dpsql "
                    f"takes them up to {math.sqrt(MAX_MAGNITUDE):g}")
            candidate.linf = sensitivity.linf(kind, shifted, self.R)
        else:
            candidate.linf = sensitivity.linf(kind, None, self.R)
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
        name = f"__a{len(self.cells)}"
        if isinstance(agg, exp.Count):
            cell = Cell(name, agg, "stat", (self._count(arg).name,))
        elif isinstance(agg, exp.Sum):
            interval = bounds(arg, self.scope.column)
            cell = Cell(name, agg, "stat", (self.stat("sum", arg, interval).name,))
        elif isinstance(agg, QUANTILES):
            arg, q = _quantile_parts(agg)
            interval = bounds(arg, self.scope.column)
            hist = self.stat("hist", arg, interval)
            cell = Cell(name, agg, "quantile", (hist.name,), 0, interval.lower,
                        interval.upper, q)
        elif isinstance(agg, _VARIANCES):
            # VAR = SUM((x-m)²)/N − (SUM(x-m)/N)², from three noisy statistics
            interval = bounds(arg, self.scope.column)
            center = sensitivity.normalised_center(interval)
            squares = self.stat("sumsq", arg, interval, center)
            total = self.stat("sum", arg, interval, center)
            count = self._count(arg)
            kind = {exp.VariancePop: "var_pop", exp.StddevPop: "std_pop",
                    exp.Variance: "var_samp", exp.Stddev: "std_samp",
                    exp.StddevSamp: "std_samp"}[type(agg)]
            cell = Cell(name, agg, kind, (squares.name, total.name, count.name), center,
                        interval.lower, interval.upper)
        else:  # AVG = m + SUM(x - m) / COUNT(x), both noised, m the bounds' midpoint
            interval = bounds(arg, self.scope.column)
            center = sensitivity.normalised_center(interval)
            total = self.stat("sum", arg, interval, center)
            count = self._count(arg)
            cell = Cell(name, agg, "avg", (total.name, count.name), center,
                        interval.lower, interval.upper)
        self.cells.append(cell)
        self._cell_by_sql[key] = cell
        return cell

    def _count(self, arg: exp.Expression) -> Statistic:
        if isinstance(arg, exp.Star):
            return self.stat("count", None, None)
        if isinstance(arg, exp.Distinct):
            cols = arg.expressions
            if len(cols) == 1 and self.scope.is_uid(cols[0]):
                return self.stat("users", None, None)
            if len(cols) != 1:
                raise UnsupportedQueryError(
                    "COUNT(DISTINCT ...) takes one expression; combine columns with ||")
            if any(cols[0].find_all(*AGGREGATES)):
                raise UnsupportedQueryError("aggregates inside aggregates are not allowed")
            # each user adds at most R distinct values per group (count_distinct_values)
            return self.stat("distinct", cols[0], None)
        if self._never_null(arg):
            return self.stat("count", None, None)
        return self.stat("count", arg, None)

    def _never_null(self, e: exp.Expression) -> bool:
        if isinstance(e, exp.Literal):
            return True
        if isinstance(e, exp.Column):
            return not self.scope.column(e).nullable
        if isinstance(e, exp.Paren | exp.Neg | exp.Abs):
            return self._never_null(e.this)
        if isinstance(e, exp.Add | exp.Sub | exp.Mul):
            return self._never_null(e.this) and self._never_null(e.expression)
        return False



def _within_group(node: exp.Expression) -> exp.Expression:
    """``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x [DESC])`` as ``PERCENTILE_CONT(x, q)``.

    >>> from sqlglot import parse_one
    >>> e = parse_one("SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY x DESC) FROM t")
    >>> e.transform(_within_group).sql()
    'SELECT PERCENTILE_CONT(x, 0.1) FROM t'
    """
    if not isinstance(node, exp.WithinGroup):
        return node
    order = node.expression
    if not isinstance(order, exp.Order) or len(order.expressions) != 1:
        raise UnsupportedQueryError("WITHIN GROUP needs exactly one ORDER BY expression")
    ordered = order.expressions[0]
    _quantile_literal(node.this.this, node.this.sql_name())  # refuses a bad one
    literal = node.this.this.copy()
    if ordered.args.get("desc"):  # exact decimal arithmetic: 1 - 0.9 is 0.1
        literal = exp.Literal.number(str(1 - Decimal(literal.this)))
    return type(node.this)(this=ordered.this.copy(), expression=literal)


def _quantile_parts(agg: exp.Expression) -> tuple[exp.Expression, float]:
    """The aggregated expression and the quantile ``q`` of a quantile aggregate."""
    if isinstance(agg, exp.Min | exp.Max):
        if agg.expressions:
            raise UnsupportedQueryError(f"{agg.sql_name()} takes one argument")
        return agg.this, 0.0 if isinstance(agg, exp.Min) else 1.0
    if isinstance(agg, exp.Median):
        return agg.this, 0.5
    literal = agg.args.get("quantile") if isinstance(
        agg, exp.Quantile | exp.ApproxQuantile) else agg.args.get("expression")
    if literal is None:
        raise UnsupportedQueryError(f"{agg.sql_name()} needs a quantile, e.g. 0.5")
    return agg.this, _quantile_literal(literal, agg.sql_name())


def _quantile_literal(e: exp.Expression, name: str) -> float:
    if isinstance(e, exp.Literal) and not e.is_string:
        q = float(e.this)
        if 0 <= q <= 1:
            return q
    raise UnsupportedQueryError(
        f"{name} needs one quantile given as a number literal between 0 and 1, "
        f"not {e.sql(dialect='duckdb')[:40]}")
