"""One asking of a query, as :meth:`dpsql.Connection.execute` reads it: the text the
ledger keeps, the SQL with its parameters bound, the options its ``OPTIONS`` clause set
over the arguments, and the text the plan and answer caches key on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dpsql.bigquery_options import lift_dp_options
from dpsql.errors import ParameterError, PrivacyParameterError
from dpsql.params import bind_parameters


@dataclass
class Ask:
    """One asking of :meth:`dpsql.Connection.execute`, as it is read: the text the ledger
    keeps, the SQL with its parameters bound, its options and arguments, and the
    caches' keys."""

    text: str
    epsilon: Any = None
    delta: Any = None
    max_groups: Any = None
    max_rows: Any = None
    mechanism: str | None = None
    sql: Any = None
    options: dict = field(default_factory=dict)
    alpha: float = 0.05
    intervals: bool = False
    bias_check: bool = False
    rest: list = field(default_factory=list)
    keyed: str | None = None
    version: Any = None
    answer_key: str | None = None
    core_key: str | None = None
    frame_key: str | None = None


def lift_and_bind(sql, params, limits) -> tuple[Any, dict]:
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
CLOCK = re.compile(r"current_|now|today|getdate|sysdate|localtime", re.IGNORECASE)


def query_options(options, epsilon, delta, max_groups, max_rows):
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


def switch(value, name: str) -> bool:
    """A yes/no parameter: None is no; anything but a bool is refused (before the charge)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise PrivacyParameterError(f"{name} must be True or False, got {type(value).__name__}")
    return value
