"""What :class:`dpsql.Connection` tells before spending anything: :meth:`explain` (what a
query would release and how accurately) and :meth:`epsilon_for` (the ε a target error
bar needs). Both run the same analysis as ``execute`` and read only public information.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dpsql.accuracy import predict_outputs, selection_summary
from dpsql.answering import bias_cost_notes, internal_error, split_table
from dpsql.asking import key_parts, l0_seed, lift_and_bind, query_options, switch
from dpsql.errors import (
    DpsqlError,
    PrivacyParameterError,
)
from dpsql.params import refuse_number
from dpsql.postprocess import stat_half_width
from dpsql.result import Explanation


class Explaining:
    """:class:`dpsql.Connection`'s methods that spend nothing (mixed into it; they use
    its ``_prepare``, ``_check_alpha`` and ``_catalog``)."""

    def explain(
        self,
        sql: str,
        params: Sequence[Any] | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        max_groups: int | None = None,
        max_rows: int | None = None,
        mechanism: str | None = None,
        alpha: float | None = None,
        bias_check: bool | None = None,
    ) -> Explanation:
        """Shows what a query would release and how accurately; spends nothing.

        Per output column: what it is in the analyst's terms, which noisy statistics
        feed it and its predicted error bar (:func:`dpsql.accuracy.predict_outputs`);
        for keys from the data, the partition-selection threshold in users
        (:func:`dpsql.accuracy.selection_summary`); the noisy statistics with their
        sensitivities, budget shares and noise; the cost and the rewritten SQL. It runs
        the same analysis as :meth:`execute` (same plan, split and threshold) and reads
        only public information: the catalog, the parameters and the database schema.
        Its arguments are :meth:`execute`'s: ``params`` binds the ``?`` placeholders,
        everything else is keyword-only. With ``bias_check`` (or ``OPTIONS (bias_check =
        1)`` in the SQL) it shows the share of the budget the bias check would take
        (:mod:`dpsql.bias`).
        """
        try:
            refuse_number(params, "explain")
            alpha = self._check_alpha(alpha)
            sql, options = lift_and_bind(sql, params, self._catalog.limits)
            epsilon, delta, max_groups, max_rows = query_options(
                options, epsilon, delta, max_groups, max_rows)
            bias_check = switch(options.get("bias_check", bias_check), "bias_check")
            # the seed execute() would use, so the SQL shown is the SQL that runs
            seed = l0_seed(self._seed_secret, key_parts(sql, options, bias_check)[1])
            plan, expression, backend = self._prepare(sql, epsilon, delta, max_groups,
                                                      max_rows, mechanism, bias_check,
                                                      seed=seed)
            # execute()'s checks before its charge: the engine's types may turn a
            # statistic into a grid one and the SQL is then written again
            # (dpsql.answering.settle_grids), so the SQL and mechanisms shown are those
            # that run, and what execute() would refuse, explain() refuses too
            expression, _ = self._check(plan, expression, backend)
            sql_text = backend.to_sql(expression)
            statistics = split_table(plan, alpha)
            selection = selection_summary(plan, alpha)
            outputs = predict_outputs(plan, alpha)
        except DpsqlError:
            raise
        except Exception as exc:  # noqa: BLE001 - dpsql's own bug; spends nothing
            raise internal_error(exc, "analysing") from None
        return Explanation(
            sql=sql_text,
            statistics=statistics,
            partition_selection=selection,
            cost=plan.cost,
            max_groups=plan.max_groups,
            max_rows=plan.max_rows,
            alpha=alpha,
            mechanism=plan.mechanism,
            rho=plan.rho,
            outputs=outputs,
            notes=tuple(plan.notes) + bias_cost_notes(plan),
        )

    def epsilon_for(
        self,
        sql: str,
        params: Sequence[Any] | None = None,
        *,
        half_width: float | None = None,
        delta: float | None = None,
        column: str | None = None,
        max_groups: int | None = None,
        max_rows: int | None = None,
        mechanism: str | None = None,
        alpha: float | None = None,
    ) -> float:
        """The smallest ε at which every noisy statistic's error bar is <= ``half_width``.

        The inverse of :meth:`explain`: with ``column``, only the statistics behind that
        output column count (for an AVG, its noisy sum and count). Spends nothing.
        Its arguments are :meth:`explain`'s: ``params`` binds the ``?`` placeholders;
        ``half_width`` and everything else are keyword-only (a BigQuery ``OPTIONS``
        clause may set delta and the contribution bounds; its epsilon is ignored).

        Raises:
            PrivacyParameterError: no ε up to 10⁶ reaches the target.
        """
        refuse_number(params, "epsilon_for", "half_width")
        if half_width is None:
            raise PrivacyParameterError("epsilon_for needs the target: half_width=...")
        if isinstance(half_width, bool) or not isinstance(half_width, int | float) or \
                not half_width > 0:
            raise PrivacyParameterError(f"half_width must be positive, got {half_width!r}")
        alpha = self._check_alpha(alpha)
        sql, options = lift_and_bind(sql, params, self._catalog.limits)
        _, delta, max_groups, max_rows = query_options(options, 1.0, delta, max_groups, max_rows)

        def worst(eps: float) -> float:
            try:
                plan, _, _ = self._prepare(sql, eps, delta, max_groups, max_rows, mechanism)
            except DpsqlError:
                raise
            except Exception as exc:  # noqa: BLE001 - dpsql's own bug; spends nothing
                raise internal_error(exc, "analysing") from None
            names = [s.name for s in plan.stats]
            if column is not None:
                out = [o for o in plan.outputs if o.name == column]
                if not out:
                    raise PrivacyParameterError(
                        f"no output column {column!r}; the columns are "
                        f"{', '.join(o.name for o in plan.outputs)}")
                names = sorted({s for c in plan.cells if c.name in out[0].cells
                                for s in c.stats})
            return max((stat_half_width(plan, n, alpha) for n in names), default=0.0)

        low, high = 1e-6, 1e6
        if worst(high) > half_width:
            raise PrivacyParameterError(
                f"no epsilon up to {high:g} gives half-widths <= {half_width:g}")
        for _ in range(60):
            mid = math.sqrt(low * high)
            if worst(mid) <= half_width:
                high = mid
            else:
                low = mid
            if high / low < 1 + 1e-4:
                break
        return high
