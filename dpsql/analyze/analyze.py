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
from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.analyze.cells import _Analysis, _within_group
from dpsql.analyze.comparisons import check_comparisons
from dpsql.analyze.derived import scope_of
from dpsql.analyze.determined import determined_columns, key_is_determined
from dpsql.analyze.domains import Combinations, check_value_lengths
from dpsql.analyze.groups import check_user_keys, domain_notes, restrict_domains
from dpsql.analyze.inline import inline_ctes, inline_row_derived
from dpsql.analyze.names import SHADOWS, output_name, qualify
from dpsql.analyze.outputs import OutputNames, check_intervals
from dpsql.analyze.parameters import positive_int, privacy_parameters
from dpsql.analyze.plan import GroupKey, Output, Plan, Statistic
from dpsql.analyze.scope import Scope
from dpsql.analyze.subqueries import check_in_subqueries
from dpsql.bias import BiasCheck, bound_notes, calibrate, capped_value_notes
from dpsql.catalog import Catalog
from dpsql.errors import PrivacyParameterError, UnsupportedQueryError
from dpsql.limits import DEFAULT as DEFAULT_LIMITS
from dpsql.mechanisms import Constant, LaplaceThreshold
from dpsql.mechanisms import mechanism as mechanism_family
from dpsql.validate import AGGREGATES

#: Largest LIMIT/OFFSET (a signed 64-bit integer on every engine).
MAX_LIMIT = 2**63 - 1

#: Most noisy statistics in one query, by default (the owner's ``max_statistics``).
MAX_STATISTICS = DEFAULT_LIMITS.max_statistics

#: Most group keys released from public domains in one query, by default (the owner's
#: ``max_domain_cells``).
MAX_DOMAIN_CELLS = DEFAULT_LIMITS.max_domain_cells


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
    """Builds the plan of one validated SELECT, running :data:`STEPS` in order.

    Args:
        select: output of :func:`dpsql.validate.validate`.
        catalog: the data owner's catalog.
        epsilon: the query's total ε (> 0).
        delta: the query's total δ (0 <= δ < 1); needed when keys come from the data.
        max_groups: per-query override of the table's ``max_groups``.
        max_rows: per-query override of the table's ``max_rows``.
        seed: seed of the L0 sampling order (the engine: :func:`dpsql.asking.l0_seed`;
            tests: a constant); random when None.
        mechanism: ``laplace`` (pure ε-DP statistics) or ``gaussian`` (zCDP; needs δ).
        unique: ``unique(table, column)`` tells whether the *database* guarantees the
            column unique (a PRIMARY KEY or UNIQUE constraint). When it does for the user
            key of a single-table query, each user has exactly one row; in joins it
            tells which group keys the user determines (:mod:`dpsql.analyze.determined`).
        bias_check: also measure, with DP and one more share of the budget, how many
            users the contribution bounds cut (:mod:`dpsql.bias`).

    Returns:
        The plan, frozen: nothing after the analysis changes it.

    Raises:
        UnknownTableError, UnknownColumnError, UnboundedExpressionError,
        UnsupportedQueryError, PrivacyParameterError.
    """
    q = _Query(select, catalog, epsilon, delta, max_groups, max_rows, seed, mechanism,
               unique, bias_check)
    for step in STEPS:
        step(q)
    plan = _plan(q)
    return dataclasses.replace(plan, notes=tuple(write_notes(plan, q)))


@dataclass
class _Query:
    """One query under analysis: what was asked, then what each step decides.

    Only the steps of :data:`STEPS` change it, each the fields its docstring names.
    """

    select: exp.Select
    catalog: Catalog
    epsilon: float
    delta: float
    max_groups: int | None
    max_rows: int | None
    seed: int | None
    mechanism: str
    unique: Callable[[str, str], bool] | None
    bias_check: bool
    out_names: list[str] = field(default_factory=list)  # as written, before qualify
    scope: Scope | None = None
    G: int = 1  # max_groups in force
    R: int = 1  # max_rows in force
    one_row: bool = False
    limit: exp.Limit | None = None
    offset: exp.Offset | None = None
    a: _Analysis | None = None
    where: exp.Expression | None = None
    keys: list[GroupKey] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    having: exp.Expression | None = None
    order: exp.Order | None = None
    public: bool = True
    groups: Combinations | None = None
    single_group: bool = False
    G_eff: int = 1
    bound: bool = False
    selection: LaplaceThreshold | None = None
    bias: BiasCheck | None = None
    rho_total: float | None = None


def check_parameters(q: _Query) -> None:
    """(ε, δ) range-checked and the mechanism known (:mod:`dpsql.analyze.parameters`)."""
    epsilon, delta = privacy_parameters(q.epsilon, q.delta)
    if mechanism_family(q.mechanism).needs_delta and delta <= 0:
        raise PrivacyParameterError(f"{q.mechanism} noise needs delta > 0 (e.g. delta=1e-6)")
    q.epsilon, q.delta = epsilon, delta


