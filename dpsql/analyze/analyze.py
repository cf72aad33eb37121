"""Analyze stage: a validated SELECT plus the catalog become a :class:`Plan`.

The analysis resolves names against the catalog, turns every aggregate into the noisy
per-group statistics it needs (deduplicated, so ``COUNT(*)`` and the count inside
``AVG(x)`` are noised once), derives value bounds and sensitivities, decides how group
keys are released (public domain or partition selection), and splits the query's
(ε, δ) across all its noisy statistics and its partition selection.

Budget split: a query asked at ε spends exactly ε. With ``n`` noisy statistics and,
when keys come from the data, one partition selection, each gets ``ε / (n + 1)`` (or
``ε / n``); partition selection gets all of δ. A bias check (``bias_check``, see
:mod:`dpsql.bias`) is one more part: ``ε / (n + 2)`` (or ``ε / (n + 1)``) each. By
basic composition the whole release is (ε, δ)-DP. A ``COUNT(DISTINCT <user key>)``
under partition selection reuses the selection's noisy user count, so it costs nothing
extra.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Callable

from sqlglot import exp

from dpsql.aggregates import family_for, statistic_rule
from dpsql.aggregates.count import never_null
from dpsql.aggregates.quantile import within_group as _within_group
from dpsql.analyze import sensitivity
from dpsql.analyze.bounds import MAX_MAGNITUDE, Interval, bounds
from dpsql.analyze.comparisons import check_comparisons
from dpsql.analyze.derived import inline_ctes, inline_row_derived
from dpsql.analyze.determined import determined_columns, key_is_determined
from dpsql.analyze.domains import (
    Combinations,
    check_value_lengths,
    domain,
    released_groups,
)
from dpsql.analyze.plan import Cell, GroupKey, Output, Plan, Statistic
from dpsql.analyze.scope import Scope, build_scope
from dpsql.bias import BiasCheck, bound_notes, calibrate, capped_value_notes
from dpsql.catalog import Catalog
from dpsql.errors import (
    PrivacyParameterError,
    UnknownColumnError,
    UnsupportedQueryError,
)
from dpsql.limits import DEFAULT as DEFAULT_LIMITS
from dpsql.limits import Limits
from dpsql.mechanisms import Constant, LaplaceThreshold, laplace
from dpsql.mechanisms.gaussian import gaussian, rho_for
from dpsql.validate import AGGREGATES

#: Largest LIMIT/OFFSET (a signed 64-bit integer on every engine).
MAX_LIMIT = 2**63 - 1

#: Most noisy statistics in one query, by default (the owner's ``max_statistics``).
MAX_STATISTICS = DEFAULT_LIMITS.max_statistics

#: Most group keys released from public domains in one query, by default (the owner's
#: ``max_domain_cells``).
MAX_DOMAIN_CELLS = DEFAULT_LIMITS.max_domain_cells

_INTERVAL_FUNCS = (exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Round,
                   exp.Floor, exp.Ceil, exp.Cast, exp.TryCast, exp.Abs, exp.Least,
                   exp.Greatest, exp.Literal, exp.Column, exp.DataType, exp.Identifier,
                   exp.DataTypeParam, exp.Pow, exp.Sqrt, exp.Exp, exp.Ln)

#: ``meta`` key of an input column in HAVING or ORDER BY whose name is also an output
#: name: which of the two SQL means is decided once the group keys are known
#: (:meth:`_Analysis.post_expr` and the ORDER BY loop of :func:`analyze`).
SHADOWS = "dpsql_shadows_output"


def analyze(
    select: exp.Select,
    catalog: Catalog,
    epsilon: float,
    delta: float = 0.0,
    max_groups: int | None = None,
    max_rows: int | None = None,
    seed: int | None = None,
    mechanism: str = "laplace",
    unique: Callable[[str, str], bool] | None = None,
    bias_check: bool = False,
) -> Plan:
    """Builds the plan of one validated SELECT.

    Args:
        select: output of :func:`dpsql.validate.validate`.
        catalog: the data owner's catalog.
        epsilon: the query's total ε (> 0).
        delta: the query's total δ (0 <= δ < 1); needed when keys come from the data.
        max_groups: per-query override of the table's ``max_groups``.
        max_rows: per-query override of the table's ``max_rows``.
        seed: seed of the L0 sampling order (tests); random by default.
        mechanism: ``laplace`` (pure ε-DP statistics) or ``gaussian`` (zCDP; needs δ).
        unique: ``unique(table, column)`` tells whether the *database* guarantees the
            column unique (a PRIMARY KEY or UNIQUE constraint). When it does for the user
            key of a single-table query, each user has exactly one row; in joins it
            tells which group keys the user determines (:mod:`dpsql.analyze.determined`).
        bias_check: also measure, with DP and one more share of the budget, how many
            users the contribution bounds cut (:mod:`dpsql.bias`).

    Raises:
        UnknownTableError, UnknownColumnError, UnboundedExpressionError,
        UnsupportedQueryError, PrivacyParameterError.
    """
    epsilon, delta = _privacy_parameters(epsilon, delta)
    if mechanism not in ("laplace", "gaussian"):
        raise PrivacyParameterError(
            f"mechanism must be 'laplace' or 'gaussian', got {mechanism!r}")
    if mechanism == "gaussian" and delta <= 0:
        raise PrivacyParameterError("gaussian noise needs delta > 0 (e.g. delta=1e-6)")
    select = inline_ctes(select, catalog.limits.max_nodes).transform(_within_group)
    # derived tables that only filter and project rows: the same rows, written out
    select = inline_row_derived(select, catalog, catalog.limits.max_nodes)
    select = _check_in_subqueries(select, catalog)
    scope, select = build_scope(select, catalog, unique)
    table = scope.primary
    # joined private tables: the finest table's bounds (bounding is enforced either way,
    # so the choice trades bias for noise, never privacy)
    G = _positive_int(max_groups, "max_groups",
                      max(s.table.max_groups for s in scope.private))
    R = _positive_int(max_rows, "max_rows", max(s.table.max_rows for s in scope.private))
    one_row = table.row_privacy or (
        scope.single and isinstance(table.user_key, str) and unique is not None
        and not table.derived and scope.sources[0].derived is None
        and unique(table.name, table.user_key))
    if one_row:
        # each row is its own user (row privacy, or a user key the database keeps
        # unique): a user touches one group and adds one row to it, so the per-user
        # aggregate and the L0 bound are no-ops and are skipped
        G, R = 1, 1

    limit = select.args.get("limit")
    offset = select.args.get("offset")
    for clause, name in ((limit, "LIMIT"), (offset, "OFFSET")):
        if clause is not None and not (
            isinstance(clause.expression, exp.Literal) and clause.expression.is_int
        ):
            raise UnsupportedQueryError(f"{name} must be a whole number literal")
        # checked here, not left to the engine that runs the post-processing after the
        # charge (DuckDB 2.0.1 refuses LIMIT 2**63 only while running it)
        if clause is not None and not 0 <= int(clause.expression.this) <= MAX_LIMIT:
            raise UnsupportedQueryError(
                f"{name} must be between 0 and {MAX_LIMIT}, got "
                f"{clause.expression.this[:30]}")

    out_names = [_output_name(e) for e in select.expressions]
    select = _qualify(select, scope, set(out_names))
    check_comparisons(select, scope)  # a comparison that can never be true: refused free
    # constants that would grow past the limits while the backend folds them
    check_value_lengths(select, scope.column, catalog.limits)
    a = _Analysis(scope, R, bool(one_row))
    a.limits = catalog.limits

    where = select.args.get("where")
    where = where.this if where else None
    if where is not None and any(where.find_all(*AGGREGATES)):
        raise UnsupportedQueryError("aggregates are not allowed in WHERE; use HAVING")

    keys = a.group_keys(select)
    outputs = []
    for name, item in zip(out_names, select.expressions, strict=True):
        body = item.this if isinstance(item, exp.Alias) else item
        post = a.post_expr(body, keys, f"output column {name!r}")
        outputs.append(Output(name, post, a.cells_in(post)))
    _check_intervals(outputs)
    by_alias = _OutputNames(outputs)

    having = select.args.get("having")
    having = a.post_expr(having.this, keys, "HAVING", by_alias) if having else None
    order = select.args.get("order")
    if order is not None:
        order = order.copy()
        for ordered in order.expressions:
            if isinstance(ordered.this, exp.Literal) and not ordered.this.is_string:
                if not (ordered.this.is_int
                        and 1 <= int(ordered.this.this) <= len(select.expressions)):
                    raise UnsupportedQueryError(
                        f"ORDER BY position {ordered.this.this} is out of range: the "
                        f"query has {len(select.expressions)} output columns")
                continue
            shadowed = ordered.this.meta.get(SHADOWS) if isinstance(
                ordered.this, exp.Column) else None
            if shadowed is not None:
                # ORDER BY <name>: an output name wins over an input column (SQL's rule;
                # DuckDB's too, and post-processing runs in DuckDB)
                ordered.set("this", by_alias.get(shadowed, "ORDER BY"))
                continue
            ordered.set("this", a.post_expr(ordered.this, keys, "ORDER BY", by_alias))

    public = all(k.domain is not None for k in keys)
    if keys and not public:
        _check_user_keys(keys, scope)
    # WHERE and INNER JOIN conditions over keys restrict the released combinations
    groups = _restrict_domains(a, keys, where, scope) if keys and public else None
    domain_size = len(groups) if groups is not None else math.prod(
        len(k.domain) for k in keys if k.domain is not None)
    if public and domain_size > catalog.limits.max_domain_cells:
        raise UnsupportedQueryError(
            f"GROUP BY over public domains has {domain_size} key combinations; "
            f"the limit is {catalog.limits.max_domain_cells} (max_domain_cells)"
        )
    # every key a function of the user (see determined.py): one group per user
    single_group = bool(one_row)
    if keys and not one_row:
        found = determined_columns(scope, where, unique)
        single_group = all(key_is_determined(k.expr, scope, found) for k in keys)
    if not keys or single_group:
        G_eff, bound = 1, False
    elif public:
        # keys outside the domain are filtered out and only the domain's combinations
        # are released, so a user reaches at most that many released groups
        G_eff, bound = max(1, min(G, domain_size)), domain_size > G
    else:
        G_eff, bound = G, True

    stats = a.stats
    selection = None
    noised = [s for s in stats]
    if keys and not public:
        if delta <= 0:
            missing = ", ".join(k.expr.sql(dialect="duckdb") for k in keys if k.domain is None)
            raise PrivacyParameterError(
                f"GROUP BY {missing} has no public domain in the catalog, so its keys must "
                "pass partition selection, which needs delta > 0 (e.g. delta=1e-6)"
            )
        users = a.stat("users", None, None)
        noised = [s for s in stats if s is not users]
    for s in [s for s in noised if s.linf == 0]:
        # no user can change it (e.g. SUM(0)): released exactly, at no cost
        s.mechanism = Constant()
        noised.remove(s)
    selecting = bool(keys) and not public
    bias = None
    if bias_check:
        # nothing to cut without a per-user step (each user one row): free, no share
        bias = BiasCheck(groups=bound, free=table.row_privacy or bool(one_row)
                         or scope.uid is None
                         or (scope.single and scope.sources[0].per_user))
    shares = len(noised) + (1 if selecting else 0) + (1 if bias and not bias.free else 0)
    rho_total = None
    if mechanism == "laplace":
        share = epsilon / shares if shares else 0.0
        for s in noised:
            s.epsilon = share
            s.mechanism = laplace(s.linf, G_eff, share, s.integer, s.width)
        selection_eps, selection_delta = share, delta
        if bias is not None and not bias.free:
            calibrate(bias, share, None)
    else:
        # δ is split between partition selection and the zCDP conversion; ρ is the
        # largest whose conversion at that δ stays within ε, shared equally; the
        # selection's ε-DP part counts as ε²/2 of ρ
        selection_delta = delta / 2 if selecting else 0.0
        rho_total = rho_for(epsilon, delta - selection_delta) if shares else 0.0
        rho_share = rho_total / shares if shares else 0.0
        for s in noised:
            s.rho = rho_share
            s.mechanism = gaussian(s.linf, G_eff, rho_share, s.integer, s.width)
        selection_eps = math.sqrt(2 * rho_share)
        if bias is not None and not bias.free:
            calibrate(bias, None, rho_share)
    if selecting:
        selection = LaplaceThreshold(selection_eps, selection_delta, G_eff)
        users.epsilon = selection_eps
        users.mechanism = selection.noise

    plan = Plan(
        sql=select.sql(dialect="duckdb"),
        table=table,
        scope=scope,
        where=where,
        keys=keys,
        stats=stats,
        cells=a.cells,
        outputs=outputs,
        having=having,
        order=order,
        limit=limit.expression if limit else None,
        offset=offset.expression if offset else None,
        max_groups=G_eff,
        max_rows=R,
        bound_groups=bound,
        epsilon=epsilon,
        delta=delta if selection is not None or mechanism == "gaussian" else 0.0,
        selection=selection,
        seed=secrets.randbits(31) if seed is None else seed,
        mechanism=mechanism,
        rho=rho_total,
        one_row_per_user=bool(one_row),
        groups=groups,
        bias=bias,
    )
    _domain_notes(plan, scope, groups)
    if single_group and keys and not one_row and G > 1:
        plan.notes.append(
            "each user falls into one group (the group keys are determined by the user's "
            f"own row), so the noise is scaled for one group, not max_groups = {G}")
    if selection is not None and any(c.stats == ("__users",) for c in a.cells):
        plan.notes.append(
            "COUNT(DISTINCT) under partition selection is released only above the "
            f"threshold {selection.threshold}, so values near it are biased upward"
        )
    plan.notes += bound_notes(plan) + capped_value_notes(plan)
    if any(s.kind == "sum" for s in stats):
        plan.notes.append(
            "sums clamp each value to its bounds and each user's partial sum to "
            f"{R} row(s) worth; data outside the bounds biases them toward the bounds"
        )
    return plan


class _Analysis:
    """Collects statistics and cells while the query's expressions are rewritten."""

    #: the owner's resource limits (analyze() sets the catalog's)
    limits: Limits = DEFAULT_LIMITS

    def __init__(self, scope: Scope, max_rows: int, one_row: bool = False):
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
        """The statistic of that kind (:mod:`dpsql.aggregates`), added once per query."""
        rule = statistic_rule(kind)
        candidate = Statistic(
            name=rule.fixed_name
            or f"__s{sum(1 for s in self.stats if not s.rule.fixed_name)}",
            kind=kind,
            arg=arg,
            interval=interval,
            center=center,
            integer=rule.integer(interval, center, self.one_row),
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
                expr = _alias_target(select, item.name.removeprefix("__alias:"))
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
        # one running total of in-process image work for all the query's keys
        work = self.__dict__.setdefault("domain_work", [0])
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
        return domain(expr, lookup, self.limits, work)

    def post_expr(self, e: exp.Expression, keys: list[GroupKey], where: str,
                  aliases: _OutputNames | None = None) -> exp.Expression:
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
        cell = Cell(f"__a{len(self.cells)}", agg, **family_for(agg).cell(self, agg))
        self.cells.append(cell)
        self._cell_by_sql[key] = cell
        return cell

    def interval(self, arg: exp.Expression) -> Interval:
        """The bounds of an aggregate's argument, from the catalog."""
        return bounds(arg, self.scope.column)


def _restrict_domains(a: _Analysis, keys: list[GroupKey], where: exp.Expression | None,
                      scope: Scope) -> Combinations | None:
    """The public key combinations rows passing WHERE and INNER JOIN ON can have.

    Evaluated on the keys' domains alone (:func:`dpsql.analyze.domains.released_groups`,
    which argues why that is sound); each key's domain shrinks to the values some
    released combination has. None: every combination of the domains is released.
    """
    conditions = _conjuncts(where)
    for s in scope.sources:
        if s.kind == "inner" and s.on is not None:  # a LEFT JOIN's ON filters nothing
            conditions += _conjuncts(s.on)
    left = {s.alias for s in scope.sources if s.kind == "left"}

    def outer(col: exp.Column) -> bool:
        # NULL-extended by a LEFT JOIN (or in a derived table's FROM, not traced here)
        return bool(left) and (col.table in left
                               or all(s.alias != col.table for s in scope.sources))

    work = a.__dict__.setdefault("domain_work", [0])
    groups = released_groups([(k.expr, k.domain) for k in keys], conditions,
                             scope.column, a.limits, work, outer)
    if groups is not None:
        for i, k in enumerate(keys):
            k.domain = groups.values(i)
    return groups


def _check_user_keys(keys: list[GroupKey], scope: Scope) -> None:
    """Refuses GROUP BY the user key when the keys must pass partition selection.

    Every group of ``GROUP BY pid`` (or of ``pid`` with other keys) holds the rows of
    one user, and partition selection releases a key only when its noisy count of
    users clears a threshold above 1, so such a key appears with probability at most
    δ: the query would be charged and release nothing. Refused before the charge.

    **Privacy**: the decision reads the query (the key is a bare column) and the
    catalog (which column is a table's user key, and that the keys have no public
    domain), never the data. A user key with a public domain (an int column with
    bounds) is not refused: its keys are released from the domain, each with noise.
    """
    for k in keys:
        if not (isinstance(k.expr, exp.Column) and scope.is_uid(k.expr)):
            continue
        source = scope.source(k.expr.table) if k.expr.table else scope.sources[0]
        hint = "Group by a column many users share"
        if source.table.derived:
            where = f"derived table {source.alias!r}"
        else:
            where = f"table {source.table.name!r}"
            hint += (", or count per user in a derived table and group by the count, e.g. "
                     f"SELECT n, COUNT(*) AS users FROM (SELECT {k.expr.name}, COUNT(*) AS n "
                     f"FROM {source.table.name} GROUP BY {k.expr.name}) AS per_user "
                     "GROUP BY n")
        raise UnsupportedQueryError(
            f"GROUP BY {k.expr.sql(dialect='duckdb')} groups by the user key of {where}: "
            "every group holds one user's rows, and a group is released only when enough "
            "users share its key (partition selection), so no group could be released; "
            f"nothing was charged. {hint}")


def _domain_notes(plan: Plan, scope: Scope, groups: Combinations | None) -> None:
    """Notes on keys released from an int or date column's bounds, and on WHERE narrowing
    them."""
    for k in plan.keys:
        if k.domain is None or not isinstance(k.expr, exp.Column):
            continue
        col = scope.column(k.expr)
        if col.type == "int" and col.values is None and col.bounded:
            plan.notes.append(
                f"the keys of {k.expr.sql(dialect='duckdb')} are the whole numbers of its "
                f"bounds [{col.lower}, {col.upper}] (a public domain, empty ones included); "
                "rows outside them are left out")
        if col.type == "date" and col.values is None and col.bounded:
            plan.notes.append(
                f"the keys of {k.expr.sql(dialect='duckdb')} are the days of its bounds "
                f"[{col.lower}, {col.upper}] (a public domain, empty days included); rows "
                "outside them are left out")
    if groups is not None:
        plan.notes.append(
            f"WHERE leaves {len(groups)} of the public key combinations, decided on the "
            "catalog's domains alone")


def _conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND terms of a condition."""
    while isinstance(e, exp.Paren):
        e = e.this
    if e is None:
        return []
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]


def _check_intervals(outputs: list[Output]) -> None:
    """Every noisy output must get an error bar: only interval-safe functions over cells."""
    for out in outputs:
        if not out.cells:
            continue
        for node in out.expr.walk():
            if isinstance(node, exp.Cast) and not node.to.is_type(
                    *exp.DataType.INTEGER_TYPES, *exp.DataType.REAL_TYPES) or (
                    isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DECIMAL)):
                raise UnsupportedQueryError(
                    f"output column {out.name!r}: a noisy aggregate can be cast only to an "
                    f"integer or floating-point type, not {node.to.sql()}"
                )
            if isinstance(node, exp.Round) and node.args.get("decimals") is not None and not (
                    isinstance(node.args["decimals"], exp.Literal)
                    and node.args["decimals"].is_int):
                raise UnsupportedQueryError(
                    f"output column {out.name!r}: ROUND over a noisy aggregate needs a "
                    "whole-number literal for its decimals"
                )
            if not isinstance(node, _INTERVAL_FUNCS):
                raise UnsupportedQueryError(
                    f"output column {out.name!r}: {type(node).__name__.upper()} over a noisy "
                    "aggregate is not supported (no error bar can be derived for it)"
                )


class _OutputNames:
    """The outputs' post-processing expressions by (lower-case) output name."""

    def __init__(self, outputs: list[Output]):
        self._by_name: dict[str, list[exp.Expression]] = {}
        for o in outputs:
            self._by_name.setdefault(o.name.lower(), []).append(o.expr)

    def get(self, name: str, where: str) -> exp.Expression:
        """The output called ``name``; refused when several outputs have that name."""
        found = self._by_name[name]
        if len(found) > 1:
            raise UnsupportedQueryError(
                f"{name!r} in {where} is ambiguous: {len(found)} output columns have that "
                "name; rename one")
        return found[0].copy()


def _alias_target(select: exp.Select, alias: str) -> exp.Expression:
    for item in select.expressions:
        if isinstance(item, exp.Alias) and item.alias.lower() == alias:
            return item.this
    raise UnknownColumnError(f"unknown column {alias!r}")  # pragma: no cover


def _qualify(select: exp.Select, scope: Scope, out_names: set[str]) -> exp.Select:
    """Resolves every column against the FROM clause.

    One table: unqualified, lower-case names. Several: ``alias.column``. Columns that
    name an output alias rather than a table column (allowed in GROUP BY, HAVING and
    ORDER BY) become ``__alias:<name>`` placeholders.
    """
    select = select.copy()
    select.set("joins", None)
    lowered = {n.lower() for n in out_names}
    for col in list(select.find_all(exp.Column)):
        if col.find_ancestor(exp.Subquery) is not None:
            continue  # a derived table or an IN subquery: resolved on its own
        if isinstance(col.this, exp.Star):
            raise UnsupportedQueryError("SELECT t.* would release raw rows")
        resolved = scope.resolve(col)
        name = col.name.lower()
        in_clause = col.find_ancestor(exp.Group, exp.Having, exp.Order)
        in_agg = col.find_ancestor(*AGGREGATES)
        if resolved is not None:
            if (name in lowered and not col.table and in_agg is None
                    and isinstance(in_clause, exp.Having | exp.Order)):
                # an output has this input column's name: post_expr and the ORDER BY
                # loop decide which one is meant, as DuckDB's binder does
                resolved.meta[SHADOWS] = name
            col.replace(resolved)
            continue
        if in_clause is not None and in_agg is None and name in lowered and not col.table:
            col.replace(exp.column(f"__alias:{name}"))
            continue
        tables = ", ".join(s.table.name for s in scope.sources if not s.hidden)
        raise UnknownColumnError(
            f"unknown column {col.name!r} in table {tables!r}; its columns are: "
            + ", ".join(c for s in scope.sources if not s.hidden for c in s.table.columns)
        )
    return select


def _check_in_subqueries(select: exp.Select, catalog: Catalog) -> exp.Select:
    """``x IN (SELECT ...)`` may read public tables only: the set is then public data.

    Names bind by identity: every table of the subquery gets a fresh alias and every
    column in it is qualified with the alias of the subquery table that has it, so no
    column can bind to a row of the outer (private) query, whatever the names
    (``pid IN (SELECT k FROM pub WHERE people.age > 50)`` is refused: ``people`` is not
    a table of the subquery).
    """
    if not any(n.args.get("query") is not None for n in select.find_all(exp.In)):
        return select
    select = select.copy()
    count = 0
    for node in list(select.find_all(exp.In)):
        query = node.args.get("query")
        if query is None:
            continue
        inner = query.this if isinstance(query, exp.Subquery) else query
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
            raise UnsupportedQueryError("IN (SELECT ...) must select exactly one column")
        if inner.find(exp.Subquery) is not None or inner.args.get("with_") or any(
                n.args.get("query") is not None for n in inner.find_all(exp.In)):
            raise UnsupportedQueryError("IN (SELECT ...) may not hold further subqueries")
        tables = list(inner.find_all(exp.Table))
        aliases: dict[str, tuple[str, str]] = {}
        for table in tables:
            name = table.name.lower()
            if not catalog.has_table(name) or not catalog.table(name).public:
                raise UnsupportedQueryError(
                    f"IN (SELECT ...) may read only public tables; {name!r} is "
                    + ("private" if catalog.has_table(name) else "not in the catalog"))
            alias = (table.alias or name).lower()
            if alias in aliases:
                raise UnsupportedQueryError(
                    f"table alias {alias!r} is used twice in IN (SELECT ...); rename one")
            aliases[alias] = (name, f"__in{count}")
            count += 1
        for col in list(inner.find_all(exp.Column)):
            name = col.name.lower()
            if col.table:
                owner = aliases.get(col.table.lower())
                if owner is None or not catalog.table(owner[0]).has_column(name):
                    raise UnknownColumnError(
                        f"unknown column {col.sql(dialect='duckdb')!r} in IN (SELECT ...): "
                        "a subquery may read only its own tables")
            else:
                owners = [a for a in aliases.values() if catalog.table(a[0]).has_column(name)]
                if len(owners) != 1:
                    raise UnknownColumnError(
                        f"{'ambiguous' if owners else 'unknown'} column {col.name!r} in "
                        "IN (SELECT ...)")
                owner = owners[0]
            col.replace(exp.column(name, table=owner[1]))
        for table in tables:
            name = table.name.lower()
            fresh = aliases[(table.alias or name).lower()][1]
            table.replace(exp.Table(this=exp.to_identifier(name),
                                    alias=exp.TableAlias(this=exp.to_identifier(fresh))))
    return select


def _output_name(item: exp.Expression) -> str:
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Column):
        return item.name
    return item.sql(dialect="duckdb")


