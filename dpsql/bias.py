"""What the contribution bounds cut: notes on every answer, and an opt-in DP measurement.

**Notes (free).** Contribution bounds (``max_rows`` rows per user and group,
``max_groups`` groups per user, and the caps a per-user derived table puts on its own
aggregates) are enforced by the rewritten SQL, so an answer is the truth *of the
bounded data*. When a user has more, the rest is left out (or scaled down), and the
error bar, which covers only the noise, says nothing about it. :func:`bound_notes`
says, per output column, which bound can cut what that column counts, with the bound's
value: ``COUNT(*)`` keeps at most ``R`` rows per user and group, ``COUNT(DISTINCT x)``
at most ``R`` distinct values, ``COUNT(DISTINCT <user>)`` is cut only by
``max_groups``, sums and averages weight a user's rows to at most ``R``, quantiles
likewise. :func:`capped_value_notes` says that a per-user value computed in a derived
table (``SELECT uid, COUNT(*) AS n ... GROUP BY uid``) is capped, so its largest value
means "that many or more". Both read the plan only (catalog, query, bounds): public,
and the same whatever the data.

**The bias check (charged, opt-in).** ``OPTIONS (bias_check = 1)`` (or
``execute(..., bias_check=True)``) makes the answer also release, with DP, how many
users the bounds cut: over the users with rows in the query (after WHERE and the
public-domain restriction, the rows the statistics read), the number ``U`` of users,
the number ``C_r`` of users with more than ``max_rows`` rows in at least one group,
and, when the L0 step can cut (more possible groups than ``max_groups``), the number
``C_g`` of users with more than ``max_groups`` groups. The answer's note states the
shares ``C_r / U`` and ``C_g / U`` with intervals, so the analyst sees whether the
bounds fit the data (a share near 0: little is cut; a large share: raise the bound, at
the price of more noise).

Privacy argument. The three counts are computed by one SQL query over the same
per-user table (``__per_user``: one row per user and group, NULL users left out)
that the statistics read, grouped once more by user, so each user is one row of the
counted table and adds 0 or 1 to each count; rows of one user never change another
user's row there. Adding or removing one user therefore moves the vector
``(U, C_r[, C_g])`` by at most 1 in each of its ``k`` coordinates: L1 sensitivity
``k``, L2 ``√k``. With Laplace noise the vector gets discrete Laplace noise of scale
``k / ε_b`` in each coordinate (``ε_b``-DP); with Gaussian noise discrete Gaussian of
``σ² = k / (2ρ_b)`` (``ρ_b``-zCDP). The shares and their intervals are computed from
the noisy counts only (post-processing).

Its cost. The bias check is one more share of the query's budget split
(:func:`dpsql.analyze.analyze.analyze`): a query with ``n`` noisy statistics (and a
partition selection, ``s`` = 1 or 0) at ε gives each of the ``n + s + 1`` parts
``ε / (n + s + 1)``, the bias check one of them (``ρ / (n + s + 1)`` under Gaussian
noise). The query still spends exactly the ε it asked for (basic composition), so
asking for the check makes its other statistics noisier, and ``explain`` shows the
share before anything is spent. When nothing can be cut (each user has one row, or
row privacy) the check is answered from public facts alone, free: nothing is cut.

What it does not measure: the values clamped to the catalog's bounds, and caps applied
inside a per-user derived table (their note says so); ``C_r`` counts users with more
than ``max_rows`` rows in a group whatever the aggregate (for ``COUNT(DISTINCT x)``
it may count a user whose distinct values were all kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import UnsupportedQueryError
from dpsql.rewrite.per_user_aggregate import PER_USER, RAW_ROWS, UID
from dpsql.sqlbuild import number

if TYPE_CHECKING:  # pragma: no cover
    from dpsql.analyze.plan import Plan
    from dpsql.mechanisms.base import Mechanism
#: Columns of the bias check's query: users, users over max_rows, over max_groups.
USERS, ROWS_CUT, GROUPS_CUT = "__b_users", "__b_rows", "__b_groups"


@dataclass
class BiasCheck:
    """The bias check of one query: its budget share and noise (see the module).

    Attributes:
        groups: whether the L0 step can cut groups (then ``C_g`` is measured too).
        epsilon: its share of ε (Laplace), or 0.
        rho: its share of ρ (Gaussian), or None.
        mechanism: the noise of each count, calibrated to L1 = k (L2 = √k).
        free: nothing can be cut (one row per user, or row privacy): answered without
            noise or budget.
    """

    groups: bool = False
    epsilon: float = 0.0
    rho: float | None = None
    mechanism: object | None = None
    free: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        """The counts released, in order; ``k`` is their number."""
        return (USERS, ROWS_CUT, GROUPS_CUT) if self.groups else (USERS, ROWS_CUT)


def calibrate(check: BiasCheck, family: Mechanism, share: float) -> None:
    """Sets the noise of the counts for a ``share`` of the budget (``family.budget``:
    ε for Laplace, ρ for Gaussian).

    Each user moves each of the ``k`` counts by at most 1: L1 = k, L2 = √k (module
    docstring); the family calibrated with ``linf = 1`` over ``k`` "groups" gives
    Laplace scale ``k / ε``, Gaussian ``σ = √(k / 2ρ)``.

    >>> from dpsql.mechanisms import mechanism
    >>> c = BiasCheck(groups=True); calibrate(c, mechanism("laplace"), 0.5); c.mechanism.scale
    6.0
    """
    share = float(share)
    setattr(check, family.budget, share)  # BiasCheck.epsilon or .rho
    check.mechanism = family.calibrate(1, len(check.columns), share, True)


def bias_query(plan: Plan, expression: exp.Select) -> exp.Select | None:
    """The bias check's SQL: the rewritten query's ``__per_user`` CTE, counted per user.

    ``expression`` is the rewritten statistics query; its ``__per_user`` CTE (with the
    :data:`RAW_ROWS` column the per-user pass adds when the plan asks for the check)
    is kept as it is, every other CTE dropped, and the outer query counts users::

        SELECT COUNT(*) AS __b_users,
               COUNT(CASE WHEN __most > R THEN 1 END) AS __b_rows,
               COUNT(CASE WHEN __groups > G THEN 1 END) AS __b_groups
        FROM (SELECT __uid, MAX(__raw_rows) AS __most, COUNT(*) AS __groups
              FROM __per_user GROUP BY __uid) AS __bias

    None when the plan has no check to run (none asked, or a free one).

    Raises:
        UnsupportedQueryError: (before the charge) the rewritten query has no per-user
            table to count, which a check that is not free always has.
    """
    check = plan.bias
    if check is None or check.free:
        return None
    with_ = expression.args.get("with_")
    ctes = [c for c in (with_.expressions if with_ else []) if c.alias == PER_USER]
    if len(ctes) != 1:  # not reached: a check that is not free has a per-user step
        raise UnsupportedQueryError("bias_check: this query has no per-user step to "
                                    "measure; nothing was charged")
    per_user = exp.select(exp.column(UID),
                          exp.alias_(exp.Max(this=exp.column(RAW_ROWS)), "__most"),
                          exp.alias_(exp.Count(this=exp.Star()), "__groups")
                          ).from_(PER_USER).group_by(exp.column(UID))

    def over(column: str, bound: int) -> exp.Expression:
        condition = exp.GT(this=exp.column(column), expression=number(bound))
        return exp.Count(this=exp.Case(ifs=[exp.If(this=condition,
                                                   true=exp.Literal.number(1))]))

    outer = exp.select(exp.alias_(exp.Count(this=exp.Star()), USERS),
                       exp.alias_(over("__most", plan.max_rows), ROWS_CUT))
    if check.groups:
        outer = outer.select(exp.alias_(over("__groups", plan.max_groups), GROUPS_CUT),
                             copy=False)
    outer = outer.from_(per_user.subquery("__bias"), copy=False)
    return outer.with_(PER_USER, as_=ctes[0].this.copy(), copy=False)


def release(plan: Plan, columns: list[str] | None, rows: list[tuple] | None,
            alpha: float) -> dict:
    """The noisy counts and shares; total (it runs after the charge).

    Args:
        plan: the query's plan (its ``bias`` check).
        columns, rows: the bias query's result (one row); None when the check is free.
        alpha: the intervals are ``1 − alpha``, each count's at ``alpha / k``.

    Returns:
        ``users``, ``rows_cut``, ``groups_cut`` (noisy counts, None when not
        measured), ``rows_share``, ``groups_share`` (in [0, 1]), their intervals
        ``rows_interval``, ``groups_interval``, and ``epsilon``, ``rho``.
    """
    check = plan.bias
    out = {"users": None, "rows_cut": 0, "groups_cut": 0 if check.groups or check.free
           else None, "rows_share": 0.0, "groups_share": 0.0 if check.groups or check.free
           else None, "rows_interval": (0.0, 0.0), "groups_interval": (0.0, 0.0)
           if check.groups or check.free else None, "epsilon": check.epsilon,
           "rho": check.rho, "free": check.free}
    if check.free:
        return out
    exact = [0] * len(check.columns)
    if rows:
        index = {name: i for i, name in enumerate(columns or [])}
        exact = [_count(rows[0][index[c]]) if c in index else 0 for c in check.columns]
    noisy = [max(int(v), 0) for v in check.mechanism.release(exact)]
    width = float(check.mechanism.accuracy(alpha / len(check.columns)))
    users = noisy[0]
    out["users"] = users
    for name, value in zip(("rows", "groups"), noisy[1:], strict=False):
        out[f"{name}_cut"] = value
        out[f"{name}_share"] = _share(value, users)
        out[f"{name}_interval"] = _share_interval(value, users, width)
    return out


def _count(value) -> int:
    """A count read back (an int; anything else as 0): total."""
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError, OverflowError):
        return 0


def _share(cut: float, users: float) -> float:
    return min(max(cut / users, 0.0), 1.0) if users > 0 else 0.0


def _share_interval(cut: float, users: float, width: float) -> tuple[float, float]:
    """Where ``C / U`` lies when both true counts are within ``width`` of the noisy ones.

    ``C <= U`` always, so the share is in [0, 1]; it is smallest at the least ``C`` and
    the most ``U``, largest at the most ``C`` and the least ``U``.
    """
    if not math.isfinite(width):
        return (0.0, 1.0)
    c_low, c_high = max(cut - width, 0.0), cut + width
    u_low, u_high = max(users - width, 1.0), max(users + width, 1.0)
    low = min(max(c_low / u_high, 0.0), 1.0)
    high = min(max(c_high / u_low, 0.0), 1.0)
    return (low, max(high, low))


def bias_note(plan: Plan, measured: dict, alpha: float) -> str:
    """The answer's note on the bias check (from the released counts only)."""
    conf = f"{100 * (1 - alpha):g}%"
    if measured["free"]:
        return ("bias check: each user has at most one row here, so the contribution "
                "bounds cut nothing (answered from the catalog and the database's "
                "constraints, at no cost)")
    cost = (f"rho = {measured['rho']:.4g}" if measured["rho"] is not None
            else f"epsilon = {measured['epsilon']:.4g}")
    parts = [f"bias check ({cost} of this query's budget): about "
             f"{measured['users']:,} users have rows here"]
    low, high = measured["rows_interval"]
    parts.append(f"{_pct(measured['rows_share'])} of them ({conf} interval "
                 f"{_pct(low)}–{_pct(high)}) have more than max_rows = {plan.max_rows} "
                 "row(s) in some group, whose rows beyond it were left out or scaled down")
    if measured["groups_share"] is not None:
        low, high = measured["groups_interval"]
        parts.append(f"{_pct(measured['groups_share'])} ({_pct(low)}–{_pct(high)}) touch "
                     f"more than max_groups = {plan.max_groups} groups, whose other groups "
                     "were left out")
    return "; ".join(parts) + (". A large share means the bounds cut much: raise them "
                               "(more noise) or read the answer as a lower bound")


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