def inline_tables(q: _Query) -> None:
    """WITH tables and row-level derived tables written out
    (:mod:`dpsql.analyze.inline`); ``IN (SELECT ...)`` subqueries checked."""
    catalog = q.catalog
    select = inline_ctes(q.select, catalog.limits.max_nodes).transform(_within_group)
    # derived tables that only filter and project rows: the same rows, written out
    select = inline_row_derived(select, catalog, catalog.limits.max_nodes)
    q.select = check_in_subqueries(select, catalog)


def resolve_scope(q: _Query) -> None:
    """``q.scope``: the FROM clause, its users and its per-user derived tables."""
    q.scope, q.select = scope_of(q.select, q.catalog, q.unique)


def contribution_bounds(q: _Query) -> None:
    """``q.G``, ``q.R``: the bounds in force; ``q.one_row``: each user has one row.

    Joined private tables: the finest table's bounds (bounding is enforced either way,
    so the choice trades bias for noise, never privacy).
    """
    scope, unique = q.scope, q.unique
    table = scope.primary
    G = positive_int(q.max_groups, "max_groups",
                     max(s.table.max_groups for s in scope.private))
    R = positive_int(q.max_rows, "max_rows", max(s.table.max_rows for s in scope.private))
    one_row = table.row_privacy or (
        scope.single and isinstance(table.user_key, str) and unique is not None
        and not table.derived and scope.sources[0].derived is None
        and unique(table.name, table.user_key))
    if one_row:
        # each row is its own user (row privacy, or a user key the database keeps
        # unique): a user touches one group and adds one row to it, so the per-user
        # aggregate and the L0 bound are no-ops and are skipped
        G, R = 1, 1
    q.G, q.R, q.one_row = G, R, bool(one_row)


def check_limits(q: _Query) -> None:
    """``q.limit``, ``q.offset``: whole-number literals in [0, :data:`MAX_LIMIT`]."""
    limit = q.select.args.get("limit")
    offset = q.select.args.get("offset")
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
    q.limit, q.offset = limit, offset


def resolve_names(q: _Query) -> None:
    """Every column bound to FROM (:func:`~dpsql.analyze.names.qualify`); comparisons and
    constants checked; ``q.a`` ready to collect cells; ``q.where``."""
    select, scope, catalog = q.select, q.scope, q.catalog
    q.out_names = [output_name(e) for e in select.expressions]
    select = qualify(select, scope, set(q.out_names))
    check_comparisons(select, scope)  # a comparison that can never be true: refused free
    # constants that would grow past the limits while the backend folds them
    check_value_lengths(select, scope.column, catalog.limits)
    q.a = _Analysis(scope, q.R, q.one_row, catalog.limits)
    where = select.args.get("where")
    where = where.this if where else None
    if where is not None and any(where.find_all(*AGGREGATES)):
        raise UnsupportedQueryError("aggregates are not allowed in WHERE; use HAVING")
    q.select, q.where = select, where


def resolve_outputs(q: _Query) -> None:
    """``q.keys``, ``q.outputs`` and ``q.having``: group keys, and expressions over key and
    cell columns, each output with an error bar (:func:`check_intervals`)."""
    a, select = q.a, q.select
    keys = a.group_keys(select)
    outputs = []
    for name, item in zip(q.out_names, select.expressions, strict=True):
        body = item.this if isinstance(item, exp.Alias) else item
        post = a.post_expr(body, keys, f"output column {name!r}")
        outputs.append(Output(name, post, a.cells_in(post)))
    check_intervals(outputs)
    having = select.args.get("having")
    by_alias = OutputNames(outputs)
    q.having = a.post_expr(having.this, keys, "HAVING", by_alias) if having else None
    q.keys, q.outputs = keys, outputs


def resolve_order(q: _Query) -> None:
    """``q.order``: ORDER BY over output positions, output names and post expressions."""
    select, keys, a = q.select, q.keys, q.a
    by_alias = OutputNames(q.outputs)
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
    q.order = order


