"""Measurements: latency with a stage breakdown, memory, accuracy, sampler throughput.

Nothing in dpsql is patched: the stage breakdown times the public pieces of the
pipeline one after another, in the order ``Connection.execute`` runs them: ``parse``,
``validate``, ``analyze``, ``rewrite`` (with the transpile to DuckDB SQL), ``check``
(what execute does before charging: DuckDB's ``DESCRIBE`` of the rewritten query and
``check_postprocess``), ``accounting`` (a charge and its outcome in a separate in-memory
ledger), ``backend`` (the rewritten SQL on a separate DuckDB connection), ``add_noise``
and ``postprocess``. Shares are of the pieces' total; ``unattributed_ms`` is the median of
``Connection.execute`` minus that total (the cached schema check, building the Result,
and run-to-run noise, which dominates at large sizes).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np

import dpsql
from benchmarks.queries import Query
from dpsql.analyze import analyze
from dpsql.ledger import ALL, Ledger
from dpsql.noise import add_noise
from dpsql.parse import parse
from dpsql.postprocess import check_postprocess, postprocess
from dpsql.rewrite import rewrite
from dpsql.scratch import settle
from dpsql.validate import validate

#: A budget no benchmark run exhausts (each connection has its own in-memory ledger).
BUDGET = (1e9, 0.5)
ANALYST = "bench"
#: The configuration dpsql opens DuckDB files with; the benchmark's own connection uses
#: the same, so both share one DuckDB instance (same buffer pool, same memory counters).
from dpsql.backends.duckdb import _LOCKED as DUCKDB_CONFIG  # noqa: E402  (dpsql's own)

STAGES = ("parse", "validate", "analyze", "rewrite", "check", "accounting", "backend", "noise",
          "postprocess")


def open_private(database: Path, catalog: dict) -> dpsql.Connection:
    return dpsql.connect(str(database), catalog=catalog, budget=BUDGET, ledger=":memory:",
                         analyst=ANALYST)


def open_plain(database: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(database), read_only=True, config=dict(DUCKDB_CONFIG))


def ran_sql(conn: dpsql.Connection, query: Query, epsilon: float) -> str:
    """The SQL text the backend runs for ``query`` (a developer's view: the analyst sees
    ``Result.sql``, which shows the L0 window even where the check lets it be left out)."""
    backend = conn._backend
    texts: list[str] = []
    execute = backend.execute

    def spy(expression):
        texts.append(backend.to_sql(expression))
        return execute(expression)

    backend.execute = spy
    try:
        conn.execute(query.sql, epsilon=epsilon, delta=query.delta)
    finally:
        del backend.execute
    return texts[-1] if texts else ""


def warm(plain: duckdb.DuckDBPyConnection, tables: tuple[str, ...]) -> None:
    """Reads every column of ``tables`` once so that no timed run pays for I/O."""
    for table in tables:
        cols = [r[0] for r in plain.execute(f"DESCRIBE {table}").fetchall()]
        plain.execute(f"SELECT {', '.join(f'sum(hash({c}))' for c in cols)} "
                      f"FROM {table}").fetchall()


def shape(sql: str) -> dict[str, bool]:
    """What dpsql's rewritten SQL does beyond the plain query.

    ``per_user_aggregate``: it aggregates per (user, group) first (False where the
    database keeps the user key unique, or rows are their own users); ``l0_window``: it
    keeps at most ``max_groups`` groups per user with a ``ROW_NUMBER`` window.
    """
    return {"per_user_aggregate": "__per_user" in sql, "l0_window": "ROW_NUMBER" in sql.upper()}


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


#: Most interleaved rounds a query is timed in, and the time under which rounds go on
#: past ``Config.runs`` (small queries get more: their medians are noisy).
MAX_RUNS = 25
ROUNDS_BUDGET_S = 1.0


def latency(conn: dpsql.Connection, plain: duckdb.DuckDBPyConnection, query: Query,
            runs: int, stage_runs: int, epsilon: float, tick: Callable[[], None]) -> dict:
    """Medians of the private, plain and floor query, interleaved: ``runs`` rounds, and
    more (up to :data:`MAX_RUNS`) while the rounds so far took under
    :data:`ROUNDS_BUDGET_S`: a median of 5 of a 5 ms query on a shared 2-core machine
    moved by 0.3x between runs of the report, the same SQL."""
    private, plain_t, floor_t = [], [], []
    last = []
    start = time.perf_counter()
    rounds = 0
    while rounds < runs or (rounds < MAX_RUNS
                            and time.perf_counter() - start < ROUNDS_BUDGET_S):
        rounds += 1
        private.append(_timed(lambda: last.append(conn.execute(query.sql, epsilon=epsilon,
                                                               delta=query.delta))))
        # post-processing's databases are opened ahead of use on a background thread
        # (dpsql.scratch): let it finish, untimed, so it does not slow the plain query
        settle()
        plain_t.append(_timed(lambda: plain.execute(query.sql).fetchall()))
        floor_t.append(_timed(lambda: plain.execute(query.floor).fetchall()))
        if rounds <= runs:
            tick()
    out = {
        "private_ms": _ms(statistics.median(private)),
        "plain_ms": _ms(statistics.median(plain_t)),
        "floor_ms": _ms(statistics.median(floor_t)),
        "runs_ms": {"private": [_ms(t) for t in private], "plain": [_ms(t) for t in plain_t],
                    "floor": [_ms(t) for t in floor_t]},
    }
    out["shape"] = shape(last[-1].sql)
    # the window may be shown yet not run, where one_per_user keys are checked on the
    # data (dpsql.one_per_user): what ran is read from the backend, untimed
    out["shape"]["l0_window_ran"] = "ROW_NUMBER" in ran_sql(conn, query, epsilon).upper()
    out["private_over_plain"] = out["private_ms"] / out["plain_ms"]
    out["private_over_floor"] = out["private_ms"] / out["floor_ms"]
    out["floor_over_plain"] = out["floor_ms"] / out["plain_ms"]
    stages = [pipeline_stages(conn.catalog, plain, query, epsilon) for _ in range(stage_runs)]
    tick()
    med = {s: _ms(statistics.median(st[s] for st in stages)) for s in STAGES}
    pieces = sum(med.values())
    out["stages_ms"] = med
    out["stage_share"] = {s: v / pieces for s, v in med.items()}
    # execute's own time beyond the pieces (schema check, Result), plus run-to-run noise
    out["unattributed_ms"] = out["private_ms"] - pieces
    out["stage_runs"] = stage_runs
    out["memory"] = memory(conn, plain, query, epsilon)
    tick()
    return out


def pipeline_stages(catalog, plain: duckdb.DuckDBPyConnection, query: Query,
                    epsilon: float, alpha: float = 0.05) -> dict[str, float]:
    """One run of the pipeline, piece by piece; seconds per stage."""
    t0 = time.perf_counter()
    tree = parse(query.sql)
    t1 = time.perf_counter()
    select = validate(tree)
    t2 = time.perf_counter()
    plan = analyze(select, catalog, epsilon, query.delta)
    t3 = time.perf_counter()
    sql = rewrite(plan).sql(dialect="duckdb")
    t4 = time.perf_counter()
    # what execute checks before charging: the backend plans the query, and the
    # post-processing query is checked against the key types
    schema = plain.execute("DESCRIBE " + sql).fetchall()
    check_postprocess(plan, [r[1] for r in schema if r[0].startswith("__k")])
    t5 = time.perf_counter()
    ledger = _StageLedger.get(catalog.dataset)
    t6 = time.perf_counter()
    ledger.finish(ledger.charge(catalog.dataset, ANALYST, plan.charge, query.sql), "answered")
    t7 = time.perf_counter()
    cur = plain.execute(sql)
    columns = [d[0] for d in cur.description]
    rows = cur.fetchall()
    t8 = time.perf_counter()
    noisy = add_noise(plan, columns, rows)
    t9 = time.perf_counter()
    postprocess(plan, noisy, alpha)
    t10 = time.perf_counter()
    t = dict(parse=t1 - t0, validate=t2 - t1, analyze=t3 - t2, rewrite=t4 - t3,
             check=t5 - t4, accounting=t7 - t6, backend=t8 - t7, noise=t9 - t8,
             postprocess=t10 - t9)
    return t


class _StageLedger:
    """One in-memory ledger for the stage runs (charges accumulate, as in a session)."""

    ledger: Ledger | None = None

    @classmethod
    def get(cls, dataset: str) -> Ledger:
        if cls.ledger is None:
            cls.ledger = Ledger(":memory:")
        cls.ledger.ensure_budget(dataset, BUDGET, ALL, "benchmark")
        return cls.ledger


def memory(conn: dpsql.Connection, plain: duckdb.DuckDBPyConnection, query: Query,
           epsilon: float) -> dict:
    """Peak memory of one private query: Python (tracemalloc) and DuckDB (sampled).

    DuckDB's memory is ``duckdb_memory()`` summed over tags, polled every 5 ms from a
    cursor of the benchmark's connection, which shares the DuckDB instance dpsql opened
    (same file, same configuration); it is a sampled peak of the buffer manager, not of
    the process.
    """
    peak = [0]
    stop = threading.Event()
    cur = plain.cursor()

    def poll() -> None:
        while not stop.is_set():
            used = cur.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()
            peak[0] = max(peak[0], int(used[0] or 0))
            stop.wait(0.005)

    thread = threading.Thread(target=poll, daemon=True)
    tracemalloc.start()
    thread.start()
    try:
        conn.execute(query.sql, epsilon=epsilon, delta=query.delta)
        python_peak = tracemalloc.get_traced_memory()[1]
    finally:
        stop.set()
        thread.join()
        tracemalloc.stop()
        cur.close()
    return {"python_peak_mib": python_peak / 2**20, "duckdb_peak_mib": peak[0] / 2**20}


def _ms(seconds: float) -> float:
    return seconds * 1000.0


# -- accuracy ------------------------------------------------------------------------


def truth(plain: duckdb.DuckDBPyConnection, sql: str, keys: tuple[str, ...]) -> dict:
    """Key tuple → {column: value} of an exact query."""
    cur = plain.execute(sql)
    columns = [d[0] for d in cur.description]
    return _by_key(columns, cur.fetchall(), keys)


def _by_key(columns: list[str], rows: list, keys: tuple[str, ...]) -> dict:
    ki = [columns.index(k) for k in keys]
    vi = [i for i in range(len(columns)) if i not in ki]
    return {tuple(row[i] for i in ki): {columns[i]: row[i] for i in vi} for row in rows}


def score(trials: list[tuple[list[str], list, list | None]], keys: tuple[str, ...],
          true: dict, bounded: dict | None = None) -> dict:
    """Errors of noisy answers against the true (and the bounded) exact answer.

    Each trial is (columns, rows, accuracy rows or None). Relative errors are taken over
    every cell of a true group with a non-zero true value; coverage counts the cells
    whose true value lies within the reported half-width.
    """
    rel: list[float] = []
    rel_bounded: list[float] = []
    per_col: dict[str, list[float]] = {}
    covered = bounded_covered = with_width = 0
    shares = []
    for columns, rows, acc in trials:
        got = _by_key(columns, rows, keys)
        norm_got = {_norm(k): v for k, v in got.items()}
        norm_w = None
        if acc is not None:  # accuracy rows hold None for keys: key them by the answer's
            ki = [columns.index(k) for k in keys]
            norm_w = {_norm(tuple(row[i] for i in ki)): dict(zip(columns, a, strict=True))
                      for row, a in zip(rows, acc, strict=True)}
        hits = [k for k in true if _norm(k) in norm_got]
        shares.append(len(hits) / len(true) if true else 1.0)
        for key in hits:
            cells = norm_got[_norm(key)]
            for col, t in true[key].items():
                value = cells.get(col)
                if value is None or t is None:
                    continue
                if not math.isfinite(float(value)):
                    # undefined, like NULL: a ratio over a noisy sum released as 0
                    # (consistent answers) is inf or nan under DuckDB's division
                    continue
                err = abs(float(value) - float(t))
                if float(t) != 0:
                    rel.append(err / abs(float(t)))
                    per_col.setdefault(col, []).append(err / abs(float(t)))
                b = None if bounded is None else bounded.get(key, {}).get(col)
                if b is not None and float(b) != 0:
                    rel_bounded.append(abs(float(value) - float(b)) / abs(float(b)))
                if norm_w is not None:
                    hw = norm_w[_norm(key)].get(col)
                    if hw is None:
                        continue
                    with_width += 1
                    covered += err <= hw
                    if bounded is not None and key in bounded:
                        b = bounded[key].get(col)
                        bounded_covered += b is not None and abs(float(value) - float(b)) <= hw
    return {
        "median_rel_error": _quantile(rel, 0.5),
        "p90_rel_error": _quantile(rel, 0.9),
        # against the bounded exact answer: the error of the noise alone (for dpsql)
        "median_rel_error_bounded": _quantile(rel_bounded, 0.5),
        "released_share": statistics.fmean(shares) if shares else None,
        "coverage": covered / with_width if with_width else None,
        "coverage_bounded": (bounded_covered / with_width
                             if with_width and bounded is not None else None),
        "cells": len(rel),
        "trials": len(trials),
        "columns": {c: {"median_rel_error": _quantile(v, 0.5),
                        "p90_rel_error": _quantile(v, 0.9)} for c, v in per_col.items()},
    }


def _norm(key: tuple) -> tuple:
    return tuple(float(v) if isinstance(v, int | float) else v for v in key)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.quantile(np.asarray(values), q))


def accuracy(conn: dpsql.Connection, plain: duckdb.DuckDBPyConnection, query: Query,
             epsilons: tuple[float, ...], trials: int, tick: Callable[[], None]) -> dict:
    """Median / p90 relative error, released share and coverage per epsilon."""
    true = truth(plain, query.sql, query.keys)
    bounded = truth(plain, query.floor, query.keys)
    bias: dict[str, list[float]] = {}
    for key, cells in true.items():
        for col, t in cells.items():
            b = bounded.get(key, {}).get(col)
            if t is not None and b is not None and float(t) != 0:
                bias.setdefault(col, []).append(abs(float(b) - float(t)) / abs(float(t)))
    out = {"true_groups": len(true), "epsilons": {},
           # median |bounded − true| / |true| per column: the error bounding alone causes
           "bounding_bias": {c: _quantile(v, 0.5) for c, v in bias.items()}}
    for eps in epsilons:
        runs = []
        cost = None
        for _ in range(trials):
            res = conn.execute(query.sql, epsilon=eps, delta=query.delta)
            runs.append((res.columns, res.rows, res.accuracy))
            cost = list(res.cost)
            tick()
        out["epsilons"][_eps(eps)] = {**score(runs, query.keys, true, bounded), "cost": cost}
    return out


def _eps(eps: float) -> str:
    return f"{eps:g}"


# -- sampler throughput --------------------------------------------------------------


def samplers(scale: float = 10.0) -> dict[str, Callable[[int], Callable[[], object]]]:
    """Name → (n → a thunk drawing n noise values), built outside the timed part."""
    import opendp.prelude as dp

    from dpsql.mechanisms.gaussian import DiscreteGaussian
    from dpsql.mechanisms.laplace import DiscreteLaplace, laplace

    dp.enable_features("contrib")
    rng = np.random.default_rng()

    def dl_sample(n):
        m = DiscreteLaplace(scale)
        return lambda: m.sample(n)

    def dl_release(n):
        m, values = DiscreteLaplace(scale), [0] * n
        return lambda: m.release(values)

    def grid_release(n):
        m, values = laplace(linf=500_000.0, max_groups=1, epsilon=1.0, integer=False), [0.5] * n
        return lambda: m.release(values)

    def opendp_laplace(n):
        space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
        meas, values = space >> dp.m.then_laplace(scale=scale), [0] * n
        return lambda: meas(values)

    def numpy_laplace(n):
        return lambda: rng.laplace(scale=scale, size=n)

    def dgauss(n):
        m = DiscreteGaussian(scale)
        return lambda: m.sample(n)

    return {
        "dpsql DiscreteLaplace.sample (exact, int64)": dl_sample,
        "dpsql DiscreteLaplace.release (list of ints)": dl_release,
        "dpsql GridLaplace.release (floats on 2^k grid)": grid_release,
        "OpenDP then_laplace (vector i64)": opendp_laplace,
        "dpsql DiscreteGaussian.sample (OpenDP)": dgauss,
        "numpy rng.laplace (float, not DP-safe)": numpy_laplace,
    }


def sampler_throughput(sizes: tuple[int, ...], repeats: int, cap_s: float,
                       tick: Callable[[], None]) -> list[dict]:
    out = []
    for name, make in samplers().items():
        for n in sizes:
            fn = make(n)
            times = []
            for _ in range(repeats):
                times.append(_timed(fn))
                if sum(times) > cap_s:
                    break
            best = statistics.median(times)
            out.append({"sampler": name, "n": n, "seconds": best, "repeats": len(times),
                        "cells_per_s": n / best if best > 0 else math.inf})
            tick()
    return out