# -- notes on every answer (free) ---------------------------------------------------------


def bound_notes(plan: Plan) -> list[str]:
    """Per output column, which contribution bound can cut what it counts, and the bound.

    Reads the plan only. Nothing is said when each user has one row (row privacy, a
    unique user key, or a per-user derived table): the bounds then cut nothing.
    """
    if plan.uid is None or plan.one_row_per_user or _one_row_source(plan):
        return []
    R, G = plan.max_rows, plan.max_groups
    groups = (f"; each user counts in at most max_groups = {G} group(s), the rest left "
              "out" if plan.bound_groups else "")
    notes = []
    for out in plan.outputs:
        if not out.cells:
            continue
        cells = [c for c in plan.cells if c.name in out.cells]
        rules = {plan.stat(s).rule for c in cells for s in c.stats}
        cut = {r.cut for r in rules}  # what the bounds cut, per kind (dpsql.aggregates)
        direct = all(c.family.direct for c in cells)
        cuts = []
        if "values" in cut:
            cuts.append(f"at most {R} distinct value(s) per user and group are counted")
        if "rows" in cut and direct:
            cuts.append(f"at most max_rows = {R} row(s) per user and group are counted")
        elif cut & {"weights", "rows"}:
            cuts.append(f"each user's rows in a group weigh at most max_rows = {R} row(s) "
                        "(sums capped, averages and quantiles reweighted)")
        if not cuts and not groups:
            continue
        body = "; ".join(cuts) + groups if cuts else groups.removeprefix("; ")
        counting = direct and all(r.counts for r in rules)
        effect = ("it counts the bounded data and can be below the true count" if counting
                  else "it describes the bounded data")
        notes.append(f"{out.name}: {body}, so {effect} (the error bar covers the noise "
                     "only; OPTIONS (bias_check = 1) measures how many users are cut)")
    return notes


