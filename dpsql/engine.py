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

import functools
import getpass
import logging
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlglot import exp

from dpsql import stages
from dpsql import types as sqltypes
from dpsql.accounting import Cost
from dpsql.analyze import Plan, analyze
from dpsql.answer_cache import AnswerCache
from dpsql.answer_flow import Answering
from dpsql.answering import internal_error, interrupted, settle_grids, statistic_types
from dpsql.asking import Ask, key_parts, l0_seed, lift_and_bind, query_options, switch
from dpsql.backends import Backend, open_backend
from dpsql.bias import bias_query
from dpsql.catalog import Catalog, Table, load_catalog
from dpsql.database_file import check_database_file, default_ledger_path
from dpsql.decimal_context import own_context
from dpsql.decimal_sums import choose_sums
from dpsql.errors import (
    BudgetExhaustedError,
    CatalogError,
    DpsqlError,
    LedgerError,
    PrivacyParameterError,
    QueryCancelled,
    UnknownTableError,
    UnsupportedQueryError,
)
from dpsql.explaining import Explaining
from dpsql.keys import float_key_type, keys_as_text, read_keys, scalar_key_type, temporal_key_type
from dpsql.ledger import ALL, BudgetView, InFlight, Ledger, Running
from dpsql.mechanisms import DEFAULT_MECHANISM
from dpsql.mechanisms import mechanism as mechanism_family
from dpsql.normalize import normalize
from dpsql.params import refuse_number
from dpsql.parse import parse
from dpsql.plan_cache import (
    CAPACITY,
    PlanCache,
    Prepared,
    catalog_fingerprint,
    plan_key,
)
from dpsql.postprocess import check_postprocess
from dpsql.proven_run import run_proven
from dpsql.public_keys import prove_in_domain
from dpsql.result import Result
from dpsql.rewrite import EngineTraits, rewrite
from dpsql.validate import validate

_log = logging.getLogger("dpsql.owner")

