"""Where one query's time goes: an opt-in clock that :meth:`dpsql.Connection.execute`
marks at each stage boundary (the benchmark's own-time breakdown, ``python -m
benchmarks.overhead``).

Off (the default) a mark is one context-variable read; nothing is recorded. On, each
mark charges the time since the previous mark to the stage just finished, so the stages
add up to the whole call. Stage names, in the order ``execute`` runs them:

* ``options``: arguments, the BigQuery options clause, the schema probe and the cache
  look-ups (answer cache, plan cache, the schema version);
* ``analysis``: parse, normalise, validate, analyse, the catalog-against-schema checks;
* ``rewrite``: the rewrite passes;
* ``to_sql``: the backend's SQL with its totality probes and output checks, the bind
  (``DESCRIBE``-like) check and the post-processing check;
* ``ledger``: the budget pre-check, the charge (one durable commit) and queueing its outcome;
* ``backend``: the backend running the SQL (not the engine's own time);
* ``noise``: reading keys, noise, post-processing, building the Result, storing it in
  the answer cache.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar

STAGES = ("options", "analysis", "rewrite", "to_sql", "ledger", "backend", "noise")

_clock: ContextVar[StageClock | None] = ContextVar("dpsql_stage_clock", default=None)


class StageClock:
    """Seconds per stage, summed over the calls it watched."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        #: the calling thread's CPU seconds per stage (a statement the backend runs on
        #: the calling thread counts in ``backend``)
        self.cpu: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._last = time.perf_counter()
        self._last_cpu = time.thread_time()

    def start(self) -> None:
        self._last = time.perf_counter()
        self._last_cpu = time.thread_time()

    def mark(self, stage: str) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        self.seconds[stage] += now - self._last
        self.cpu[stage] += cpu - self._last_cpu
        self._last, self._last_cpu = now, cpu


def mark(stage: str) -> None:
    """Charges the time since the last mark to ``stage`` (when a clock is on)."""
    clock = _clock.get()
    if clock is not None:
        clock.mark(stage)


@contextmanager
def timing():
    """Turns a :class:`StageClock` on for the calls inside (this thread or task only)."""
    clock = StageClock()
    token = _clock.set(clock)
    try:
        yield clock
    finally:
        _clock.reset(token)


def start() -> None:
    """Starts a new call: time before it is charged to no stage."""
    clock = _clock.get()
    if clock is not None:
        clock.start()
