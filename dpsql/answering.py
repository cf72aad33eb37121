"""What a charged query's answer carries besides its rows: the statistics' bound types,
notes on asymmetric intervals and on the bias check's cost, and the budget split table
(:attr:`dpsql.Result.split`)), and how an unexpected failure is told."""

from __future__ import annotations

import logging
import math
import weakref

import duckdb

from dpsql import types as sqltypes
from dpsql.accuracy import statistic_feeds
from dpsql.analyze import Plan
from dpsql.errors import AnalysisError, DpsqlError, PostprocessError, UnsupportedQueryError
from dpsql.mechanisms import mechanism as mechanism_family
from dpsql.postprocess import stat_half_width

_log = logging.getLogger("dpsql.owner")


def statistic_types(plan: Plan, schema: dict[str, str], reports_types: bool = True) -> None:
    """Decides, before the charge, from the SQL types the backend bound, how each
    statistic is read back: discrete noise only for a statistic whose column the engine
    types as an integer (a count on every engine); any other becomes real-valued (grid
    noise, the same ε), so that nothing after the charge tests a value for wholeness.

    A statistic's value analysis (``Statistic.integer``) can say "whole" where the
    engine computes a fraction (``SUM(CAST(age AS DOUBLE) // 2)`` is 20.5 for age 41):
    the engine's type decides. On SQLite, which reports no types, only counts are
    integers (COUNT returns an INTEGER there by definition), a histogram's bins included
    where each user has one row (:meth:`~dpsql.aggregates.base.StatisticRule.counted`).

    Raises:
        UnsupportedQueryError: (not charged) a statistic of a type that is not a number.
    """
    family = mechanism_family(plan.mechanism)
    for stat in plan.stats:
        types = [schema.get(c) for c in stat.columns]
        for column, t in zip(stat.columns, types, strict=True):
            if t is not None and not sqltypes.parse(t).array \
                    and sqltypes.parse(t).base not in sqltypes.NUMBER_NAMES:
                raise UnsupportedQueryError(
                    f"statistic {column} has type {t[:40]}; dpsql adds noise to numbers only")
        if not stat.integer or stat.grid is not None:
            # a gridded sum comes back as an integer (HUGEINT) of grid units, which says
            # nothing of its values; it keeps its grid mechanism (dpsql.grid_units)
            continue
        if reports_types:
            whole = all(t is not None and sqltypes.base_name(t) in sqltypes.EXACT_INTEGER_NAMES
                        for t in types)
        else:
            whole = stat.rule.counted(stat)
        if whole or stat.mechanism is None or type(stat.mechanism).__name__ == "Constant":
            continue
        stat.integer = False
        share = getattr(stat, family.budget)  # Statistic.epsilon or .rho
        selection = plan.selection is not None and stat.mechanism is plan.selection.noise
        # partition selection's user counts keep their integer noise (the threshold's)
        if share is not None and not selection:
            stat.mechanism = family.calibrate(stat.linf, plan.max_groups, share, False,
                                              stat.width)


def asymmetry_notes(answer) -> tuple[str, ...]:
    """A note per column whose interval is not ``value ± half-width`` in some row.

    Reads the released values and their intervals only (post-processing). Public
    bounds cut an interval (a count near 0, a sum of a column bounded at 0), interval
    arithmetic makes an AVG's asymmetric: the half-width is then the larger side, which
    overstates the other one, and the note points to the interval's ends.
    """
    notes = []
    for i, name in enumerate(answer.columns):
        for row, bars, ends in zip(answer.rows, answer.accuracy, answer.intervals,
                                   strict=True):
            value, width, interval = row[i], bars[i], ends[i]
            if width is None or interval is None or not isinstance(value, int | float):
                continue
            low, high = interval
            if not (math.isfinite(width) and math.isfinite(low) and math.isfinite(high)):
                continue
            if min(value - low, high - value) < width * (1 - 1e-9):
                notes.append(
                    f"{name}: its interval is not symmetric in some rows (bounds cut it, "
                    f"e.g. at 0), so {name}_error (the larger side) overstates the other "
                    f"side; the interval's ends are in Result.intervals, or as columns "
                    f"{name}_low and {name}_high with OPTIONS (intervals = 1)")
                break
    return tuple(notes)


def bias_cost_notes(plan: Plan) -> tuple[str, ...]:
    """What the bias check would cost, for ``explain`` (from the plan only)."""
    check = plan.bias
    if check is None:
        return ()
    if check.free:
        return ("bias check: each user has at most one row here, so nothing is cut and "
                "the check costs nothing",)
    share = (f"rho = {check.rho:.4g}" if check.rho is not None
             else f"epsilon = {check.epsilon:.4g}")
    return (f"bias check: takes one share of the split ({share}) for {len(check.columns)} "
            f"noisy user counts ({mechanism_name(check)}, scale "
            f"{check.mechanism.scale:.4g} each): users, users over max_rows"
            + (", users over max_groups" if check.groups else ""),)


def interrupted(exc: BaseException) -> bool:
    """Whether an engine's exception is a Ctrl-C that reached it (DuckDB's own)."""
    return isinstance(exc, duckdb.InterruptException) or (
        type(exc) is RuntimeError and str(exc) == "Query interrupted")


