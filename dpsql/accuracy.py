"""Predicted accuracy and partition-selection reports, from public information only.

``explain`` says what a query will do before anything is spent, and every answer whose
keys came from partition selection says in its notes how they were chosen. Everything
here is computed from the plan alone (the catalog's bounds, ε, δ, the mechanism, the
contribution bounds) and, for an answer's note, from the number of keys partition
selection *released*. That number is a function of the DP release itself (the released
keys), so stating it is post-processing and free. Nothing about the keys that did not
clear is used: not their number, not their noisy counts (:func:`selection_note` takes
only the released count, so it cannot).

Predicted error bars (:func:`predict_outputs`) hold for the same levels post-processing
uses: an output fed by ``k`` noisy statistics takes each at level ``α/k`` (union bound),
so each prediction holds with probability at least ``1 − α``. For a noisy count or sum
the half-width does not depend on the data: the prediction is the ``±`` every answer
shows. AVG, VARIANCE, STDDEV and quantiles depend on the group; their predictions are
bounds on the error as a function of ``n``, the rows the group holds after contribution
bounding (the noisy count's true value), valid whatever the values within the catalog's
bounds ``[L, U]``. With ``m`` the centre post-processing uses and ``r = max(m − L, U − m)``:

* each aggregate family derives its own bound where it computes it
  (``predicted_width`` in :mod:`dpsql.aggregates`): AVG in
  :func:`dpsql.aggregates.avg.bound`, VARIANCE and STDDEV in
  :func:`dpsql.aggregates.variance.bound`, quantiles (in rank) in
  :func:`dpsql.aggregates.quantile.rank_error`.
* an output expression over these: ``+``, ``−``, a numeric literal factor or divisor,
  ``ABS``, ``LEAST``/``GREATEST`` (1-Lipschitz), ``ROUND``/``FLOOR``/``CEIL``/casts (plus
  one rounding step) combine the bounds; any other expression (a product or ratio of
  two noisy values) depends on the values and gets no prediction.
"""

from __future__ import annotations

import math

from sqlglot import exp

from dpsql.aggregates.avg import bound as _avg_bound  # noqa: F401 - tests/test_explain.py
from dpsql.aggregates.base import readable, stat_width
from dpsql.aggregates.quantile import rank_error as _rank_error  # noqa: F401 - the same
from dpsql.aggregates.variance import bound as _var_bound  # noqa: F401 - the same
from dpsql.analyze.plan import Output, Plan

__all__ = ["ASSUMED_SIZES", "analyst_sql", "predict_outputs", "readable", "selection_note",
           "selection_summary", "statistic_feeds", "threshold_words"]

#: Group sizes (rows) at which data-dependent predictions are evaluated.
ASSUMED_SIZES = (100, 1_000, 10_000)

# -- partition selection ---------------------------------------------------------------


def selection_summary(plan: Plan, alpha: float) -> dict | None:
    """What partition selection will require, in users; None when no key needs it.

    Keys: ``threshold`` (the noisy distinct-user count a key needs), ``epsilon`` and
    ``delta`` (the selection's share), ``scale`` (its noise), ``keys`` (the GROUP BY
    expressions without a public domain), ``max_groups``, ``at_threshold`` (release
    probability of a key with exactly ``threshold`` users), ``likely`` (the fewest users
    released with probability ``likely_level = 1 − alpha``) and ``single_user`` (release
    probability of a key held by one user). All from ε, δ and the bounds: public.
    """
    sel = plan.selection
    if sel is None:
        return None
    eps, dlt = sel.privacy_map()
    return {
        "threshold": sel.threshold,
        "epsilon": eps,
        "delta": dlt,
        "scale": sel.noise.scale,
        "keys": [_short(k.expr.sql(dialect="duckdb")) for k in plan.keys
                 if k.domain is None],
        "max_groups": sel.max_groups,
        "at_threshold": sel.release_probability(sel.threshold),
        "likely": sel.users_needed(1 - alpha),
        "likely_level": 1 - alpha,
        "single_user": sel.release_probability(1),
    }


def threshold_words(summary: dict) -> str:
    """The threshold of :func:`selection_summary` in words."""
    t, likely = summary["threshold"], summary["likely"]
    bounded = (f"; users are counted after contribution bounding, in at most "
               f"max_groups = {summary['max_groups']} groups each"
               if summary["max_groups"] > 1 else "")
    return (
        f"a key is released only if its noisy count of distinct users reaches {t:,} "
        f"(discrete Laplace noise of scale {summary['scale']:.4g}; this selection's share "
        f"of the budget is epsilon = {summary['epsilon']:.4g}, delta = "
        f"{summary['delta']:.3g}): a key with {t:,} users appears with probability "
        f"{summary['at_threshold']:.0%}, one with {likely:,} or more with probability >= "
        f"{_percent(summary['likely_level'])}, and one held by a single user with "
        f"probability <= {summary['single_user']:.2g}{bounded}")