#: Accepted range of a query's epsilon (beyond it, noise scales over- or underflow).
EPSILON_RANGE = (1e-9, 1e9)
#: Smallest positive delta: log(1/δ) stays below 231, and subnormal deltas (where
#: 1/δ overflows and the zCDP conversion breaks down) never reach the accounting.
MIN_DELTA = 1e-100
#: Largest per-query override of max_groups or max_rows: far above any useful bound, and
#: small enough that every product with a value bound stays an exact, finite double.
MAX_CONTRIBUTION = 10**6


def _privacy_parameters(epsilon: float, delta: float) -> tuple[float, float]:
    """The query's (ε, δ) as floats, range-checked; PrivacyParameterError names the bad one.

    ε is finite and in :data:`EPSILON_RANGE`; δ is 0, or in [:data:`MIN_DELTA`, 1).
    """
    epsilon = _number(epsilon, "epsilon")
    delta = _number(delta, "delta")
    if not epsilon > 0:
        raise PrivacyParameterError(f"epsilon must be a positive finite number, got {epsilon:g}")
    if not EPSILON_RANGE[0] <= epsilon <= EPSILON_RANGE[1]:
        raise PrivacyParameterError(
            f"epsilon must be between {EPSILON_RANGE[0]:g} and {EPSILON_RANGE[1]:g}, "
            f"got {epsilon:g}")
    if not 0 <= delta < 1:
        raise PrivacyParameterError(f"delta must be in [0, 1), got {delta:g}")
    if 0 < delta < MIN_DELTA:
        raise PrivacyParameterError(
            f"delta must be 0 or at least {MIN_DELTA:g}, got {delta:g}")
    return epsilon, delta


def _number(value, name: str) -> float:
    """``value`` as a finite float; PrivacyParameterError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PrivacyParameterError(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the double range
        number = math.inf
    if not math.isfinite(number):
        kind = "not a number" if math.isnan(number) else "not finite"
        raise PrivacyParameterError(
            f"{name} must be a positive finite number, got a value that is {kind}"
            if name == "epsilon" else f"{name} must be in [0, 1), got a value that is {kind}")
    return number


def _positive_int(value: int | None, name: str, default: int) -> int:
    """A per-query contribution bound: a whole number in [1, :data:`MAX_CONTRIBUTION`]."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        # no repr of a huge int (str() of one over 4300 digits raises) or of long text
        small = isinstance(value, float) or (
            isinstance(value, int) and value.bit_length() <= 64)
        shown = repr(value) if small else type(value).__name__
        raise PrivacyParameterError(f"{name} must be a positive integer, got {shown}")
    if value > MAX_CONTRIBUTION:
        raise PrivacyParameterError(
            f"{name} must be at most {MAX_CONTRIBUTION:,}"
            + (f", got {value:,}" if value.bit_length() <= 64 else ", got a larger number"))
    return value