def internal_error(exc: BaseException, stage: str, charged: bool = False) -> DpsqlError:
    """An unexpected exception as a stable DpsqlError; its text goes to the owner's log only.

    Nothing of the exception reaches the analyst: its message could quote data values.
    """
    import traceback

    from dpsql.text import escape

    # escaped: the exception text may quote analyst input, which must not forge lines
    _log.error("internal error while %s a query: %s", stage,
               escape("".join(traceback.format_exception(exc))))
    if charged:
        err = PostprocessError(
            "dpsql failed while answering this query (an internal error, logged for the "
            "data owner); the charge is kept because the failure may depend on the data")
        err.charged = True
        return err
    err = AnalysisError(
        f"dpsql failed while {stage} this query (an internal error, logged for the data "
        "owner); nothing was charged")
    err.charged = False
    return err


def mechanism_name(stat) -> str:
    return getattr(stat.mechanism, "label", type(stat.mechanism).__name__)


#: id(plan) -> (a weak reference to it, alpha, its split table): a plan from the plan
#: cache is answered again and again, and its table is a pure function of the plan (its
#: statistics, their mechanisms, the bias check) and alpha; about 0.5 ms to write.
_SPLITS: dict[int, tuple] = {}


def split_table(plan: Plan, alpha: float) -> list[dict]:
    """How the query's ε (or ρ) is split over its statistics: one row per statistic
    (and the bias check's share), a fresh copy each time (the analyst may edit it)."""
    hit = _SPLITS.get(id(plan))
    if hit is None or hit[0]() is not plan or hit[1] != alpha:
        key = id(plan)
        hit = (weakref.ref(plan, lambda _ref: _SPLITS.pop(key, None)), alpha,
               _split_table(plan, alpha))
        _SPLITS[key] = hit
    return [dict(row, feeds=type(row["feeds"])(row["feeds"])) for row in hit[2]]


def _split_table(plan: Plan, alpha: float) -> list[dict]:
    out = []
    feeds = statistic_feeds(plan)
    for s in plan.stats:
        out.append({
            "name": s.name,
            "statistic": s.label,
            "linf": s.linf,
            "l1": s.linf * plan.max_groups,
            "epsilon": s.epsilon,
            "rho": s.rho,
            "mechanism": mechanism_name(s),
            "scale": s.mechanism.scale,
            "half_width": stat_half_width(plan, s.name, alpha),
            "feeds": feeds[s.name],
        })
    check = plan.bias
    if check is not None and not check.free and check.mechanism is not None:
        # the bias check's share, so that the shares add up to the query's cost
        out.append({
            "name": "__bias",
            "statistic": "bias check: users, users over max_rows"
                         + (", users over max_groups" if check.groups else ""),
            "linf": 1,
            "l1": len(check.columns),
            "epsilon": check.epsilon,
            "rho": check.rho,
            "mechanism": mechanism_name(check),
            "scale": check.mechanism.scale,
            "half_width": check.mechanism.accuracy(alpha / len(check.columns)),
            "feeds": ("Result.bias",),
        })
    return out


def settle_grids(plan, expression, schema, backend):
    """After :func:`dpsql.answering.statistic_types` (before the charge): the grids
    decided again, and the query rewritten and bound again if they changed.

    ``statistic_types`` turns an integer statistic the engine types as a fraction into a
    grid one (it leaves gridded ones be): that one is summed in grid units too, so the
    SQL is written again from the recorded decision. Nothing changes a mechanism after
    this, and the invariant is checked, so the SQL and the noise stage agree.

    Returns:
        the expression to run and its bound schema.

    Raises:
        RuntimeError: (dpsql's own bug, reported as an internal error before the charge)
            the decision did not settle.
    """
    from dpsql.grid_units import choose_grids, grids_agree
    from dpsql.rewrite import EngineTraits, rewrite

    traits = EngineTraits.of(backend)
    if choose_grids(plan, traits):
        expression = rewrite(plan, engine=traits)
        schema = backend.check(expression)
        statistic_types(plan, dict(schema), backend.reports_types)
    if not grids_agree(plan) or choose_grids(plan, traits):
        raise RuntimeError("a statistic's grid changed after its rewrite")
    if backend.reports_types:
        # the noise stage reads an exact integer total: an engine that typed the sum
        # otherwise adds in floating point (dpsql.grid_units)
        types = dict(schema)
        for stat in plan.stats:
            if stat.decimal is not None and stat.decimal.top:
                # released as the exact sum: a DECIMAL of the summand's scale
                # (dpsql.decimal_sums); anything else was added otherwise
                t = types.get(stat.name)
                if not _decimal_of_scale(t, stat.decimal.scale):
                    raise RuntimeError(f"DECIMAL sum {stat.name} is typed {t}")
            if stat.grid is None:
                continue
            for column in stat.columns:
                t = types.get(column)
                if not _whole_type(t):
                    raise RuntimeError(f"gridded statistic {column} is typed {t}")
    return expression, schema


def _decimal_of_scale(t: str | None, scale: int) -> bool:
    """A DECIMAL of scale ``scale``.

    >>> _decimal_of_scale("DECIMAL(38,2)", 2), _decimal_of_scale("DOUBLE", 2)
    (True, False)
    """
    parsed = sqltypes.parse(t)
    return (not parsed.array and parsed.base in sqltypes.DECIMAL_NAMES
            and parsed.params[1:2] == (str(scale),))


def _whole_type(t: str | None) -> bool:
    """An integer type, or a DECIMAL of scale 0 (Spark sums BIGINTs as DECIMAL(38, 0)).

    >>> _whole_type("HUGEINT"), _whole_type("DECIMAL(38,0)"), _whole_type("DOUBLE")
    (True, True, False)
    """
    if t is None:
        return False
    parsed = sqltypes.parse(t)
    if parsed.array:
        return False
    if parsed.base in sqltypes.EXACT_INTEGER_NAMES:
        return True
    return parsed.base in sqltypes.DECIMAL_NAMES and parsed.params[1:2] == ("0",)