def selection_note(plan: Plan, released: int, alpha: float) -> str:
    """The note of an answer whose keys came from partition selection.

    Args:
        plan: the query's plan (ε, δ, bounds: public).
        released: how many keys cleared the threshold, i.e. the number of released
            groups before HAVING, LIMIT and OFFSET. It is computed from the released
            keys only; the number of keys found in the data is not an input, so it can
            never be reported.
        alpha: the answer's confidence level complement.
    """
    summary = selection_summary(plan, alpha)
    keys = ", ".join(summary["keys"])
    words = threshold_words(summary)
    later = [name for name, part in (("HAVING", plan.having), ("LIMIT", plan.limit),
                                     ("OFFSET", plan.offset)) if part is not None]
    after = f" (before {' and '.join(later)})" if later else ""
    if released:
        return (f"partition selection: {released:,} group key{'s' if released != 1 else ''} "
                f"of {keys} cleared the threshold{after}. Keys of {keys} come from the data, "
                f"so {words}. Keys below the threshold are left out, and how many there "
                "were is not revealed.")
    hints = ["raise epsilon (the threshold falls about in proportion to 1/epsilon)",
             "raise delta"]
    if summary["max_groups"] > 1:
        hints.append(f"lower max_groups (now {summary['max_groups']})")
    hints.append(f"ask the data owner for a public domain of {keys} (values: in the "
                 "catalog), whose keys need no threshold")
    return (f"partition selection: no group key of {keys} cleared the threshold, so no "
            f"group is released; the charge is kept (the selection is part of what the "
            f"query pays for). Keys of {keys} come from the data, so {words}. To see "
            f"groups: {'; '.join(hints)}. The explain command shows the threshold before "
            "anything is spent.")


