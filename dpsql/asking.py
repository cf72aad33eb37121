"""One asking of a query, as :meth:`dpsql.Connection.execute` reads it: the text the
ledger keeps, the SQL with its parameters bound, the options its ``OPTIONS`` clause set
over the arguments, and the text the plan and answer caches key on."""

from __future__ import annotations

import functools
import hashlib
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


@functools.lru_cache(maxsize=256)
def reads_clock(sql: str) -> bool:
    """Whether the text may read the clock (:data:`CLOCK`), remembered per text: the
    search took 24 us of TPC-H q1's 490 characters, asked again on every run."""
    return CLOCK.search(sql) is not None


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


def key_parts(sql, options: dict, bias_check: bool) -> tuple[list[str], str | None]:
    """What the caches key a query by, besides ε, δ and the connection's versions: the
    typed options and switch (``Ask.rest``), and the key text (``Ask.keyed``: the SQL
    with them; None for a query that reads the clock or is not text).

    :meth:`dpsql.Connection.explain` reads the same text, so its L0 seed
    (:func:`l0_seed`) and rewritten SQL are those ``execute`` runs.
    """
    from dpsql.plan_cache import typed

    rest = [repr(sorted((k, typed(v)) for k, v in options.items())), repr(typed(bias_check))]
    keyed = None if not isinstance(sql, str) or reads_clock(sql) \
        else "\x00".join([sql, *rest])
    return rest, keyed


def l0_seed(secret: bytes, keyed: str | None) -> int | None:
    """The L0 sampling seed of a query: the connection's secret hashed with its key text.

    The seed orders each user's groups (and distinct values) in the L0 step
    (:mod:`dpsql.rewrite.bound_groups`); it is written into the final SQL as a literal.
    A fresh random seed per asking made every final text new, so every memo keyed by
    that text (the output check's, DuckDB's bind and plan check, the probes' types)
    missed on every asking; this seed is the same each time one connection asks one
    query, and a plan from the plan cache keeps its seed anyway
    (:mod:`dpsql.plan_cache`).

    Why it is sound (the seed need be neither secret nor fresh): the L0 step keeps, for
    each user, groups chosen by a function of that user's own rows and the seed only.
    For *every* fixed seed, adding or removing one user therefore changes that user's
    contributions only, and the statistics' sensitivity is the one the analysis
    declared; the noise, drawn fresh on every run, makes each run (ε, δ)-DP for each
    fixed seed, hence for any seed chosen without looking at the data. This one is a
    function of a random per-connection secret and the query's text (which the analyst
    wrote without the data), never of the data, so the argument holds even for an
    analyst who knew the seed. Repeated runs compose in the ledger as before: each is
    DP conditional on the seed, which is independent of the data. The secret keeps the
    choice from being the same for every connection, so a bias of one choice of groups
    does not repeat in every session.

    Args:
        secret: the connection's random secret (32 bytes, drawn when it opened).
        keyed: the caches' key text of the query (:attr:`Ask.keyed`: the SQL with its
            parameters bound, its options and arguments), or None when the query is not
            cached (it reads the clock, or is not text): then None, and the analysis
            draws a fresh random seed.

    Returns:
        A seed in [0, 2**31), like the analysis's own random draw, or None.
    """
    if keyed is None:
        return None
    digest = hashlib.blake2b(keyed.encode("utf-8", "surrogatepass"), key=secret,
                             digest_size=8, person=b"dpsql-l0-seed").digest()
    return int.from_bytes(digest, "big") >> 33