def _one_row_source(plan: Plan) -> bool:
    """A single per-user derived table: one row per user, nothing for R or G to cut."""
    return plan.scope.single and plan.scope.sources[0].per_user


def capped_value_notes(plan: Plan) -> list[str]:
    """Notes on per-user values capped inside a derived table, when the query reads them.

    ``LEAST(COUNT(...), R)`` (:func:`dpsql.analyze.derived._aggregate`) caps a user's
    count at ``R``: a value of ``R`` means "``R`` or more". A clamped per-user SUM
    likewise means "at least" at its upper end and "at most" at its lower end. The
    values and their types are left as they are.
    """
    notes = []
    read = [*(k.expr for k in plan.keys), *(c.aggregate for c in plan.cells)]
    if plan.where is not None:  # WHERE n >= 10 also keeps the users with more
        read.append(plan.where)
    used = {(c.table, c.name) for o in read for c in o.find_all(exp.Column)}
    for source in plan.scope.sources:
        if source.derived is None:
            continue
        for item in source.derived.this.expressions:
            name = item.alias_or_name
            if (source.alias, name) not in used and not (
                    plan.scope.single and ("", name) in used):
                continue
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(body, exp.Least) and isinstance(body.this, exp.Count):
                cap = body.expressions[0].sql()
                notes.append(
                    f"{source.alias}.{name} is a per-user count capped at max_rows = {cap}: "
                    f"a value of {cap} means {cap} or more")
            elif (isinstance(body, exp.Least) and isinstance(body.this, exp.Greatest)
                  and isinstance(body.this.this, exp.Coalesce)):
                low, high = body.this.expressions[0].sql(), body.expressions[0].sql()
                notes.append(
                    f"{source.alias}.{name} is a per-user sum clamped to [{low}, {high}] "
                    f"(max_rows rows' worth): {high} means {high} or more, {low} means "
                    f"{low} or less")
    return notes
