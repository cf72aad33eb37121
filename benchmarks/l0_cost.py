"""``python -m benchmarks.l0_cost [--workload W] [--size N] [--runs R] [--threads T] [QUERY ...]``.

Where a workload's private/floor goes, at the SQL level only (no Python, no noise):
for each query, interleaved on one read-only DuckDB connection, the hand-written floor,
dpsql's final SQL, and dpsql's final SQL rewritten without the L0 (``max_groups``)
step, so that ``sql − no_l0`` is the L0 step's cost and ``no_l0 − floor`` that of the
per-user aggregate's own expressions. Wall medians and process-CPU medians are both
shown: on a shared 2-core machine the CPU time is the steadier of the two.

The no-L0 SQL answers a different (unbounded) query; it is timed, never released.
The data are the benchmark's cached files (``benchmarks/data/``), opened read-only.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import duckdb

from benchmarks import data, measure
from benchmarks.workloads import get
from dpsql.rewrite import rewrite
from dpsql.rewrite.traits import EngineTraits


def sql_variants(conn, query) -> dict[str, str]:
    """``sql`` (what dpsql runs) and ``no_l0`` (the same plan without the L0 step).

    The SQL is the checked one, as ``execute`` runs it: the checks may write it again
    (a sum the engine types as a fraction is summed in grid units, :mod:`dpsql.grid_units`).
    """
    plan, expression, backend = conn._prepare(query.sql, 1.0, query.delta, None, None)
    expression, _ = conn._check(plan, expression, backend)
    plain = rewrite(dataclasses.replace(plan, bound_groups=False),
                    engine=EngineTraits.of(backend))
    return {"floor": query.floor, "sql": backend.to_sql(expression),
            "no_l0": backend.to_sql(plain)}


def time_interleaved(con: duckdb.DuckDBPyConnection, variants: dict[str, str],
                     runs: int) -> dict[str, tuple[float, float]]:
    """Median (wall ms, CPU ms) of each variant, run in turn ``runs`` times after one
    untimed run each."""
    for sql in variants.values():
        con.execute(sql).fetchall()
    wall: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(runs):
        for name, sql in variants.items():
            w, c = time.perf_counter(), time.process_time()
            con.execute(sql).fetchall()
            wall[name].append((time.perf_counter() - w) * 1000)
            cpu[name].append((time.process_time() - c) * 1000)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in variants}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.l0_cost",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--workload", choices=("pums_dup", "tpch"), default="pums_dup")
    parser.add_argument("--size", type=float, default=1_000_000,
                        help="people (PUMS, default 1M) or scale factor (TPC-H)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads")
    parser.add_argument("--data", type=Path, default=data.DATA_DIR,
                        help="directory of the cached DuckDB files (built there if absent)")
    parser.add_argument("queries", nargs="*", help="query names (default: all)")
    args = parser.parse_args(argv)
    workload = get(args.workload)
    size = int(args.size) if args.workload == "pums_dup" else args.size
    path = (data.pums_dup_database(size, data_dir=args.data) if args.workload == "pums_dup"
            else data.tpch_database(size, data_dir=args.data))
    conn = measure.open_private(path, workload.catalog(size))
    con = measure.open_plain(path)
    if args.threads:
        con.execute(f"SET threads = {int(args.threads)}")
    measure.warm(con, workload.tables)
    names = set(args.queries) or None
    print(f"{'query':24s} {'floor ms':>9s} {'sql/floor':>10s} {'no_l0/floor':>12s}   "
          f"(CPU: floor ms, sql/floor, no_l0/floor)")
    try:
        for q in workload.queries:
            if names is not None and q.name not in names:
                continue
            t = time_interleaved(con, sql_variants(conn, q), args.runs)
            fw, fc = t["floor"]
            print(f"{q.name:24s} {fw:9.1f} {t['sql'][0] / fw:9.2f}x {t['no_l0'][0] / fw:11.2f}x"
                  f"   ({fc:.0f}, {t['sql'][1] / fc:.2f}x, {t['no_l0'][1] / fc:.2f}x)",
                  flush=True)
    finally:
        conn.close()
        con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
