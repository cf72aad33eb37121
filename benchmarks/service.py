"""Service benchmark: queries/s and p50/p99 latency through ``dpsql serve`` with 1, 8 and
64 concurrent sessions, next to the same queries in process, as ratios in one run.

Usage: ``python benchmarks/service.py [--queries 50] [--sessions 1,8,64]``. Not run by
the tests (it takes a minute or more). The service runs as its own process with TLS and
SCRAM; each session is a psycopg connection of its own login.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "server")]

QUERY = "SELECT sex, COUNT(*) AS n, AVG(income) AS m FROM pums WHERE age > %s GROUP BY sex"
EPS = 1e-4


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def in_process(db: Path, catalog: str, n: int) -> list[float]:
    import dpsql

    times = []
    with dpsql.connect(db, catalog=catalog, ledger=":memory:", budget=(100.0, 1e-5)) as conn:
        for q in range(n):
            t = time.perf_counter()
            conn.execute(QUERY.replace("%s", str(q % 90)), epsilon=EPS)
            times.append(time.perf_counter() - t)
    return times


def service(host: str, port: int, sessions: int, n: int) -> tuple[list[float], float]:
    import psycopg

    times: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(sessions + 1)

    def work(i: int) -> None:
        dsn = (f"host={host} port={port} user=b{i % 64} password=pw{i % 64} dbname=pums "
               "sslmode=require")
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute(f"SET dpsql.epsilon = {EPS}")
            barrier.wait()
            mine = []
            for q in range(n):
                t = time.perf_counter()
                con.execute(QUERY, [q % 90]).fetchall()
                mine.append(time.perf_counter() - t)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return times, time.perf_counter() - start


def main() -> None:
    from conftest import start, stop, write_config

    from dpsql.datasets import catalog_path
    from dpsql.ledger import Ledger
    from dpsql.server.auth import VerifierStore

    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--sessions", default="1,8,64")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpsql-bench-serve-"))
    config = write_config(tmp, extra="limits: {max_connections: 200, workers: 80, "
                                     "max_connections_per_login: 10}\n")
    store, ledger = VerifierStore(tmp / "ledger.sqlite.logins.sqlite"), Ledger(
        tmp / "ledger.sqlite")
    for i in range(64):
        store.add(f"b{i}", f"pw{i}")
        ledger.ensure_budget("pums", (1000.0, 1e-5), f"b{i}", "bench")
    ledger.set_budget("pums", (100000.0, 1e-5))
    store.close()
    ledger.close()
    base = in_process(tmp / "pums.duckdb", str(catalog_path("pums")), args.queries)
    base_qps = 1 / statistics.mean(base)
    print(f"in process: {base_qps:.0f} q/s, p50 {_pct(base, .5) * 1e3:.1f} ms, "
          f"p99 {_pct(base, .99) * 1e3:.1f} ms  (cores: {os.cpu_count()})")
    proc, host, port = start(config, "--self-signed")
    try:
        for sessions in (int(s) for s in args.sessions.split(",")):
            times, wall = service(host, port, sessions, args.queries)
            qps = len(times) / wall
            print(f"service, {sessions:2d} sessions: {qps:.0f} q/s ({qps / base_qps:.2f}x "
                  f"in process), p50 {_pct(times, .5) * 1e3:.1f} ms "
                  f"({_pct(times, .5) / _pct(base, .5):.1f}x), p99 "
                  f"{_pct(times, .99) * 1e3:.1f} ms")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
