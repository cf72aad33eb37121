"""The pipeline: parse → validate → analyze → rewrite → charge → execute → noise → post-process.

>>> import duckdb, dpsql
>>> from dpsql.datasets import load_pums, catalog_path
>>> db = duckdb.connect(); load_pums(db)
>>> conn = dpsql.connect(db, catalog=catalog_path("pums"), budget=(1.0, 1e-6))
>>> res = conn.execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", epsilon=0.5)
>>> res.columns, [row[0] for row in res.rows], res.cost
(['sex', 'n'], [0, 1], (0.5, 0.0))
>>> res.accuracy[0]          # 95% half-width of the noisy count; None for the key
(None, 6)
>>> conn.budget.spent
(0.5, 0.0)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpsql.accounting import Budget
from dpsql.analyze import Plan, analyze
from dpsql.backends import Backend, open_backend
from dpsql.catalog import Catalog, Table, load_catalog
from dpsql.errors import CatalogError, DpsqlError, PrivacyParameterError, UnknownTableError
from dpsql.noise import add_noise
from dpsql.parse import parse
from dpsql.postprocess import postprocess, stat_half_width
from dpsql.result import Explanation, Result
from dpsql.rewrite import rewrite
from dpsql.validate import validate

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
    catalog: str | Path | dict | Catalog,
    budget: tuple[float, float] | None = None,
    alpha: float = 0.05,
) -> Connection:
    """Opens a private connection.

    Args:
        database: a DuckDB file path (opened read-only), ``":memory:"``, or an open
            ``duckdb.DuckDBPyConnection``.
        catalog: a catalog YAML path, a dict, or a loaded :class:`~dpsql.catalog.Catalog`.
        budget: the (epsilon, delta) this connection may spend in total; defaults to the
            catalog's ``budget``.
        alpha: error bars are ``1 − alpha`` confidence intervals (default 95%).

    Raises:
        CatalogError: the catalog is malformed.
        BackendError: the database cannot be opened.
        PrivacyParameterError: no budget, or an invalid one.
    """
    return Connection(database, catalog, budget, alpha)


class Connection:
    """A connection that answers aggregate SQL with differential privacy.

    The backend connection is private to this object and never handed out.
    """

    def __init__(self, database: Any, catalog: Any, budget=None, alpha: float = 0.05):
        self._catalog = load_catalog(catalog)
        if budget is None:
            budget = self._catalog.budget
        if budget is None:
            raise PrivacyParameterError(
                "no privacy budget: pass budget=(epsilon, delta) or declare "
                "'budget: {epsilon: ..., delta: ...}' in the catalog"
            )
        if not (isinstance(budget, tuple | list) and len(budget) == 2):
            raise PrivacyParameterError(f"budget must be an (epsilon, delta) pair, got {budget!r}")
        if not 0 < alpha < 1:
            raise PrivacyParameterError(f"alpha must be in (0, 1), got {alpha}")
        self._budget = Budget(*budget)
        self._alpha = alpha
        self._backend: Backend | None = open_backend(database)
        self._schemas_ok: set[str] = set()

    # -- public API -------------------------------------------------------------------

    @property
    def budget(self) -> Budget:
        """The connection's budget: ``.spent`` and ``.remaining`` as (epsilon, delta)."""
        return self._budget

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def execute(
        self,
        sql: str,
        epsilon: float,
        delta: float = 0.0,
        max_groups: int | None = None,
        max_rows: int | None = None,
    ) -> Result:
        """Answers one aggregate query with (epsilon, delta)-DP and charges the budget.

        Args:
            sql: one SELECT over a catalog table.
            epsilon: the query's total epsilon, split across its noisy statistics.
            delta: the query's delta; needed (> 0) when group keys come from the data.
            max_groups: override of the table's ``max_groups`` for this query.
            max_rows: override of the table's ``max_rows`` for this query.

        Raises:
            DpsqlError subclasses; only :class:`~dpsql.errors.BackendError` comes after
            the charge (and keeps it).
        """
        plan, expression, backend = self._prepare(sql, epsilon, delta, max_groups, max_rows)
        if plan.stats or plan.selection is not None:
            backend.check(expression)
        self._budget.charge(plan.cost)
        if plan.stats or plan.selection is not None:
            columns, rows = backend.execute(expression)
        else:  # only public keys are released: no data needed
            columns, rows = [k.name for k in plan.keys], []
        noisy = add_noise(plan, columns, rows)
        answer = postprocess(plan, noisy, self._alpha)
        return Result(
            columns=answer.columns,
            rows=answer.rows,
            accuracy=answer.accuracy,
            cost=plan.cost,
            sql=backend.to_sql(expression),
            alpha=self._alpha,
            split=_split(plan, self._alpha),
            notes=tuple(plan.notes),
        )

    def explain(
        self,
        sql: str,
        epsilon: float,
        delta: float = 0.0,
        max_groups: int | None = None,
        max_rows: int | None = None,
    ) -> Explanation:
        """Shows the rewritten SQL, sensitivities, noise and predicted error; spends nothing."""
        plan, expression, backend = self._prepare(sql, epsilon, delta, max_groups, max_rows)
        selection = None
        if plan.selection is not None:
            eps, dlt = plan.selection.privacy_map()
            selection = {"threshold": plan.selection.threshold, "epsilon": eps, "delta": dlt,
                         "scale": plan.selection.noise.scale}
        return Explanation(
            sql=backend.to_sql(expression),
            statistics=_split(plan, self._alpha),
            partition_selection=selection,
            cost=plan.cost,
            max_groups=plan.max_groups,
            max_rows=plan.max_rows,
            alpha=self._alpha,
            notes=tuple(plan.notes),
        )

    def close(self) -> None:
        """Closes the backend connection; further queries raise an error."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._backend is None else "open"
        return f"<dpsql.Connection {state} dataset={self._catalog.dataset!r} {self._budget!r}>"

    # -- pipeline ---------------------------------------------------------------------

    def _prepare(self, sql, epsilon, delta, max_groups, max_rows):
        backend = self._backend
        if backend is None:
            raise DpsqlError("connection is closed")
        select = validate(parse(sql))
        plan = analyze(select, self._catalog, epsilon, delta, max_groups, max_rows)
        self._check_schema(plan.table, backend)
        return plan, rewrite(plan), backend

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
            base = actual[col.name].split("(")[0].upper()
            if not base.startswith(_COMPATIBLE[col.type]):
                raise CatalogError(
                    f"table {table.name!r}, column {col.name!r}: the catalog says "
                    f"{col.type} but the database column is {actual[col.name]}"
                )
        self._schemas_ok.add(table.name)


def _split(plan: Plan, alpha: float) -> list[dict]:
    out = []
    for s in plan.stats:
        out.append({
            "name": s.name,
            "statistic": s.label,
            "linf": s.linf,
            "l1": s.linf * plan.max_groups,
            "epsilon": s.epsilon,
            "mechanism": "discrete Laplace" if s.integer else "grid Laplace",
            "scale": s.mechanism.scale,
            "half_width": stat_half_width(plan, s.name, alpha),
        })
    return out


def _demo_plan(sql: str, epsilon: float = 1.0, delta: float = 1e-6, seed: int = 0,
               **bounds) -> Plan:
    """Plan of a query over the bundled PUMS catalogs (doctests and fixtures)."""
    from dpsql.datasets import pums_catalog

    return analyze(validate(parse(sql)), pums_catalog(), epsilon, delta, seed=seed, **bounds)


__all__ = ["Connection", "connect"]