def _short(text: str, limit: int = 60) -> str:
    """An analyst's expression, cut to ``limit`` characters for a one-line note."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _percent(p: float) -> str:
    return f"{100 * p:.10g}%"


# -- predicted error bars --------------------------------------------------------------


def statistic_feeds(plan: Plan) -> dict[str, list[str]]:
    """Per noisy statistic, the output columns (and the selection) it feeds."""
    feeds: dict[str, list[str]] = {s.name: [] for s in plan.stats}
    if plan.selection is not None and "__users" in feeds:
        feeds["__users"].append("partition selection")
    for out in plan.outputs:
        for cell in plan.cells:
            if cell.name in out.cells:
                for name in cell.stats:
                    if out.name not in feeds[name]:
                        feeds[name].append(out.name)
    return feeds


def analyst_sql(plan: Plan, expr: exp.Expression) -> str:
    """An output expression with dpsql's column names replaced by the analyst's SQL."""
    names = {k.name: k.expr for k in plan.keys}
    names.update({c.name: c.aggregate for c in plan.cells})

    def back(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name in names:
            return names[node.name].copy()
        return node

    return expr.copy().transform(back).sql(dialect="duckdb")


def predict_outputs(plan: Plan, alpha: float) -> list[dict]:
    """Per output column: what it is, what feeds it, and its predicted ``1 − alpha`` ±.

    Each entry has ``column``, ``expression`` (the analyst's SQL), ``role`` (``key``,
    ``noisy`` or ``exact``), ``statistics`` (labels of the noisy statistics it reads),
    ``half_width`` (the same in every group, or None), ``by_size`` (``{n: bound}`` at
    the :data:`ASSUMED_SIZES`, when the bound depends on the group's rows ``n``),
    ``worst_case`` (the bound whatever ``n``, from the catalog's bounds, or None),
    ``rank_error`` (quantiles: ``2W`` rows of rank) and ``meaning`` (the statement, in
    words). See the module docstring for the derivations.
    """
    out = []
    for o in plan.outputs:
        out.append(_predict(plan, o, alpha))
    return out


def _predict(plan: Plan, o: Output, alpha: float) -> dict:
    entry = {"column": o.name, "expression": analyst_sql(plan, o.expr), "role": "exact",
             "statistics": [], "half_width": None, "by_size": None, "worst_case": None,
             "rank_error": None, "meaning": "", "domain_size": None}
    key = next((k for k in plan.keys
                if isinstance(o.expr, exp.Column) and o.expr.name == k.name), None)
    if key is not None:
        entry["role"] = "key"
        entry["domain_size"] = None if key.domain is None else len(key.domain)
        entry["meaning"] = (
            f"group key with a public domain ({len(key.domain):,} values): its values are "
            "released without a threshold, even those without rows" if key.domain is not None
            else
            "group key from the data: a key is shown only if it clears partition "
            "selection (see below)")
        return entry
    if not o.cells:
        entry["meaning"] = "computed from group keys and constants only: exact"
        return entry
    cells = [c for c in plan.cells if c.name in o.cells]
    stats = sorted({s for c in cells for s in c.stats})
    level = alpha / len(stats)
    entry["role"] = "noisy"
    entry["statistics"] = [plan.stat(s).label for s in stats]
    conf = _percent(1 - alpha)

    if all(c.family.direct for c in cells):
        widths = {c.name: stat_width(plan, c.stats[0], level) for c in cells}
        width = _combine(o.expr, widths)
        entry["half_width"] = width
        entry["meaning"] = (
            f"the ± of every group, the same whatever the data ({conf} interval)"
            if width is not None else
            "depends on the noisy values (a product or ratio of noisy statistics): no "
            "prediction; see the statistics' ± below")
        return entry

    by_size = {}
    for n in ASSUMED_SIZES:
        widths = {c.name: c.family.predicted_width(plan, c, level, n) for c in cells}
        by_size[n] = _combine(o.expr, widths)
    worst = _combine(o.expr, {c.name: c.family.predicted_width(plan, c, level, None)
                              for c in cells})
    if all(v is None for v in by_size.values()):
        entry["meaning"] = (
            "depends on the noisy values (a product or ratio of noisy statistics): no "
            "prediction; see the statistics' ± below")
        return entry
    entry["by_size"] = by_size
    entry["worst_case"] = worst if worst is not None and math.isfinite(worst) else None
    direct = (isinstance(o.expr, exp.Column) and len(cells) == 1)
    own = cells[0].family.prediction(plan, cells[0], level, conf, ASSUMED_SIZES) \
        if direct else None
    if own is not None:  # e.g. a quantile's, in rank
        entry.update(own)
        return entry
    formula = cells[0].family.formula(plan, cells[0], level) if direct else ""
    entry["meaning"] = (
        f"with probability >= {conf} the error is at most the value shown for a group of "
        f"n rows (after contribution bounding), whatever the values within the catalog's "
        f"bounds{formula}"
        + (f"; never more than {readable(worst)}" if entry["worst_case"] is not None
           else ""))
    return entry


def _combine(e: exp.Expression, widths: dict[str, float]) -> float | None:
    """Half-width of a 1-Lipschitz-style expression over cells of known half-widths.

    None when the expression's error depends on the values (a product or ratio of
    noisy values, a string, a function not listed in the module docstring).
    """
    if isinstance(e, exp.Column):
        return widths.get(e.name, 0.0)  # a group key is exact
    if isinstance(e, exp.Literal):
        return None if e.is_string else 0.0
    if isinstance(e, exp.Paren | exp.Neg | exp.Abs):
        return _combine(e.this, widths)
    if isinstance(e, exp.Add | exp.Sub):
        a, b = _combine(e.this, widths), _combine(e.expression, widths)
        return None if a is None or b is None else a + b
    if isinstance(e, exp.Mul):
        for noisy, factor in ((e.this, e.expression), (e.expression, e.this)):
            c = _number(factor)
            if c is not None:
                w = _combine(noisy, widths)
                return None if w is None else abs(c) * w
        return _zero_or_none(e, widths)
    if isinstance(e, exp.Div):
        c = _number(e.expression)
        if c:
            w = _combine(e.this, widths)
            return None if w is None else w / abs(c)
        return _zero_or_none(e, widths)
    if isinstance(e, exp.Least | exp.Greatest):
        parts = [_combine(x, widths) for x in [e.this, *e.expressions]]
        return None if any(p is None for p in parts) else max(parts)
    if isinstance(e, exp.Round | exp.Floor | exp.Ceil | exp.Cast | exp.TryCast):
        w = _combine(e.this, widths)
        if w is None:
            return None
        digits = e.args.get("decimals")
        step = 10.0 ** -int(digits.this) if isinstance(digits, exp.Literal) else 1.0
        if isinstance(e, exp.Cast | exp.TryCast):
            if not e.to.is_type(*exp.DataType.INTEGER_TYPES, *exp.DataType.REAL_TYPES):
                return None
            if not e.to.is_type(*exp.DataType.INTEGER_TYPES):
                step = 0.0
        return w + step
    return _zero_or_none(e, widths)


def _zero_or_none(e: exp.Expression, widths: dict[str, float]) -> float | None:
    """0 for an expression that reads no noisy cell (exact), else None (no prediction)."""
    if any(isinstance(c, exp.Column) and c.name in widths for c in e.find_all(exp.Column)):
        return None
    return 0.0


def _number(e: exp.Expression) -> float | None:
    """The value of a numeric literal (possibly negated or parenthesised), else None."""
    if isinstance(e, exp.Paren):
        return _number(e.this)
    if isinstance(e, exp.Neg):
        v = _number(e.this)
        return None if v is None else -v
    if isinstance(e, exp.Literal) and not e.is_string:
        try:
            return float(e.this)
        except ValueError:
            return None
    return None