def connect(
    database: Any,
    catalog: str | Path | dict | Catalog | None = None,
    budget: tuple[float, float] | None = None,
    *,
    ledger: str | Path | Ledger | None = None,
    analyst: str | None = None,
    alpha: float = 0.05,
    mechanism: str = DEFAULT_MECHANISM,
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


class Connection(Explaining, Answering):
    """A connection that answers aggregate SQL with differential privacy.

    The backend connection is private to this object and never handed out.
    """

    def __init__(self, database: Any, catalog: Any = None, budget=None, *, ledger=None,
                 analyst: str | None = None, alpha: float = 0.05,
                 mechanism: str = DEFAULT_MECHANISM, intervals: bool = False,
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
        mechanism_family(mechanism)  # refuses an unknown name
        if not isinstance(intervals, bool):
            raise PrivacyParameterError(f"intervals must be True or False, got {intervals!r}")
        self._alpha = alpha
        self._mechanism = mechanism
        self._intervals = intervals
        self._analyst = analyst or _os_user()
        check_analyst(self._analyst)
        self._dataset = self._catalog.dataset
        self._owns_ledger = not isinstance(ledger, Ledger)
        self._in_flight = InFlight()
        check_database_file(database)  # a missing database gets no ledger file either
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
            self._cap = None if budget is None else (budget, Running())
            self._backend: Backend | None = open_backend(database, limits=self._catalog.limits)
        except BaseException:
            if self._owns_ledger:  # a refused connection leaves no ledger file open
                ledger.close()
            raise
        self._schemas_ok: set[str] = set()
        self._unique_cache: dict[str, set[tuple[str, ...]]] = {}
        self._catalog_fp = catalog_fingerprint(self._catalog)
        self._plans = PlanCache(CAPACITY if plan_cache else 0)
        self._averaged_plans: OrderedDict = OrderedDict()  # answer_flow._plan_of
        self._seen_schema: Any = None
        # the L0 step's seeds: this secret hashed with each query's text (l0_seed)
        self._seed_secret = secrets.token_bytes(32)
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
            delta: the query's delta (default 0); > 0 for keys from the data or Gaussian.
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
        ask = Ask(text=sql if isinstance(sql, str) else repr(sql), epsilon=epsilon,
                   delta=delta, max_groups=max_groups, max_rows=max_rows,
                   mechanism=mechanism)
        try:
            self._read(ask, sql, params, alpha, intervals, bias_check)
            found = self._averaged(ask, self._cached(ask) or self._prepared(ask))
            if isinstance(found, Result):  # cached, a schema probe, an AVG from SUM, COUNT
                return found
            self._backend.ready()  # what running needs, before the charge (Backend.ready)
        except DpsqlError as exc:
            self._ledger.refuse(self._dataset, self._analyst, ask.text,
                                f"{type(exc).__name__}: {exc}")
            raise
        except Exception as exc:  # noqa: BLE001 - dpsql's own bug, found before the charge
            if interrupted(exc):  # Ctrl-C reached the engine while it planned
                raise QueryCancelled(charged=False) from None
            err = internal_error(exc, "analysing")
            self._ledger.refuse(self._dataset, self._analyst, ask.text,
                                f"{type(err).__name__}: {err}")
            raise err from None
        except KeyboardInterrupt:  # Ctrl-C before the charge: nothing was spent
            raise QueryCancelled(charged=False) from None
        with self._in_flight:  # close() from another thread waits for its outcome
            try:
                charge = self._ledger.charge(self._dataset, self._analyst, found.plan.charge,
                                             ask.text, self._cap)
            except KeyboardInterrupt:  # Ctrl-C in the charge: it may have committed
                raise QueryCancelled("query cancelled while it was being charged; the charge"
                                     " may have been recorded (see dpsql budget log)") from None
            stages.mark("ledger")
            result = self._answer_charged(charge, found, ask)
            self._settle(charge, ask, result)
            return result

    def _read(self, ask: Ask, sql, params, alpha, intervals, bias_check) -> None:
        """Reads the query's text, parameters and options into ``ask`` (nothing parsed
        unless it has parameters), and the caches' key text."""
        refuse_number(params, "execute")
        ask.alpha = self._check_alpha(alpha)
        ask.sql, ask.options = lift_and_bind(sql, params, self._catalog.limits)
        if params is not None:
            ask.text = ask.sql  # the ledger keeps what ran: the SQL with its literals
        intervals = ask.options.get("intervals", intervals)
        ask.bias_check = switch(ask.options.get("bias_check", bias_check), "bias_check")
        ask.intervals = switch(self._intervals if intervals is None else intervals,
                                "intervals")
        # the caches' key: the text with its parameters bound as literals, the options
        # it carried and every argument, each typed (1, 1.0 and True apart) (None: not
        # cached; a query that reads the clock means another query tomorrow)
        ask.rest, ask.keyed = key_parts(ask.sql, ask.options, ask.bias_check)
        ask.version = self._schema_version()

    def _prepared(self, ask: Ask) -> Prepared | Result:
        """The checked plan of the query: from the plan cache, or analysed, rewritten,
        checked and cached now (a client's schema probe is answered instead)."""
        key = plan_key(ask.keyed, ask.epsilon, ask.delta, ask.max_groups, ask.max_rows,
                       ask.mechanism or self._mechanism, self._catalog_fp, ask.version)
        prepared = self._plans.get(key)
        if prepared is not None:  # checked before: only charge, run, add noise
            stages.mark("options")
            return prepared
        # the analyst's SQL is parsed once here: the probe reads it, analysis takes it on
        tree = parse(ask.sql, self._catalog.limits.max_sql_length) \
            if isinstance(ask.sql, str) else ask.sql
        probe = self._schema_probe(tree, ask.text, ask.alpha)
        if probe is not None:
            return probe
        epsilon, delta, max_groups, max_rows = query_options(
            ask.options, ask.epsilon, ask.delta, ask.max_groups, ask.max_rows)
        stages.mark("options")
        plan, expression, backend = self._prepare(
            tree, epsilon, delta, max_groups, max_rows, ask.mechanism, ask.bias_check,
            seed=l0_seed(self._seed_secret, ask.keyed))
        # a query that cannot fit is refused before the engine binds it (fast; no read
        # where the last charge's limits still fit it: Ledger.fits); the charge still
        # decides atomically
        reason = self.budget.refusal(plan.charge)
        if reason is not None:
            raise BudgetExhaustedError(reason)
        stages.mark("ledger")
        # from the rewritten query as built (before _check reads temporal keys as
        # text): its __per_user CTE is the table the statistics read
        measure = bias_query(plan, expression)
        expression, read, shown = run_proven(  # the SQL shown: explain's
            plan, backend, self._check, *self._check(plan, expression, backend))
        if measure is not None:
            backend.check(measure)  # binds it, reads nothing
        prepared = Prepared(plan, expression, read, shown, measure)
        self._plans.put(key, prepared)
        stages.mark("to_sql")
        return prepared

    def close(self) -> None:
        """Closes the backend connection (and its ledger); further queries raise an error."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None
            if self._owns_ledger:
                self._in_flight.wait_others()
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

    @own_context  # (dpsql.decimal_context)
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
            expression, schema = settle_grids(plan, expression, schema, backend)
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
        domain_floats = [i for i, k in enumerate(plan.keys)  # any: [1, 0.1] too
                         if k.domain and any(isinstance(v, float) for v in k.domain)]
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

    @own_context
    def _prepare(self, sql, epsilon, delta, max_groups, max_rows, mechanism=None,
                 bias_check=False, seed=None):
        backend = self._backend
        if backend is None:
            raise DpsqlError("connection is closed")
        if backend.catalog_tables is None:  # what the output check lets the SQL read
            cat = self._catalog
            backend.catalog_tables = frozenset(cat.tables)
            backend.catalog_names = frozenset(
                [*cat.tables, *(c for t in cat.tables.values() for c in t.columns)])
        limits = self._catalog.limits
        if not isinstance(sql, exp.Expression):  # the SQL text (explain, epsilon_for)
            sql = parse(sql, limits.max_sql_length)
        select = validate(normalize(sql, self._catalog, limits), limits)
        plan = analyze(select, self._catalog, epsilon, delta, max_groups, max_rows,
                       mechanism=mechanism or self._mechanism,
                       unique=lambda t, c: self._catalog.has_table(t)
                       and (c,) in self._unique(backend, t), bias_check=bias_check,
                       seed=seed)
        for source in plan.scope.sources:
            for table in source.reads if source.derived is not None else [source.table]:
                self._check_schema(table, backend)
        for table, column in plan.scope.unique:
            if (column,) not in self._unique(backend, table):
                raise CatalogError(
                    f"table {table!r}, column {column!r}: the join to the user follows this "
                    "key, so it must be a PRIMARY KEY or UNIQUE in the database (dpsql checks"
                    " the database, not the catalog); a duplicated key would attach one row "
                    "to two users")
        stages.mark("analysis")
        traits = EngineTraits.of(backend)
        choose_sums(plan, traits, backend)  # recorded once, read by the rewrite and the noise
        prove_in_domain(plan, backend)  # keys of public tables that need no domain filter
        expression = rewrite(plan, engine=traits)
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
            if not sqltypes.catalog_accepts(col.type, actual[col.name]):
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


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return "default"


def _demo_plan(sql: str, epsilon: float = 1.0, delta: float = 1e-6, seed: int = 0,
               catalog: str = "pums", **bounds) -> Plan:
    """Plan of a query over a bundled catalog (the PUMS ones; doctests and fixtures)."""
    from dpsql.datasets import catalog_path, load_catalog, pums_catalog

    catalog = pums_catalog() if catalog == "pums" else load_catalog(catalog_path(catalog))
    return analyze(validate(normalize(parse(sql), catalog)), catalog, epsilon, delta, seed=seed,
                   **bounds)


__all__ = ["Connection", "connect"]
