"""The pipeline: parse → validate → analyze → rewrite → charge → execute → noise → post-process.

>>> import duckdb, dpsql
>>> from dpsql.datasets import load_pums, catalog_path
>>> db = duckdb.connect(); load_pums(db)
>>> conn = dpsql.connect(db, catalog=catalog_path("pums"), budget=(1.0, 1e-6), ledger=":memory:")
>>> res = conn.execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", epsilon=0.5)
>>> res.columns, [row[0] for row in res.rows], res.cost
(['sex', 'n'], [0, 1], (0.5, 0.0))
>>> res.accuracy[0]          # 95% half-width of the noisy count; None for the key
(None, 6)
>>> conn.budget.spent
(0.5, 0.0)
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import logging
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpsql import stages
from dpsql.accounting import Cost
from dpsql.accuracy import predict_outputs, selection_note, selection_summary, statistic_feeds
from dpsql.analyze import Plan, analyze
from dpsql.answer_cache import CORE_PREFIX, AnswerCache
from dpsql.answer_derive import derive, split
from dpsql.backends import Backend, open_backend
from dpsql.bias import bias_note, bias_query
from dpsql.bias import release as release_bias
from dpsql.bigquery_options import lift_dp_options
from dpsql.catalog import Catalog, Table, load_catalog
from dpsql.errors import (
    AnalysisError,
    BackendError,
    BudgetExhaustedError,
    CatalogError,
    DpsqlError,
    LedgerError,
    ParameterError,
    PostprocessError,
    PrivacyParameterError,
    QueryCancelled,
    UnknownTableError,
    UnsupportedQueryError,
)
from dpsql.keys import (
    float_key_type,
    keys_as_text,
    read_keys,
    scalar_key_type,
    temporal_key_type,
)
from dpsql.ledger import ALL, BudgetView, Ledger
from dpsql.noise import add_noise
from dpsql.normalize import normalize
from dpsql.params import bind_parameters, refuse_number
from dpsql.parse import parse
from dpsql.plan_cache import (
    CAPACITY,
    PlanCache,
    Prepared,
    catalog_fingerprint,
    plan_key,
    typed,
)
from dpsql.postprocess import check_postprocess, postprocess, stat_half_width
from dpsql.result import Explanation, Result
from dpsql.rewrite import EngineTraits, rewrite
from dpsql.validate import validate

_log = logging.getLogger("dpsql.owner")

_COMPATIBLE = {
    "int": ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
            "UINTEGER", "UBIGINT", "UHUGEINT", "INT"),
    "float": ("FLOAT", "DOUBLE", "REAL", "DECIMAL", "TINYINT", "SMALLINT", "INTEGER", "BIGINT",
              "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "NUMERIC"),
    "string": ("VARCHAR", "TEXT", "STRING", "CHAR", "ENUM"),
    "bool": ("BOOLEAN", "BOOL"),
    "date": ("DATE",),
    "timestamp": ("TIMESTAMP",),
}


def connect(
    database: Any,
    catalog: str | Path | dict | Catalog | None = None,
    budget: tuple[float, float] | None = None,
    *,
    ledger: str | Path | Ledger | None = None,
    analyst: str | None = None,
    alpha: float = 0.05,
    mechanism: str = "laplace",
    intervals: bool = False,
    answer_cache: bool | None = None,
    plan_cache: bool = True,
) -> Connection:
    """Opens a private connection.

    Args:
        database: a DuckDB file path (opened read-only), ``":memory:"``, or an open
            ``duckdb.DuckDBPyConnection``; None when the owner pinned the database (the
            catalog's ``database:``, or ``DPSQL_DATABASE``), which is then the only one
            accepted (the same file by device and inode, or the same server).
        catalog: a catalog YAML path, a dict, or a loaded :class:`~dpsql.catalog.Catalog`;
            None only when the owner pinned one (``DPSQL_CATALOG``), which is then the
            only one accepted.
        budget: an (epsilon, delta) cap on what this connection may spend. When the data
            owner has set no budget for the data set (in the catalog or the ledger) and
            the ledger is not pinned, the first connection's ``budget`` becomes the data
            set's total in the ledger.
        ledger: the ledger that persists spending (default: beside the database's real
            file, ``<database>.ledger.sqlite``); a PostgreSQL URL
            (``postgresql+psycopg://...``) for a ledger shared by several hosts;
            ``":memory:"`` for a budget that lives only as long as this connection, or a
            :class:`~dpsql.ledger.Ledger`. When the owner pinned the ledger (the
            catalog's ``ledger:``, or ``DPSQL_LEDGER``), leave it unset: any other
            ledger, ``":memory:"`` included, is refused, and the pinned one must exist.
        analyst: whose per-analyst budget applies (default: the OS user name); when the
            owner pinned it (the catalog's ``analyst:``, or ``DPSQL_ANALYST``), leave it
            unset: any other name is refused.
        alpha: error bars are ``1 − alpha`` confidence intervals (default 95%).
        mechanism: default noise, ``"laplace"`` (ε-DP per statistic) or ``"gaussian"``
            (zCDP; cheaper for queries with many aggregates; needs δ > 0).
        intervals: whether results show each error bar's interval ends as columns
            ``<name>_low`` and ``<name>_high`` (``Result.df``); a query's ``OPTIONS
            (intervals = 0|1)`` overrides it.
        answer_cache: the same query asked again (same text, ε, δ, bounds, mechanism,
            alpha, catalog and ``data_version``) returns the answer already released to
            this analyst, at no cost (:mod:`dpsql.answer_cache`); False: every query is
            answered afresh and charged; None (default): the catalog's
            ``answer_cache:`` (default false).
        plan_cache: remember checked plans for this connection (:mod:`dpsql.plan_cache`);
            False: every query is analysed, rewritten and checked again.

    Raises:
        CatalogError: the catalog is malformed.
        BackendError: the database cannot be opened.
        LedgerError: the ledger cannot be opened, is not a dpsql ledger, or fails its
            checks; the data set belongs to another database in it; or the connection
            asks for another catalog, database, ledger or analyst than the owner pinned
            (see :mod:`dpsql.ledger`), refused before anything is opened.
        PrivacyParameterError: no budget anywhere, or an invalid one (budgets must be
            real numbers: finite, not bool or text, ε > 0, 0 ≤ δ < 1).
    """
    return Connection(database, catalog, budget, ledger=ledger, analyst=analyst, alpha=alpha,
                      mechanism=mechanism, intervals=intervals, answer_cache=answer_cache,
                      plan_cache=plan_cache)


def default_ledger_path(database: Any) -> Path:
    """Where a database's ledger lives by default: ``<database file>.ledger.sqlite``
    beside the database's real path (symlinks resolved), so every name of one database
    file reaches one ledger.

    Raises:
        LedgerError: the database has no file (memory, server, Spark), or its file has
            a second hard link (two names, no single place for one ledger).
    """
    path = None
    if isinstance(database, duckdb.DuckDBPyConnection):
        row = database.execute("SELECT path FROM duckdb_databases() "
                               "WHERE database_name = current_database()").fetchone()
        path = row[0] if row and row[0] else None
    else:
        from dpsql.backends import ledger_home

        path = ledger_home(database)  # a DuckDB/SQLite file; None for servers and Spark
    if path is None:
        raise LedgerError(
            "a database in memory, a server URL or a SparkSession has no place for a "
            "ledger: pass ledger=PATH, or ledger=':memory:' for a budget that lasts only "
            "as long as this connection"
        )
    path = Path(os.path.realpath(path))
    with contextlib.suppress(OSError):
        links = os.stat(path).st_nlink
        if links > 1:
            raise LedgerError(
                f"database file {str(path)!r} has {links} hard links, so it has no single "
                "place for its default ledger (each name would get a fresh budget): pass "
                "ledger=PATH, or have the owner pin it (see dpsql.ledger)")
    return path.with_name(path.name + ".ledger.sqlite")


class Connection:
    """A connection that answers aggregate SQL with differential privacy.

    The backend connection is private to this object and never handed out.
    """

    def __init__(self, database: Any, catalog: Any = None, budget=None, *, ledger=None,
                 analyst: str | None = None, alpha: float = 0.05,
                 mechanism: str = "laplace", intervals: bool = False,
                 answer_cache: bool | None = None, plan_cache: bool = True):
        from dpsql.ledger import (
            apply_database_pin,
            apply_pins,
            check_analyst,
            check_budget,
            database_identity,
            pinned_catalog,
            pins,
        )

        # The owner's pins come first: a connection that asks for another catalog,
        # ledger or analyst is refused before a ledger or a database is opened (a fresh
        # ledger would be a fresh budget).
        catalog = pinned_catalog(catalog)
        if catalog is None:
            raise CatalogError("no catalog: pass catalog=PATH (a YAML file), a dict or a "
                               "Catalog")
        self._catalog = load_catalog(catalog)
        pinned = pins(self._catalog)
        database = apply_database_pin(pinned, database)
        ledger, analyst = apply_pins(pinned, ledger, analyst)
        self._ledger_pinned = pinned.ledger is not None
        if budget is not None:
            budget = check_budget(budget, "connection budget")
        if not 0 < alpha < 1:
            raise PrivacyParameterError(f"alpha must be in (0, 1), got {alpha}")
        if mechanism not in ("laplace", "gaussian"):
            raise PrivacyParameterError(
                f"mechanism must be 'laplace' or 'gaussian', got {mechanism!r}")
        if not isinstance(intervals, bool):
            raise PrivacyParameterError(f"intervals must be True or False, got {intervals!r}")
        self._alpha = alpha
        self._mechanism = mechanism
        self._intervals = intervals
        self._analyst = analyst or _os_user()
        check_analyst(self._analyst)
        self._dataset = self._catalog.dataset
        self._owns_ledger = not isinstance(ledger, Ledger)
        _check_database_file(database)  # a missing database gets no ledger file either
        if self._owns_ledger:
            # a pinned ledger is the owner's to create: missing, it is refused, never new
            ledger = Ledger(default_ledger_path(database) if ledger is None else ledger,
                            create=not self._ledger_pinned, expect_id=pinned.ledger_id)
        elif pinned.ledger_id is not None and ledger.id != pinned.ledger_id:
            raise LedgerError(f"ledger {ledger.path!r} is not the pinned ledger "
                              f"{pinned.ledger_id}")
        self._ledger = ledger
        try:
            ledger.bind(self._dataset, database_identity(database))
            self._seed_budgets(budget)
            self._cap = None if budget is None else (budget, [])
            self._backend: Backend | None = open_backend(database, limits=self._catalog.limits)
        except BaseException:
            if self._owns_ledger:  # a refused connection leaves no ledger file open
                ledger.close()
            raise
        self._schemas_ok: set[str] = set()
        self._unique_cache: dict[str, set[tuple[str, ...]]] = {}
        self._catalog_fp = catalog_fingerprint(self._catalog)
        self._plans = PlanCache(CAPACITY if plan_cache else 0)
        self._seen_schema: Any = None
        try:
            if answer_cache is None:
                answer_cache = self._catalog.answer_cache
            self._answers = AnswerCache(ledger) if answer_cache else None
        except BaseException:
            self.close()
            raise

    def _seed_budgets(self, budget) -> None:
        cat = self._catalog
        if cat.budget is not None:
            self._ledger.ensure_budget(self._dataset, cat.budget, ALL, "catalog",
                                       cat.accountant)
        for name, total in cat.analyst_budgets.items():
            self._ledger.ensure_budget(self._dataset, total, name, "catalog")
        if not any(a == ALL for _, a, *_ in self._ledger.budgets(self._dataset)):
            if self._ledger_pinned:
                # under a pin only the owner sets a total: a connection's budget= that
                # seeded one would let an analyst choose their own budget
                raise PrivacyParameterError(
                    f"no privacy budget for data set {self._dataset!r} in the pinned "
                    "ledger: the data owner sets it ('budget:' in the catalog, or dpsql "
                    "budget set); a connection's budget= is only a cap")
            if budget is None:
                raise PrivacyParameterError(
                    f"no privacy budget for data set {self._dataset!r}: declare "
                    "'budget: {epsilon: ..., delta: ...}' in the catalog, or pass "
                    "budget=(epsilon, delta)"
                )
            self._ledger.ensure_budget(self._dataset, tuple(budget), ALL, "first connection")

    # -- public API -------------------------------------------------------------------

    @property
    def budget(self) -> BudgetView:
        """This analyst's budget: ``.spent`` and ``.remaining`` as (epsilon, delta)."""
        return self._ledger.view(self._dataset, self._analyst, self._cap)

    @property
    def analyst(self) -> str:
        return self._analyst

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def execute(
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
        intervals: bool | None = None,
        bias_check: bool | None = None,
    ) -> Result:
        """Answers one aggregate query with (epsilon, delta)-DP and charges the budget.

        Args:
            sql: one SELECT over a catalog table. It may carry its own parameters in
                BigQuery's syntax, ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon
                = 0.5, delta = 1e-6, max_groups_contributed = 2) ...``; those win over
                the arguments.
            params: values for the query's ``?`` placeholders, in order (a list or
                tuple), bound as SQL literals through sqlglot's tree with the DB-API's
                checks (:func:`dpsql.params.bind_parameters`). Every other argument is
                keyword-only: a number here (``execute(sql, 0.5)``) is refused before
                anything is charged, never taken as ε nor as a parameter.
            epsilon: the query's total epsilon, split across its noisy statistics.
            delta: the query's delta (default 0); needed (> 0) when group keys come from
                the data or with Gaussian noise.
            max_groups: override of the table's ``max_groups`` for this query.
            max_rows: override of the table's ``max_rows`` for this query.
            mechanism: ``"laplace"`` or ``"gaussian"`` (default: the connection's).
            alpha: error bars are ``1 − alpha`` intervals (default: the connection's).
            intervals: show each interval's ends as columns ``<name>_low`` and
                ``<name>_high`` in ``Result.df`` (default: the connection's; ``OPTIONS
                (intervals = 1)`` wins).
            bias_check: also release, with DP, the share of users the contribution
                bounds cut (``OPTIONS (bias_check = 1)`` wins); it takes one share of
                the query's ε (:mod:`dpsql.bias`) and is reported in ``Result.bias``
                and a note.

        Raises:
            DpsqlError subclasses; only :class:`~dpsql.errors.BackendError` comes after
            the charge (and keeps it).
        """
        if self._backend is None:
            raise DpsqlError("connection is closed")
        stages.start()
        text = sql if isinstance(sql, str) else repr(sql)
        answer_key = core_key = None
        try:
            refuse_number(params, "execute")
            alpha = self._check_alpha(alpha)
            sql, options = _lift_and_bind(sql, params, self._catalog.limits)
            if params is not None:
                text = sql  # the ledger keeps what ran: the SQL with its literals
            intervals = options.get("intervals", intervals)
            bias_check = _switch(options.get("bias_check", bias_check), "bias_check")
            intervals = _switch(self._intervals if intervals is None else intervals,
                                "intervals")
            # the caches' key: the text with its parameters bound as literals, the
            # options it carried and every argument, each typed (1, 1.0 and True apart)
            # (None: not cached; a query that reads the clock means another query tomorrow)
            rest = [repr(sorted((k, typed(v)) for k, v in options.items())),
                    repr(typed(bias_check))]
            keyed = None if not isinstance(sql, str) or _CLOCK.search(sql) else "\x00".join(
                [sql, *rest])
            version = self._schema_version()
            if self._answers is not None:
                def answer_key_of(text: str | None) -> str | None:
                    return self._answers.key(
                        self._dataset, self._analyst, self._catalog_fp, version,
                        text and "\x00".join([text, *rest, repr(typed(intervals))]),
                        epsilon, delta, max_groups, max_rows, mechanism or self._mechanism,
                        alpha)

                answer_key = answer_key_of(keyed and sql)
                cached = self._answers.get(answer_key, self._dataset, self._analyst)
                if cached is None and keyed is not None:
                    cached, core_key = self._derived(sql, answer_key_of)
                if cached is not None:  # released before: post-processing, free
                    stages.mark("options")
                    return cached
            key = plan_key(keyed, epsilon, delta, max_groups, max_rows,
                           mechanism or self._mechanism, self._catalog_fp, version)
            prepared = self._plans.get(key)
            if prepared is None:
                probe = self._schema_probe(sql, text, alpha)
                if probe is not None:
                    return probe
                epsilon, delta, max_groups, max_rows = _options(
                    options, epsilon, delta, max_groups, max_rows)
                stages.mark("options")
                plan, expression, backend = self._prepare(sql, epsilon, delta, max_groups,
                                                          max_rows, mechanism, bias_check)
                # a query that cannot fit is refused before the engine binds it (fast);
                # the charge below still decides atomically
                reason = self.budget.refusal(plan.charge)
                if reason is not None:
                    raise BudgetExhaustedError(reason)
                stages.mark("ledger")
                # from the rewritten query as built (before _check reads temporal keys as
                # text): its __per_user CTE is the table the statistics read
                measure = bias_query(plan, expression)
                expression, read = self._check(plan, expression, backend)
                if measure is not None:
                    backend.check(measure)  # binds it, reads nothing
                prepared = Prepared(plan, expression, read, backend.to_sql(expression),
                                    measure)
                self._plans.put(key, prepared)
                stages.mark("to_sql")
            else:  # checked before: only charge, run, add noise, post-process
                stages.mark("options")
            plan, expression, read = prepared.plan, prepared.expression, prepared.read
            measure = prepared.measure
            backend = self._backend
        except DpsqlError as exc:
            self._ledger.refuse(self._dataset, self._analyst, text,
                                f"{type(exc).__name__}: {exc}")
            raise
        except Exception as exc:  # noqa: BLE001 - dpsql's own bug, found before the charge
            if _interrupted(exc):  # Ctrl-C reached the engine while it planned
                raise QueryCancelled(charged=False) from None
            err = _internal(exc, "analysing")
            self._ledger.refuse(self._dataset, self._analyst, text,
                                f"{type(err).__name__}: {err}")
            raise err from None
        except KeyboardInterrupt:  # Ctrl-C before the charge: nothing was spent
            raise QueryCancelled(charged=False) from None
        try:
            charge = self._ledger.charge(self._dataset, self._analyst, plan.charge, text,
                                         self._cap)
        except KeyboardInterrupt:  # Ctrl-C in the charge: it may have committed
            raise QueryCancelled("query cancelled while it was being charged; the charge "
                                 "may have been recorded (see dpsql budget log)") from None
        stages.mark("ledger")
        try:
            if plan.stats or plan.selection is not None:
                columns, rows = backend.execute(expression)
                stages.mark("backend")
                rows = read(rows)
            else:  # only public keys are released: no data needed
                columns, rows = [k.name for k in plan.keys], []
            noisy = add_noise(plan, columns, rows)
            answer = postprocess(plan, noisy, alpha)
            notes = tuple(plan.notes) + _asymmetry_notes(answer)
            if plan.selection is not None:
                # the number of released keys only: those below the threshold stay unsaid
                notes = (selection_note(plan, len(noisy.keys), alpha), *notes)
            measured = None
            if plan.bias is not None:
                bias_columns, bias_rows = (backend.execute(measure) if measure is not None
                                           else (None, None))
                measured = release_bias(plan, bias_columns, bias_rows, alpha)
                notes = (*notes, bias_note(plan, measured, alpha))
            result = Result(
                columns=answer.columns,
                rows=answer.rows,
                accuracy=answer.accuracy,
                cost=plan.cost,
                sql=prepared.sql,
                alpha=alpha,
                split=_split(plan, alpha),
                notes=notes,
                intervals=answer.intervals,
                noisy=answer.noisy,
                interval_columns=intervals,
                bias=measured,
            )
        except QueryCancelled:
            self._ledger.finish(charge, "cancelled")
            raise
        except DpsqlError as exc:
            exc.charged = True  # whatever its class says: it came after the charge
            self._ledger.finish(charge, "failed", type(exc).__name__)
            raise
        except Exception as exc:  # noqa: BLE001 - may depend on the data: no text of it
            self._ledger.finish(charge, "failed", "internal")
            err = _internal(exc, "answering", charged=True)
            raise err from None
        except KeyboardInterrupt:  # Ctrl-C after the charge: cancelled, charge kept
            self._ledger.finish(charge, "cancelled")
            raise QueryCancelled() from None
        except BaseException:
            self._ledger.finish(charge, "failed", "interrupted")
            raise
        # the released answer goes into the answer cache in the outcome's transaction
        store = None if self._answers is None else self._answers.storer(
            answer_key, self._dataset, self._analyst, result, also_as=core_key)
        stages.mark("noise")
        try:
            if store is None:
                self._ledger.finish(charge, "answered")
            else:
                self._ledger.finish(charge, "answered", also=store)
        except KeyboardInterrupt:  # Ctrl-C after the answer: the charge is kept
            raise QueryCancelled() from None
        stages.mark("ledger")
        return result

    def _derived(self, sql: str, key_of) -> tuple[Result | None, str | None]:
        """The answer derived from a cached one (:mod:`dpsql.answer_derive`), or None;
        and the key this query's answer is also stored under (its core's), or None.

        ``key_of(text)`` is the answer cache's key of a query text with this query's
        options and arguments.
        """
        derivation = split(sql)
        if derivation is None:
            return None, None
        core_key = key_of("core:" + derivation.core)
        core_key = core_key and CORE_PREFIX + core_key
        if derivation.post:
            base = self._answers.get(core_key, self._dataset, self._analyst)
            if base is not None:
                derived = derive(base, derivation)
                if derived is not None:
                    return derived, None
        return None, core_key if derivation.whole else None

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
            sql, options = _lift_and_bind(sql, params, self._catalog.limits)
            epsilon, delta, max_groups, max_rows = _options(
                options, epsilon, delta, max_groups, max_rows)
            bias_check = _switch(options.get("bias_check", bias_check), "bias_check")
            plan, expression, backend = self._prepare(sql, epsilon, delta, max_groups,
                                                      max_rows, mechanism, bias_check)
            sql_text = backend.to_sql(expression)
            statistics = _split(plan, alpha)
            selection = selection_summary(plan, alpha)
            outputs = predict_outputs(plan, alpha)
        except DpsqlError:
            raise
        except Exception as exc:  # noqa: BLE001 - dpsql's own bug; spends nothing
            raise _internal(exc, "analysing") from None
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
            notes=tuple(plan.notes) + _bias_cost_notes(plan),
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
        sql, options = _lift_and_bind(sql, params, self._catalog.limits)
        _, delta, max_groups, max_rows = _options(options, 1.0, delta, max_groups, max_rows)

        def worst(eps: float) -> float:
            try:
                plan, _, _ = self._prepare(sql, eps, delta, max_groups, max_rows, mechanism)
            except DpsqlError:
                raise
            except Exception as exc:  # noqa: BLE001 - dpsql's own bug; spends nothing
                raise _internal(exc, "analysing") from None
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

    def close(self) -> None:
        """Closes the backend connection (and its ledger); further queries raise an error."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None
            if self._owns_ledger:
                self._ledger.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._backend is None else "open"
        return (f"<dpsql.Connection {state} dataset={self._dataset!r} "
                f"analyst={self._analyst!r}>")

    # -- pipeline ---------------------------------------------------------------------

    def _check(self, plan: Plan, expression, backend: Backend):
        """Everything the backend and post-processing would refuse, found before charging.

        Returns the expression to run (date and timestamp keys fetched as text) and the
        function that makes its rows' keys canonical (:func:`dpsql.keys.read_keys`).
        """
        text_keys: list[int] = []
        double_keys: list[int] = []
        if plan.stats or plan.selection is not None:
            schema = backend.check(expression)
            statistic_types(plan, dict(schema), backend.reports_types)
            double_keys = [i for i, (name, t) in enumerate(schema) if name.startswith("__k")
                           and float_key_type(t)]
            key_types = [t for name, t in schema if name.startswith("__k")]
            for key, key_type in zip(plan.keys, key_types, strict=False):
                if not scalar_key_type(key_type):
                    # lists, structs, maps, variants, blobs, intervals and time-zoned
                    # timestamps do not come back as plain, comparable Python values
                    raise UnsupportedQueryError(
                        f"group key {key.expr.sql(dialect='duckdb')[:60]!r} has type "
                        f"{key_type[:40]}; group keys must be numbers, strings, booleans, "
                        "dates or timestamps")
            names = [name for name, t in schema if name.startswith("__k")
                     and temporal_key_type(t)]
            if names:
                expression = keys_as_text(expression, names)
                backend.check(expression)
                text_keys = [i for i, (name, _) in enumerate(schema) if name in names]
        else:
            key_types = ["VARCHAR" if k.domain and isinstance(k.domain[0], str) else "DOUBLE"
                         for k in plan.keys]
        check_postprocess(plan, key_types, self._catalog.limits)
        domain_floats = [i for i, k in enumerate(plan.keys)
                         if k.domain and isinstance(k.domain[0], float)]
        return expression, functools.partial(read_keys, nk=len(plan.keys), text=text_keys,
                                             floats=domain_floats, doubles=double_keys)

    def _schema_probe(self, sql, text: str, alpha: float) -> Result | None:
        """A query that provably returns no rows, answered from the catalog for free.

        See :mod:`dpsql.probe`: nothing runs on the data; the ledger logs it as
        answered at zero cost.
        """
        from dpsql.probe import schema_probe

        columns = schema_probe(sql, self._catalog)
        if columns is None:
            return None
        charge = self._ledger.charge(self._dataset, self._analyst, Cost(0.0, 0.0), text,
                                     self._cap)
        self._ledger.finish(charge, "answered", "no rows: answered from the catalog")
        return Result(columns=[name for name, _ in columns], rows=[], accuracy=[],
                      cost=(0.0, 0.0), sql="", alpha=alpha, notes=(
                          "the query returns no rows whatever the data: answered from "
                          "the catalog, nothing was run or spent",))

    def _check_alpha(self, alpha: float | None) -> float:
        if alpha is None:
            return self._alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
            raise PrivacyParameterError(f"alpha must be in (0, 1), got {alpha!r}")
        return float(alpha)

    def _prepare(self, sql, epsilon, delta, max_groups, max_rows, mechanism=None,
                 bias_check=False):
        backend = self._backend
        if backend is None:
            raise DpsqlError("connection is closed")
        if backend.catalog_tables is None:  # what the output check lets the SQL read
            cat = self._catalog
            backend.catalog_tables = frozenset(cat.tables)
            backend.catalog_names = frozenset(
                [*cat.tables, *(c for t in cat.tables.values() for c in t.columns)])
        limits = self._catalog.limits
        select = validate(normalize(parse(sql, limits.max_sql_length), self._catalog, limits),
                          limits)
        plan = analyze(select, self._catalog, epsilon, delta, max_groups, max_rows,
                       mechanism=mechanism or self._mechanism,
                       unique=lambda t, c: self._catalog.has_table(t)
                       and (c,) in self._unique(backend, t), bias_check=bias_check)
        for source in plan.scope.sources:
            for table in source.reads if source.derived is not None else [source.table]:
                self._check_schema(table, backend)
        for table, column in plan.scope.unique:
            if (column,) not in self._unique(backend, table):
                raise CatalogError(
                    f"table {table!r}, column {column!r}: the join to the user follows this "
                    "key, so it must be a PRIMARY KEY or UNIQUE in the database (dpsql "
                    "checks the database, not the catalog); a duplicated key would attach "
                    "one row to two users")
        stages.mark("analysis")
        expression = rewrite(plan, engine=EngineTraits(
            reuse_ctes=backend.supports_materialized_ctes))
        stages.mark("rewrite")
        return plan, expression, backend

    def _schema_version(self) -> Any:
        """The backend's schema version; the metadata this connection remembers (and
        its checked plans) are dropped when it changes."""
        backend = self._backend
        if backend is None:
            raise DpsqlError("connection is closed")
        version = backend.schema_version()
        if version is None or version != self._seen_schema:
            self._schemas_ok.clear()
            self._unique_cache.clear()
            self._plans.clear()
            self._seen_schema = version
        return version

    def _unique(self, backend: Backend, table: str) -> set[tuple[str, ...]]:
        """The backend's unique column sets of a table (metadata, cached per connection)."""
        if table not in self._unique_cache:
            self._unique_cache[table] = (backend.unique_columns(table)
                                         if backend.columns(table) is not None else set())
        return self._unique_cache[table]

    def _check_schema(self, table: Table, backend: Backend) -> None:
        """Checks the backend's column types against the catalog (metadata only)."""
        if table.name in self._schemas_ok:
            return
        actual = backend.columns(table.name)
        if actual is None:
            raise UnknownTableError(
                f"table {table.name!r} is in the catalog but not in the database"
            )
        for col in table.columns.values():
            if col.name not in actual:
                raise CatalogError(
                    f"table {table.name!r}, column {col.name!r}: in the catalog but not in "
                    "the database"
                )
            base = actual[col.name].split("(")[0].strip().upper()
            ok = base in _COMPATIBLE[col.type] or (
                col.type == "timestamp" and base.startswith("TIMESTAMP") and "[" not in base)
            if not ok:
                raise CatalogError(
                    f"table {table.name!r}, column {col.name!r}: the catalog says "
                    f"{col.type} but the database column is {actual[col.name]}"
                )
        collated = backend.nonbinary_collation_columns(table.name) & set(table.columns)
        if collated:
            # equal under the collation is not equal: 'A' and 'a' would be one group
            # whose label depends on which spelling the backend met first, and one user
            # key could match another user's rows
            raise CatalogError(
                f"table {table.name!r}, column {sorted(collated)[0]!r}: its collation "
                "compares strings that differ as equal (e.g. NOCASE), so dpsql cannot "
                "group by it, join on it or count it as a user; use a column with the "
                "default (binary) collation")
        self._schemas_ok.add(table.name)


#: Statistic types whose values come back as exact integers (Python ``int`` or a DECIMAL
#: without fraction digits).
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT", "UTINYINT",
                  "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT")
#: Statistic types whose values Python turns into a float without error.
_NUMBER_TYPES = (*_INTEGER_TYPES, "FLOAT", "DOUBLE", "REAL", "DECIMAL", "NUMERIC", "BOOLEAN")


def statistic_types(plan: Plan, schema: dict[str, str], reports_types: bool = True) -> None:
    """Decides, before the charge, from the SQL types the backend bound, how each
    statistic is read back: discrete noise only for a statistic whose column the engine
    types as an integer (a count on every engine); any other becomes real-valued (grid
    noise, the same ε), so that nothing after the charge tests a value for wholeness.

    A statistic's value analysis (``Statistic.integer``) can say "whole" where the
    engine computes a fraction (``SUM(CAST(age AS DOUBLE) // 2)`` is 20.5 for age 41):
    the engine's type decides. On SQLite, which reports no types, only counts are
    integers (COUNT returns an INTEGER there by definition).

    Raises:
        UnsupportedQueryError: (not charged) a statistic of a type that is not a number.
    """
    from dpsql.mechanisms.gaussian import gaussian
    from dpsql.mechanisms.laplace import laplace

    for stat in plan.stats:
        types = [schema.get(c) for c in stat.columns]
        for column, t in zip(stat.columns, types, strict=True):
            if t is not None and "[" not in t and t.split("(")[0].strip().upper() \
                    not in _NUMBER_TYPES:
                raise UnsupportedQueryError(
                    f"statistic {column} has type {t[:40]}; dpsql adds noise to numbers only")
        if not stat.integer:
            continue
        if reports_types:
            whole = all(t is not None and t.split("(")[0].strip().upper() in _INTEGER_TYPES
                        for t in types)
        else:
            whole = stat.rule.counts
        if whole or stat.mechanism is None or type(stat.mechanism).__name__ == "Constant":
            continue
        stat.integer = False
        if stat.rho is not None:
            stat.mechanism = gaussian(stat.linf, plan.max_groups, stat.rho, False, stat.width)
        elif stat.epsilon is not None and stat.name != "__users":
            stat.mechanism = laplace(stat.linf, plan.max_groups, stat.epsilon, False,
                                     stat.width)


def _check_database_file(database: Any) -> None:
    """Refuses a DuckDB or SQLite file that does not exist, before any ledger is created.

    Raises:
        BackendError: (nothing charged, nothing written) the file does not exist.
    """
    from dpsql.backends import ledger_home

    if isinstance(database, str) and database.startswith(("duckdb://", "sqlite://")):
        scheme, _, rest = database.partition("://")
        if rest and not rest.startswith("/"):  # duckdb://pums.duckdb reads as a host
            raise BackendError(
                f"{scheme}://{rest.split('?')[0]} names a host, not a file: a database "
                f"file comes after three slashes, {scheme}:///{rest.split('?')[0]}")
    path = ledger_home(database)
    if path is not None and not path.exists():
        raise BackendError(f"database file {str(path)!r} does not exist (nothing was "
                           "created, no ledger either); check the path, or create the "
                           "database first (e.g. dpsql.datasets.load_pums(path))")


def _lift_and_bind(sql, params, limits) -> tuple[Any, dict]:
    """Lifts a BigQuery ``WITH DIFFERENTIAL_PRIVACY OPTIONS`` clause, then binds ``?``.

    The clause comes off first (sqlglot does not parse it), then the parameters are
    bound into the rest (:func:`dpsql.params.bind_parameters`), as the DB-API does.
    Without parameters and without a ``?`` in the text, nothing is parsed here.

    Returns:
        The SQL to answer and the options the clause set.
    """
    if not isinstance(sql, str):
        if params is not None:
            raise ParameterError("parameters need the SQL as a string")
        return sql, {}
    sql, options = lift_dp_options(sql, limits)
    if params is not None or "?" in sql:
        sql = bind_parameters(sql, params)
    return sql, options


#: Names of the clock (``CURRENT_DATE``, ``NOW()``, ...): a query that reads it is not
#: cached, since :mod:`dpsql.client_sql` writes the time it was asked as a literal. Any
#: mention counts (in a string or a name too): caching less is always sound.
_CLOCK = re.compile(r"current_|now|today|getdate|sysdate|localtime", re.IGNORECASE)


def _options(options, epsilon, delta, max_groups, max_rows):
    """The query's own ``OPTIONS`` clause (``options``) over the keyword arguments."""
    epsilon = options.get("epsilon", epsilon)
    delta = options.get("delta", delta)
    max_groups = options.get("max_groups", max_groups)
    max_rows = options.get("max_rows", max_rows)
    if epsilon is None:
        raise PrivacyParameterError(
            "no epsilon: pass epsilon=... or write SELECT WITH DIFFERENTIAL_PRIVACY "
            "OPTIONS (epsilon = ...)")
    return epsilon, 0.0 if delta is None else delta, max_groups, max_rows


def _switch(value, name: str) -> bool:
    """A yes/no parameter: None is no; anything but a bool is refused (before the charge)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise PrivacyParameterError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def _asymmetry_notes(answer) -> tuple[str, ...]:
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


def _bias_cost_notes(plan: Plan) -> tuple[str, ...]:
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
            f"noisy user counts ({_mechanism_name(check)}, scale "
            f"{check.mechanism.scale:.4g} each): users, users over max_rows"
            + (", users over max_groups" if check.groups else ""),)


def _interrupted(exc: BaseException) -> bool:
    """Whether an engine's exception is a Ctrl-C that reached it (DuckDB's own)."""
    return isinstance(exc, duckdb.InterruptException) or (
        type(exc) is RuntimeError and str(exc) == "Query interrupted")


def _internal(exc: BaseException, stage: str, charged: bool = False) -> DpsqlError:
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


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return "default"


def _mechanism_name(stat) -> str:
    kind = type(stat.mechanism).__name__
    return {"DiscreteLaplace": "discrete Laplace", "GridLaplace": "grid Laplace",
            "DiscreteGaussian": "discrete Gaussian", "GridGaussian": "grid Gaussian",
            "Constant": "none (constant)"}.get(kind, kind)


def _split(plan: Plan, alpha: float) -> list[dict]:
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
            "mechanism": _mechanism_name(s),
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
            "mechanism": _mechanism_name(check),
            "scale": check.mechanism.scale,
            "half_width": check.mechanism.accuracy(alpha / len(check.columns)),
            "feeds": ("Result.bias",),
        })
    return out


def _demo_plan(sql: str, epsilon: float = 1.0, delta: float = 1e-6, seed: int = 0,
               **bounds) -> Plan:
    """Plan of a query over the bundled PUMS catalogs (doctests and fixtures)."""
    from dpsql.datasets import pums_catalog

    catalog = pums_catalog()
    return analyze(validate(normalize(parse(sql), catalog)), catalog, epsilon, delta, seed=seed,
                   **bounds)


__all__ = ["Connection", "connect"]
