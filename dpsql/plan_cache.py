"""The plan cache: a query asked again skips analysis, rewriting and checking.

:meth:`dpsql.Connection.execute` turns (SQL text, ε, δ, bounds, mechanism) into a
checked plan: the analysis (sensitivities, split, threshold), the rewritten tree, the
backend SQL that passed the totality and output checks and the engine's bind, and how
its rows are read back. All of that is a function of what the analysis read: the
query's text and privacy arguments, the catalog (limits included) and the database's
schema (column types, keys, collations). The cache keeps that result per connection,
keyed by all of it, so a repeated query only charges, runs, adds noise and
post-processes.

Soundness (why a hit answers exactly as a fresh analysis would):

* **The key holds every input of the analysis.** The exact SQL text, before the options
  clause is lifted (lifting is a function of the text, so the lifted options are in the
  key too); each privacy argument as (type, ``repr``), so ``1``, ``1.0``, ``True``,
  ``0.0`` and ``-0.0``, which Python hashes alike, stay apart and a value the analysis
  would refuse never finds the entry of one it accepted; the mechanism after the
  connection's default is applied; the catalog's content hash
  (:func:`catalog_fingerprint`); and the backend's schema version
  (:meth:`~dpsql.backends.base.Backend.schema_version`). Text normalisation is the
  identity on purpose: two texts that differ in any character are two entries, so no
  normalisation can merge queries of different meaning. A backend that cannot tell
  its schema version (None) gets no plan cache.
* **The value is what the checks passed.** It is stored only after
  :meth:`~dpsql.Connection.execute`'s checks returned, and it holds the backend SQL
  text those checks produced; the backend runs that text (:meth:`to_sql` finds it by
  the tree's identity). Nothing after the checks changes a plan:
  ``tests/test_plan_cache.py`` asserts that answering from a cached plan leaves its
  analysis, its tree and its SQL as they were.
* **What the key leaves out is decided after the cache.** The budget is checked by the
  charge, atomically, on every query; the confidence level ``alpha`` only shapes the
  error bars computed after the noise.
* **Randomness.** A cached plan keeps its L0 sampling seed (a literal in its SQL), so
  repeated queries keep the same groups per user; without the cache the seed is the
  same too (the connection's secret hashed with the query's text,
  :func:`dpsql.asking.l0_seed`). Each query stays (ε, δ)-DP: the seed is chosen
  independently of the data, and bounding with any fixed, data-independent seed has
  the declared sensitivity; the noise is fresh on every run.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from dpsql.analyze import Plan
from dpsql.catalog import Catalog

#: Plans kept per connection (least recently used first out).
CAPACITY = 256


@dataclass(frozen=True)
class Prepared:
    """A query as the checks passed it: run, add noise and post-process only.

    Attributes:
        plan: the analysis (statistics, mechanisms, split, keys, post-processing).
        expression: the rewritten tree (the backend finds its SQL by identity).
        read: makes the backend's rows' keys canonical (:func:`dpsql.keys.read_keys`).
        sql: the backend SQL the totality, output and bind checks passed.
        measure: the bias check's query (:mod:`dpsql.bias`), bound by the same checks,
            or None.
    """

    plan: Plan
    expression: exp.Expression
    read: Callable[[list], list]
    sql: str
    measure: exp.Expression | None = None


def typed(value: Any) -> tuple[str, str]:
    """A parameter as its type and exact ``repr``: values Python hashes alike (``1``,
    ``1.0``, ``True``; ``0.0``, ``-0.0``) and a numpy scalar beside a float stay apart."""
    kind = type(value)
    # an int in hex: repr() refuses integers past 4,300 digits (an analyst's max_rows)
    text = hex(value) if kind is int else repr(value)
    return f"{kind.__module__}.{kind.__qualname__}", text


def catalog_fingerprint(catalog: Catalog) -> str:
    """SHA-256 of everything in the catalog that an answer can depend on.

    ``repr`` of the frozen dataclasses is exact (floats as ``repr``, tuples and dicts in
    their declared order) and covers the tables, columns, bounds, domains, user paths,
    limits and ``data_version``. The budgets are left out: they decide whether a query
    may be charged, which the charge checks every time, not what it answers.
    """
    return hashlib.sha256(repr(replace(catalog, budget=None, analyst_budgets={}))
                          .encode()).hexdigest()


def plan_key(sql: Any, epsilon: Any, delta: Any, max_groups: Any, max_rows: Any,
             mechanism: Any, catalog: str, schema: Hashable | None) -> tuple | None:
    """The plan cache's key, or None when the query must not be cached.

    Args:
        sql: the text exactly as the analyst sent it (options clause included).
        epsilon, delta, max_groups, max_rows: the arguments as given (None included).
        mechanism: the mechanism after the connection's default is applied.
        catalog: :func:`catalog_fingerprint` of the connection's catalog.
        schema: the backend's schema version; None: unknown, nothing is cached.
    """
    if not isinstance(sql, str) or schema is None:
        return None
    return (sql, typed(epsilon), typed(delta), typed(max_groups), typed(max_rows),
            typed(mechanism), catalog, schema)


class PlanCache:
    """Checked plans by :func:`plan_key`, at most :data:`CAPACITY`, least recently used
    first out."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._entries: OrderedDict[tuple, Prepared] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple | None) -> Prepared | None:
        if key is None:
            return None
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        with contextlib.suppress(KeyError):  # evicted by another thread meanwhile
            self._entries.move_to_end(key)
        self.hits += 1
        return found

    def put(self, key: tuple | None, prepared: Prepared) -> None:
        if key is None or self.capacity <= 0:
            return
        self._entries[key] = prepared
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[tuple[tuple, Prepared]]:
        """``(key, prepared)`` of every cached plan, least recently used first."""
        return list(self._entries.items())
