"""Ledger charge latency and throughput against the ledger's age (issue 24, item 1).

    python -m benchmarks.ledger                      # 1/8/32 processes at 0, 100k, 1M
    python -m benchmarks.ledger --history 0 100000 --processes 1 8 --charges 200
    python -m benchmarks.ledger --ledger postgresql+psycopg://...  # the PostgreSQL ledger

For each number of past charges it builds a ledger (the past charges are written in bulk
with a valid hash chain, running totals and checkpoint, as years of use would leave
them), then for each number of processes starts them together, each opening the ledger
and making ``--charges`` charges through :meth:`dpsql.ledger.Ledger.charge`, timing
each. It prints one line per configuration: the median and 95th-percentile charge
latency (ms; under contention this includes waiting for the lock) and the throughput
(charges per second, all processes together), and at the end the ratio of the median
single-process charge at the largest history to that at none (the target is ≤ 1.5).

Not part of the unit tests: it takes minutes at 1M past charges.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dpsql.accounting import Cost
from dpsql.ledger import ALL, CHARGED_SQL_KEPT, Ledger, _checkpoint_doc, _hk, _sha, _tag

SQL = "SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age >= 18 GROUP BY sex"
ANALYSTS = 50


def build(where: str, history: int) -> str:
    """A ledger with ``history`` past charges of data set ``bench`` by 50 analysts."""
    led = Ledger(where)
    led.set_budget("bench", (1e12, 0.5))
    s, p, mac = led._s, led._p, led._mac
    cost = Cost(0.01, 1e-12)
    parts = cost.parts
    prev = mac("genesis")
    totals: dict = {}
    rows = []
    t0 = "2026-01-01T00:00:00.000+00:00"
    sql_hash = _sha(SQL)
    for eid in range(1, history + 1):
        analyst = f"a{eid % ANALYSTS}"
        stored = SQL[:CHARGED_SQL_KEPT]
        h = mac("entry", eid, t0, "bench", analyst, "charge", *parts, sql_hash, len(SQL),
                _sha(stored), prev)
        rows.append((eid, t0, "bench", analyst, "charge", *parts, stored, sql_hash,
                     len(SQL), "answered", None, mac("outcome", eid, h, "answered", None),
                     prev, h))
        prev = h
        for key in (("bench", analyst), ("bench", ALL)):
            old = totals.get(key, (0.0, 0.0, 0.0, 0.0, 0))
            totals[key] = (old[0] + parts[0], old[1] + parts[1], old[2] + parts[2],
                           old[3] + parts[3], old[4] + 1)
    cols = ("id, time, dataset, analyst, kind, epsilon, delta, rho, rho_delta, sql, "
            "sql_hash, sql_length, outcome, detail, omac, prev, hash")
    with led._tx() as db:
        for i in range(0, len(rows), 50_000):
            chunk = rows[i:i + 50_000]
            if s.kind == "sqlite":
                db.db.executemany(f"INSERT INTO {p}entries ({cols}) VALUES "
                                  "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", chunk)
            else:
                with db.db.cursor() as cur:
                    cur.executemany(f"INSERT INTO {p}entries ({cols}) VALUES "
                                    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                                    "%s, %s, %s, %s)", chunk)
        for (ds, an), vals in totals.items():
            row_mac = mac("totals", ds, an, *vals)
            db.execute(f"INSERT INTO {p}totals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (ds, an, *vals, row_mac))
            led._head_set(_hk("t", ds, an), _tag(row_mac))
        if history:  # the head names the newest entry (written when the transaction ends)
            led._head["id"], led._head["hash"] = history, prev
            led._head_dirty = True
        db.execute(f"UPDATE {p}meta SET value = ? WHERE key = 'checkpoint'",
                   (_checkpoint_doc(mac, history, prev, totals),))
    led.close()
    return where


def _worker(where: str, charges: int, barrier, out) -> None:
    led = Ledger(where, create=False)
    times = []
    barrier.wait()
    start = time.perf_counter()
    for _ in range(charges):
        t = time.perf_counter()
        led.charge("bench", f"w{os.getpid() % ANALYSTS}", Cost(0.01, 1e-12), SQL)
        times.append(time.perf_counter() - t)
    out.put((times, start, time.perf_counter()))
    led.close()


def run(where: str, processes: int, charges: int) -> dict:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(where, charges, barrier, out))
             for _ in range(processes)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=1800) for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode:
            raise SystemExit(f"a worker failed (exit {proc.exitcode})")
    times = sorted(t for r in results for t in r[0])
    span = max(r[2] for r in results) - min(r[1] for r in results)
    return {"processes": processes, "charges": len(times),
            "median_ms": 1000 * statistics.median(times),
            "p95_ms": 1000 * times[int(0.95 * (len(times) - 1))],
            "per_second": len(times) / span}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", type=int, nargs="+", default=[0, 100_000, 1_000_000])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--charges", type=int, default=200, help="Charges per process.")
    ap.add_argument("--ledger", default=None,
                    help="A PostgreSQL URL (schemas bench_<n> are made in it); default: "
                         "SQLite files in a temporary folder.")
    ap.add_argument("--json", action="store_true", help="One JSON object per line.")
    args = ap.parse_args(argv)
    medians = {}
    with tempfile.TemporaryDirectory() as tmp:
        for history in args.history:
            if args.ledger:
                sep = "&" if "?" in args.ledger else "?"
                where = f"{args.ledger}{sep}schema=bench_{history}_{os.getpid()}"
            else:
                where = str(Path(tmp) / f"history-{history}.sqlite")
            t = time.perf_counter()
            build(where, history)
            built = time.perf_counter() - t
            for processes in args.processes:
                r = run(where, processes, args.charges)
                r["history"] = history
                if processes == 1:
                    medians[history] = r["median_ms"]
                if args.json:
                    print(json.dumps(r), flush=True)
                else:
                    print(f"history {history:>9,}  processes {processes:>2}  charges "
                          f"{r['charges']:>5}  median {r['median_ms']:7.2f} ms  p95 "
                          f"{r['p95_ms']:7.2f} ms  {r['per_second']:7.0f} charges/s"
                          f"  (built in {built:.1f} s)", flush=True)
    if 0 in medians and len(medians) > 1:
        top = max(medians)
        print(f"median single-process charge at {top:,} past charges / at 0: "
              f"{medians[top] / medians[0]:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