def release_groups(q: _Query) -> None:
    """How keys are released: ``q.public`` (from public domains), ``q.groups`` (the
    combinations WHERE leaves), and the groups a user reaches, ``q.G_eff``, with
    ``q.bound`` (whether the L0 step must cut) and ``q.single_group``."""
    keys, scope, catalog = q.keys, q.scope, q.catalog
    public = all(k.domain is not None for k in keys)
    if keys and not public:
        check_user_keys(keys, scope)
    # WHERE and INNER JOIN conditions over keys restrict the released combinations
    groups = restrict_domains(keys, q.where, scope, catalog.limits,
                              q.a.domain_work) if keys and public else None
    domain_size = len(groups) if groups is not None else math.prod(
        len(k.domain) for k in keys if k.domain is not None)
    if public and domain_size > catalog.limits.max_domain_cells:
        raise UnsupportedQueryError(
            f"GROUP BY over public domains has {domain_size} key combinations; "
            f"the limit is {catalog.limits.max_domain_cells} (max_domain_cells)"
        )
    # every key a function of the user (see determined.py): one group per user
    single_group = q.one_row
    if keys and not q.one_row:
        found = determined_columns(scope, q.where, q.unique)
        single_group = all(key_is_determined(k.expr, scope, found) for k in keys)
    if not keys or single_group:
        G_eff, bound = 1, False
    elif public:
        # keys outside the domain are filtered out and only the domain's combinations
        # are released, so a user reaches at most that many released groups
        G_eff, bound = max(1, min(q.G, domain_size)), domain_size > q.G
    else:
        G_eff, bound = q.G, True
    q.public, q.groups, q.single_group, q.G_eff, q.bound = (public, groups, single_group,
                                                            G_eff, bound)


def split_budget(q: _Query) -> None:
    """Calibrates every statistic's noise, the partition selection (``q.selection``) and
    the bias check (``q.bias``) for an equal share of the query's budget (module
    docstring); ``q.rho_total`` under Gaussian noise."""
    keys, public, scope, a = q.keys, q.public, q.scope, q.a
    family, G_eff = mechanism_family(q.mechanism), q.G_eff
    stats = a.stats
    selection = None
    noised = [s for s in stats]
    if keys and not public:
        if q.delta <= 0:
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
    if q.bias_check:
        # nothing to cut without a per-user step (each user one row): free, no share
        bias = BiasCheck(groups=q.bound, free=scope.primary.row_privacy or q.one_row
                         or scope.uid is None
                         or (scope.single and scope.sources[0].per_user))
    shares = len(noised) + (1 if selecting else 0) + (1 if bias and not bias.free else 0)
    # the family's split (Mechanism.split states why the release is (ε, δ)-DP)
    split = family.split(q.epsilon, q.delta, shares, selecting)
    for s in noised:
        setattr(s, family.budget, split.share)  # Statistic.epsilon or .rho
        s.mechanism = family.calibrate(s.linf, G_eff, split.share, s.integer, s.width)
    if bias is not None and not bias.free:
        calibrate(bias, family, split.share)
    if selecting:
        selection = LaplaceThreshold(split.selection_epsilon, split.selection_delta, G_eff)
        users.epsilon = split.selection_epsilon
        users.mechanism = selection.noise
    q.selection, q.bias, q.rho_total = selection, bias, split.rho


#: The analysis, in order; each step reads what the earlier ones decided.
STEPS = (check_parameters, inline_tables, resolve_scope, contribution_bounds, check_limits,
         resolve_names, resolve_outputs, resolve_order, release_groups, split_budget)


def _plan(q: _Query) -> Plan:
    """The plan of the analysed query (its notes are added by :func:`write_notes`)."""
    stats: list[Statistic] = q.a.stats
    return Plan(
        sql=q.select.sql(dialect="duckdb"),
        table=q.scope.primary,
        scope=q.scope,
        where=q.where,
        keys=q.keys,
        stats=stats,
        cells=q.a.cells,
        outputs=q.outputs,
        having=q.having,
        order=q.order,
        limit=q.limit.expression if q.limit else None,
        offset=q.offset.expression if q.offset else None,
        max_groups=q.G_eff,
        max_rows=q.R,
        bound_groups=q.bound,
        epsilon=q.epsilon,
        delta=q.delta if q.selection is not None or mechanism_family(q.mechanism).needs_delta
        else 0.0,
        selection=q.selection,
        seed=secrets.randbits(31) if q.seed is None else q.seed,
        mechanism=q.mechanism,
        rho=q.rho_total,
        one_row_per_user=q.one_row,
        groups=q.groups,
        bias=q.bias,
    )


def write_notes(plan: Plan, q: _Query) -> list[str]:
    """What the answer should say about its keys, its bounds and their bias (public facts
    of the plan only)."""
    notes = domain_notes(plan.keys, q.scope, q.groups)
    if q.single_group and q.keys and not q.one_row and q.G > 1:
        notes.append(
            "each user falls into one group (the group keys are determined by the user's "
            f"own row), so the noise is scaled for one group, not max_groups = {q.G}")
    if q.selection is not None and any(c.stats == ("__users",) for c in q.a.cells):
        notes.append(
            "COUNT(DISTINCT) under partition selection is released only above the "
            f"threshold {q.selection.threshold}, so values near it are biased upward"
        )
    notes += bound_notes(plan) + capped_value_notes(plan)
    if any(s.kind == "sum" for s in plan.stats):
        notes.append(
            "sums clamp each value to its bounds and each user's partial sum to "
            f"{q.R} row(s) worth; data outside the bounds biases them toward the bounds"
        )
    return notes
