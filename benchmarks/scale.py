"""``python -m benchmarks scale``: dpsql at large sizes (issue 23, item 4).

Not part of ``python -m benchmarks``: at the large sizes one job takes many minutes of
two cores. Two engines:

* **DuckDB** over PUMS resampled to a number of *rows* (default 10M and 100M; the
  generator of :mod:`benchmarks.data` at ``rows / 1.948`` people, 1–4 rows each): per
  query the private time (``Connection.execute``), the floor (the hand-written bounded
  query) and the plain query, and the peak memory of the process.
* **Spark** in local mode on all cores (``local[*]``) over TPC-H parquet from
  ``tpchgen-cli`` at scale factors (default 3 and 10), registered as temporary views:
  private, plain and floor time per query (the DuckDB-dialect SQL transpiled by sqlglot),
  and the peak memory of Python and the JVM together. Spark enforces no PRIMARY KEY, so
  dpsql refuses the queries that reach the customer through ``lineitem → orders``
  (before any charge, in milliseconds); the report lists them as refused.

Each job (engine, size) runs in a subprocess of its own, so that the peak memory of one
size is not that of the sizes before it, and data generation runs in another one before
it. Memory is the resident set size (RSS) of the job's process tree, sampled every
20 ms with ``psutil`` during each timed run (``resource.getrusage``'s ``ru_maxrss``, the
process's lifetime peak, is reported beside it). RSS counts everything the process
holds: for DuckDB both DuckDB instances (dpsql's and the benchmark's plain one) with
their cached data, for Spark the driver JVM, whose heap grows up to
``--spark-driver-memory`` and rarely shrinks.

Time boxes, for a shared machine: a job stops starting queries after ``--job-minutes``;
a sampled RSS above ``--memory-fraction`` of the machine's RAM aborts the job at once;
a larger size of an engine runs only if the smaller one finished within
``--grow-minutes`` without either limit. Everything not run is listed with the reason.
Generated data goes to ``--scratch`` (default ``$DPSQL_SCALE_SCRATCH`` or
``/tmp/dpsql-scale``), never into the checkout; it is reused by later runs.

Writes ``<out>/scale-<date>.json`` and ``.md`` after every job (a partial run still
leaves a report).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROWS_PER_PERSON = 1.948  # the bundled pums_dup.csv's mean repeats (benchmarks.data)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCRATCH = Path(os.environ.get("DPSQL_SCALE_SCRATCH", "/tmp/dpsql-scale"))
DUCKDB_ROWS = (10_000_000, 100_000_000)
SPARK_SF = (3.0, 10.0)
#: PUMS queries timed by default: the four shapes of the full benchmark's large size
#: (public keys, SUM/AVG, partition selection, COUNT(DISTINCT user)), in order of
#: importance (a job's time box cuts from the end).
DUCKDB_QUERIES = ("count_by_sex", "income_by_race", "count_by_age", "people_by_married")
#: TPC-H queries timed on Spark by default. Spark enforces no PRIMARY KEY, so dpsql
#: refuses every query that reaches the customer through ``lineitem → orders`` (all of
#: TPC-H's but Q13); ``q1`` stays in the list to record that refusal, and two queries of
#: this module (:data:`SPARK_EXTRA`) add the shapes Spark can answer over ``orders``.
SPARK_QUERIES = ("q13", "segment_balance", "orders_by_status", "revenue_by_segment", "q1")
#: From this many rows (DuckDB) or this scale factor (Spark) on, ``--large-runs`` apply.
LARGE_ROWS = 50_000_000
LARGE_SF = 3.0
POLL_S = 0.02
EPSILON = 1.0
BUDGET = (1e9, 0.5)


def _spark_extra():
    from benchmarks import tpch_queries as t
    from benchmarks.queries import Query, count, floor_query, user_sum

    price = (0, 600_000)  # o_totalprice's bounds in catalog/tpch.yaml
    rows = t.ORDERS_ROWS
    return (
        Query(
            "orders_by_status",
            "SELECT o_orderstatus, o_orderpriority, COUNT(*) AS n, "
            "SUM(o_totalprice) AS revenue FROM orders GROUP BY o_orderstatus, o_orderpriority",
            ("o_orderstatus", "o_orderpriority"),
            floor_query("FROM orders", "o_custkey", ["o_orderstatus", "o_orderpriority"],
                        {"n": count(max_rows=rows), "s": user_sum("o_totalprice", price, rows)},
                        ["SUM(n) AS n", "SUM(s) AS revenue"]),
            note="orders alone (user key o_custkey); public keys (3 × 5); COUNT, SUM"),
        Query(
            "revenue_by_segment",
            "SELECT c_mktsegment, COUNT(*) AS n, SUM(o_totalprice) AS revenue "
            "FROM customer JOIN orders ON c_custkey = o_custkey GROUP BY c_mktsegment",
            ("c_mktsegment",),
            floor_query("FROM customer JOIN orders ON c_custkey = o_custkey", "c_custkey",
                        ["c_mktsegment"],
                        {"n": count(max_rows=rows), "s": user_sum("o_totalprice", price, rows)},
                        ["SUM(n) AS n", "SUM(s) AS revenue"]),
            note="customer ⋈ orders on the user key; segments (5, public)"),
    )


# -- orchestration (parent process) ------------------------------------------------------


@dataclass
class Job:
    engine: str  # "duckdb" | "spark"
    size: float  # rows | scale factor

    @property
    def label(self) -> str:
        if self.engine == "duckdb":
            return f"DuckDB, {_rows_label(self.size)} rows"
        return f"Spark, TPC-H sf {self.size:g}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker is not None:  # internal: one phase of one job, in its own process
        return _worker(json.loads(args.worker))
    if args.rerender is not None:
        results = json.loads(args.rerender.read_text())
        md = args.rerender.with_suffix(".md")
        md.write_text(render(results))
        _say(f"wrote {md}")
        return 0
    started = datetime.now(UTC)
    name = args.name or f"scale-{started.date().isoformat()}"
    args.out.mkdir(parents=True, exist_ok=True)
    args.scratch.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "name": name,
        "started": started.isoformat(timespec="seconds"),
        "command": "python -m benchmarks scale " + " ".join(argv if argv is not None
                                                             else sys.argv[1:]),
        "environment": _environment(),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k != "worker"},
        "jobs": [],
        "not_run": [],
    }
    plan = [Job("duckdb", float(r)) for r in ([] if args.no_duckdb else args.duckdb_rows)]
    plan += [Job("spark", float(s)) for s in ([] if args.no_spark else args.spark_sf)]
    stopped: dict[str, str] = {}  # engine → why its larger sizes do not run
    for job in plan:
        if job.engine in stopped:
            results["not_run"].append({"job": job.label, "reason": stopped[job.engine]})
            _write(results, args.out, name)
            continue
        _say(f"{job.label}: starting (load average {_uptime()})")
        entry = _run_job(job, args)
        results["jobs"].append(entry)
        _write(results, args.out, name)
        minutes = entry["total_s"] / 60
        if entry["status"] != "ok":
            stopped[job.engine] = f"{job.label} did not finish: {entry['status']}"
        elif entry.get("cut"):
            stopped[job.engine] = (f"{job.label} hit the {args.job_minutes:g}-minute job box "
                                   f"({len(entry['cut'])} queries not run)")
        elif minutes > args.grow_minutes:
            stopped[job.engine] = (f"{job.label} took {minutes:.1f} min, over the "
                                   f"{args.grow_minutes:g}-minute limit for growing")
        _say(f"{job.label}: {entry['status']} in {minutes:.1f} min")
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    files = _write(results, args.out, name)
    _say(f"wrote {', '.join(str(f) for f in files)}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks scale",
        description="dpsql at large sizes: DuckDB over PUMS resampled to millions of rows "
                    "(time and peak memory per query), Spark local[*] over TPC-H "
                    "(private/plain). Not part of `python -m benchmarks`. Run it with "
                    "`nice -n 19` on a shared machine.")
    p.add_argument("--duckdb-rows", type=_sizes(int), default=DUCKDB_ROWS, metavar="N,N",
                   help="PUMS rows per DuckDB job (10M, 1e8 and 100_000_000 work; default "
                        "10M,100M)")
    p.add_argument("--spark-sf", type=_sizes(float), default=SPARK_SF, metavar="SF,SF",
                   help="TPC-H scale factors of the Spark jobs (default 3,10)")
    p.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB jobs")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark jobs")
    p.add_argument("--duckdb-queries", type=_names, default=list(DUCKDB_QUERIES),
                   metavar="Q,Q", help="PUMS queries of the DuckDB jobs "
                   f"(benchmarks/queries.py; default {','.join(DUCKDB_QUERIES)})")
    p.add_argument("--spark-queries", type=_names, default=None, metavar="Q,Q",
                   help="TPC-H queries of the Spark jobs (benchmarks/tpch_queries.py; "
                        "default all)")
    p.add_argument("--runs", type=int, default=3,
                   help="timed runs of each query (median reported; default 3)")
    p.add_argument("--large-runs", type=int, default=1,
                   help=f"timed runs from {_rows_label(LARGE_ROWS)} rows / sf {LARGE_SF:g} "
                        "on (default 1)")
    p.add_argument("--job-minutes", type=float, default=20.0,
                   help="a job starts no new query after this long (default 20)")
    p.add_argument("--grow-minutes", type=float, default=10.0,
                   help="the next size of an engine runs only if this one finished within "
                        "this long (default 10)")
    p.add_argument("--memory-fraction", type=float, default=0.6,
                   help="abort a job whose RSS passes this share of RAM (default 0.6)")
    p.add_argument("--spark-driver-memory", default="6g",
                   help="the Spark driver's (local mode: the only JVM's) heap (default 6g)")
    p.add_argument("--scratch", type=Path, default=SCRATCH,
                   help=f"where generated data goes and is reused (default {SCRATCH})")
    p.add_argument("--out", type=Path, default=RESULTS_DIR,
                   help=f"where the report goes (default {RESULTS_DIR})")
    p.add_argument("--name", default=None,
                   help="base name of the report files (default scale-<date>)")
    p.add_argument("--seed", type=int, default=0, help="PUMS generator seed")
    p.add_argument("--rerender", type=Path, default=None, metavar="JSON",
                   help="only rewrite the markdown of a finished run from its JSON file")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p


def _names(text: str) -> list[str]:
    return [q.strip() for q in text.split(",") if q.strip()]


def _sizes(kind):
    def parse(text: str) -> list:
        out = []
        for part in text.split(","):
            part = part.strip().replace("_", "")
            if not part:
                continue
            mult = {"k": 1e3, "m": 1e6, "g": 1e9}.get(part[-1].lower(), 1)
            value = float(part[:-1] if mult != 1 else part) * mult
            out.append(kind(value))
        if not out or any(v <= 0 for v in out):
            raise argparse.ArgumentTypeError(f"expected positive sizes, got {text!r}")
        return sorted(out)
    return parse


def _run_job(job: Job, args: argparse.Namespace) -> dict:
    """Generates the data (one subprocess), then measures (another); never raises."""
    t0 = time.perf_counter()
    entry: dict = {"engine": job.engine, "size": job.size, "label": job.label,
                   "load_average_start": _uptime()}
    spec = {"engine": job.engine, "size": job.size, "scratch": str(args.scratch),
            "seed": args.seed, "memory_limit": _memory_limit(args.memory_fraction)}
    gen = _subprocess({**spec, "phase": "generate"}, args.job_minutes * 60)
    entry["generate"] = gen
    if gen.get("status") != "ok":
        entry["status"] = f"data generation failed: {gen.get('status')}"
    else:
        large = job.size >= (LARGE_ROWS if job.engine == "duckdb" else LARGE_SF)
        remaining = args.job_minutes * 60 - (time.perf_counter() - t0)
        run = _subprocess({**spec, "phase": "measure", "data": gen["data"],
                           "queries": (args.duckdb_queries if job.engine == "duckdb"
                                       else args.spark_queries),
                           "runs": args.large_runs if large else args.runs,
                           "warmup": not large,
                           "budget_s": remaining,
                           "driver_memory": args.spark_driver_memory},
                          remaining + 30 * 60)  # a query started in time may finish
        entry.update({k: v for k, v in run.items() if k != "status"})
        entry["status"] = run.get("status", "no result")
    entry["total_s"] = time.perf_counter() - t0
    entry["load_average_end"] = _uptime()
    return entry


def _subprocess(spec: dict, timeout_s: float) -> dict:
    """One worker phase in a fresh interpreter; its stderr (progress) passes through."""
    out_file = Path(spec["scratch"]) / f"worker-{os.getpid()}-{spec['phase']}.json"
    out_file.unlink(missing_ok=True)
    spec = {**spec, "result": str(out_file)}
    cmd = [sys.executable, "-m", "benchmarks.scale", "--worker", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(cmd, env=env, timeout=timeout_s, stdout=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {timeout_s / 60:.0f} min"}
    if out_file.exists():
        result = json.loads(out_file.read_text())
        out_file.unlink()
        if proc.returncode != 0 and result.get("status") == "ok":
            result["status"] = f"exit code {proc.returncode}"
        return result
    return {"status": f"worker exited with code {proc.returncode} and no result"}


def _memory_limit(fraction: float) -> int:
    import psutil

    return int(psutil.virtual_memory().total * fraction)


# -- workers (one subprocess per phase) --------------------------------------------------


def _worker(spec: dict) -> int:
    out = Path(spec["result"])
    result: dict = {"status": "running"}
    monitor = Monitor(spec["memory_limit"], out, result)
    monitor.start()
    try:
        if spec["phase"] == "generate":
            t = time.perf_counter()
            data = (_generate_pums(spec) if spec["engine"] == "duckdb"
                    else _generate_tpch(spec))
            result.update(status="ok", data=data, seconds=time.perf_counter() - t)
        elif spec["engine"] == "duckdb":
            result.update(_measure_duckdb(spec, monitor))
        else:
            result.update(_measure_spark(spec, monitor))
    except Exception as exc:  # the report says what failed; the parent carries on
        result["status"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        monitor.stop()
    result["peak_rss_mib"] = monitor.lifetime_peak / 2**20
    result["ru_maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["status"] == "ok" else 1


class Monitor:
    """Samples the RSS of this process and its children every 20 ms; aborts past a limit.

    ``window()`` gives the peak since the last call (one timed run). Past ``limit``
    bytes it writes the partial result with the reason and ends the process at once
    (``os._exit``): a run that would push a shared machine into swap or the OOM killer
    is not worth finishing.
    """

    def __init__(self, limit: int, out: Path, result: dict):
        import psutil

        self._proc = psutil.Process()
        self.limit = limit
        self._out = out
        self._result = result
        self._stop = threading.Event()
        self._window = 0
        self.lifetime_peak = 0
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def rss(self) -> int:
        total = 0
        for p in (self._proc, *self._proc.children(recursive=True)):
            with contextlib.suppress(Exception):  # a child that just ended
                total += p.memory_info().rss
        return total

    def _poll(self) -> None:
        while not self._stop.is_set():
            rss = self.rss()
            self._window = max(self._window, rss)
            self.lifetime_peak = max(self.lifetime_peak, rss)
            if rss > self.limit:
                self._result["status"] = (f"aborted: RSS {rss / 2**30:.1f} GiB passed the "
                                          f"limit of {self.limit / 2**30:.1f} GiB")
                self._result["peak_rss_mib"] = rss / 2**20
                self._out.write_text(json.dumps(self._result, indent=1, default=str))
                _say(self._result["status"])
                for child in self._proc.children(recursive=True):
                    child.kill()
                os._exit(3)
            self._stop.wait(POLL_S)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def window(self) -> int:
        """Peak RSS since the last call (and resets it to the current RSS)."""
        peak, self._window = max(self._window, self.rss()), self.rss()
        return peak


def _generate_pums(spec: dict) -> dict:
    """A DuckDB file of PUMS resampled to about ``size`` rows in the scratch directory.

    :func:`benchmarks.data.generator_sql` at ``rows / 1.948`` people, run with a memory
    limit and a spill directory in the scratch directory (the ``ORDER BY hash`` of 100M
    rows does not fit in memory otherwise).
    """
    import duckdb

    from benchmarks import data

    rows = int(spec["size"])
    people = max(1, round(rows / ROWS_PER_PERSON))
    scratch = Path(spec["scratch"])
    path = scratch / f"pums_dup_{people}_s{spec['seed']}_v{data.GENERATOR_VERSION}.duckdb"
    if not path.exists():
        _say(f"generating {people:,} people (about {_rows_label(rows)} rows) into {path}")
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        limit_gib = max(1, int(spec["memory_limit"] * 0.7 / 2**30))
        con = duckdb.connect(str(tmp), config={"memory_limit": f"{limit_gib}GB",
                                               "temp_directory": str(scratch / "spill")})
        try:
            for statement in data.generator_sql(people, spec["seed"]):
                con.execute(statement)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        tmp.rename(path)
        reused = False
    else:
        _say(f"reusing {path}")
        reused = True
    users, n = data.people_and_rows(path)
    return {"path": str(path), "people": users, "rows": n, "bytes": path.stat().st_size,
            "reused": reused}


def _generate_tpch(spec: dict) -> dict:
    """TPC-H parquet at scale factor ``size`` from ``tpchgen-cli`` in the scratch directory."""
    from dpsql.datasets import TPCH_KEYS, tpchgen

    sf = spec["size"]
    out = Path(spec["scratch"]) / f"tpch_sf{sf:g}_parquet"
    done = out / "COMPLETE"
    if not done.exists():
        _say(f"generating TPC-H sf {sf:g} parquet into {out}")
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([tpchgen(), "parquet", "-s", f"{sf:g}", f"--output-dir={out}"],
                       check=True, capture_output=True)
        done.write_text("")
        reused = False
    else:
        _say(f"reusing {out}")
        reused = True
    files = {t: str(out / f"{t}.parquet") for t in TPCH_KEYS}
    return {"path": str(out), "files": files, "reused": reused,
            "bytes": sum(Path(f).stat().st_size for f in files.values())}


def _timed(monitor: Monitor, fn) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of one call."""
    monitor.window()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t, monitor.window()


def _measure(queries, run_private, run_plain, run_floor, runs: int, budget_s: float,
             monitor: Monitor, label: str, warmup: bool) -> dict:
    """Times each query ``runs`` times, interleaved private / plain / floor.

    With ``warmup`` each query first runs once untimed (dpsql's plan cache, the engine's
    caches); at the large sizes that run would cost as much as a timed one and change
    little, so there is none.
    """
    started = time.perf_counter()
    out: dict = {"queries": {}, "cut": []}
    for i, q in enumerate(queries):
        if time.perf_counter() - started > budget_s:
            out["cut"].append(q.name)
            continue
        _say(f"{label}: {q.name} ({i + 1}/{len(queries)}), {runs} run(s)")
        times: dict[str, list[float]] = {"private": [], "plain": [], "floor": []}
        peaks: dict[str, int] = {"private": 0, "plain": 0, "floor": 0}
        entry: dict = {}
        if warmup:
            with contextlib.suppress(Exception):  # a refusal shows in the timed runs
                run_private(q)
        for _ in range(runs):
            try:
                s, peak = _timed(monitor, lambda q=q: run_private(q))
            except Exception as exc:  # a refusal (Spark: no PRIMARY KEY) is a result
                entry["refused"] = f"{type(exc).__name__}: {exc}"[:300]
                break
            times["private"].append(s)
            peaks["private"] = max(peaks["private"], peak)
            for kind, fn in (("plain", run_plain), ("floor", run_floor)):
                try:
                    s, peak = _timed(monitor, lambda q=q, fn=fn: fn(q))
                except Exception as exc:
                    entry[f"{kind}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                times[kind].append(s)
                peaks[kind] = max(peaks[kind], peak)
        for kind, ts in times.items():
            if ts:
                entry[f"{kind}_s"] = statistics.median(ts)
                entry[f"{kind}_runs_s"] = ts
                entry[f"{kind}_peak_rss_mib"] = peaks[kind] / 2**20
        if "private_s" in entry:
            for kind in ("plain", "floor"):
                if f"{kind}_s" in entry:
                    entry[f"private_over_{kind}"] = entry["private_s"] / entry[f"{kind}_s"]
            _say(f"{label}: {q.name}: private {entry['private_s']:.2f} s, plain "
                 f"{entry.get('plain_s', math.nan):.2f} s, floor "
                 f"{entry.get('floor_s', math.nan):.2f} s, peak RSS "
                 f"{peaks['private'] / 2**30:.2f} GiB")
        else:
            _say(f"{label}: {q.name}: refused ({entry.get('refused', '')[:120]})")
        out["queries"][q.name] = entry
    out["measure_s"] = time.perf_counter() - started
    return out


def _measure_duckdb(spec: dict, monitor: Monitor) -> dict:
    import dpsql
    from benchmarks import data, measure
    from benchmarks.queries import PUMS, by_name

    path = Path(spec["data"]["path"])
    queries = by_name(PUMS, spec["queries"])
    label = f"DuckDB {_rows_label(spec['size'])}"
    rss_start = monitor.rss()
    plain = measure.open_plain(path)
    conn = dpsql.connect(str(path), catalog=data.catalog(f"scale_pums_{path.stem}"),
                         budget=BUDGET, ledger=":memory:", analyst="bench", answer_cache=False)
    try:
        _say(f"{label}: reading the table once (untimed)")
        t = time.perf_counter()
        measure.warm(plain, (data.TABLE,))
        warm_s = time.perf_counter() - t
        rss_open = monitor.rss()
        res = _measure(
            queries,
            lambda q: conn.execute(q.sql, epsilon=EPSILON, delta=q.delta),
            lambda q: plain.execute(q.sql).fetchall(),
            lambda q: plain.execute(q.floor).fetchall(),
            spec["runs"], spec["budget_s"], monitor, label, spec["warmup"])
    finally:
        conn.close()
        plain.close()
    return {"status": "ok", "runs": spec["runs"], "warmup": spec["warmup"], "warm_s": warm_s,
            "rss_start_mib": rss_start / 2**20, "rss_after_warm_mib": rss_open / 2**20,
            "memory_method": "psutil RSS of the process, sampled every 20 ms", **res}


def _measure_spark(spec: dict, monitor: Monitor) -> dict:
    import sqlglot

    import dpsql
    from benchmarks import data
    from benchmarks.queries import by_name
    from benchmarks.tpch_queries import TPCH

    SPARK_TPCH = (*TPCH, *_spark_extra())  # noqa: N806
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # the driver's heap must be set before its JVM starts
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {spec['driver_memory']} pyspark-shell"
    from pyspark.sql import SparkSession

    label = f"Spark sf {spec['size']:g}"
    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[*]").appName("dpsql-scale")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.memory", spec["driver_memory"])
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for table, f in spec["data"]["files"].items():
            spark.read.parquet(f).createOrReplaceTempView(table)
        _say(f"{label}: counting every table once (untimed: JVM warm-up, file listing)")
        counts = {table: spark.sql(f"SELECT COUNT(*) FROM {table}").collect()[0][0]
                  for table in spec["data"]["files"]}
        warm_s = time.perf_counter() - t
        queries = by_name(SPARK_TPCH, spec["queries"] or list(SPARK_QUERIES))
        conn = dpsql.connect(spark, catalog=data.tpch_catalog(f"scale_tpch_sf{spec['size']:g}"),
                             budget=BUDGET, ledger=":memory:", analyst="bench",
                             answer_cache=False)

        def spark_sql(sql: str) -> str:
            return sqlglot.transpile(sql, read="duckdb", write="spark")[0]

        try:
            res = _measure(
                queries,
                lambda q: conn.execute(q.sql, epsilon=EPSILON, delta=q.delta),
                lambda q: spark.sql(spark_sql(q.sql)).collect(),
                lambda q: spark.sql(spark_sql(q.floor)).collect(),
                spec["runs"], spec["budget_s"], monitor, label, spec["warmup"])
        finally:
            conn.close()
        return {"status": "ok", "runs": spec["runs"], "warmup": spec["warmup"],
                "warm_s": warm_s, "cores": spark.sparkContext.defaultParallelism,
                "spark": spark.version, "driver_memory": spec["driver_memory"],
                "customers": counts["customer"], "lineitem_rows": counts["lineitem"],
                "memory_method": "psutil RSS of Python and its JVM child, sampled every 20 ms",
                **res}
    finally:
        spark.stop()


# -- report ------------------------------------------------------------------------------


def _write(results: dict, out: Path, name: str) -> list[Path]:
    json_path = out / f"{name}.json"
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = out / f"{name}.md"
    md.write_text(render(results))
    return [json_path, md]


def render(results: dict) -> str:
    """The markdown report of a scale run."""
    env = results["environment"]
    lines = [
        f"# dpsql at scale ({results['started'][:10]})",
        "",
        f"`{results['command']}`, started {results['started']}"
        + (f", finished {results['finished']}" if "finished" in results else " (running)")
        + f". Machine: {env['cpus']} cores, {env['ram_gib']:.0f} GiB RAM, shared with other "
        f"work (load averages below); {env['platform']}; Python {env['python']}, "
        + ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
        + (f"; commit `{env['git']}`" if env.get("git") else "") + ".",
        "",
        "Times are medians over the runs stated, in seconds; *private* is dpsql's "
        "`Connection.execute` (ε = 1), *floor* the hand-written bounded query (one "
        "clamped aggregate per user and group; `benchmarks/queries.py`), *plain* the "
        "analyst's SQL run as is. Memory is the peak resident set size (RSS) of the job's "
        "process tree during that query's runs, sampled every 20 ms with psutil; for DuckDB "
        "it includes both DuckDB instances in the process (dpsql's and the plain one, "
        "each with its cached data), for Spark the JVM.",
        "",
    ]
    lines += summary(results)
    for engine, title in (("duckdb", "DuckDB, PUMS resampled"),
                          ("spark", "Spark local[*], TPC-H")):
        jobs = [j for j in results["jobs"] if j["engine"] == engine]
        if not jobs:
            continue
        lines += [f"## {title}", ""]
        for j in jobs:
            lines += _job_section(j)
    if results["not_run"]:
        lines += ["## Not run", ""]
        lines += [f"* {n['job']}: {n['reason']}" for n in results["not_run"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def summary(results: dict) -> list[str]:
    """One row per job: medians (and ranges) over its queries, and its peak memory."""
    rows = []
    for j in results["jobs"]:
        qs = [q for q in j.get("queries", {}).values() if "private_s" in q]
        if not qs:
            rows.append(f"| {j['label']} | {j['status']} | | | | | |")
            continue

        def med(key: str, fmt: str, qs=qs) -> str:
            vals = [q[key] for q in qs if q.get(key) is not None]
            if not vals:
                return "–"
            return (f"{statistics.median(vals):{fmt}} ({min(vals):{fmt}}–{max(vals):{fmt}})"
                    if len(vals) > 1 else f"{vals[0]:{fmt}}")

        rows.append(f"| {j['label']} | {len(qs)} | {med('private_s', '.1f')} | "
                    f"{med('private_over_floor', '.2f')} | {med('private_over_plain', '.1f')} | "
                    f"{j.get('peak_rss_mib', 0) / 1024:.1f} | {j['load_average_end']} |")
    if not rows:
        return []
    return ["## Summary", "",
            "| job | queries | private s, median (range) | private/floor | private/plain "
            "| peak RSS of the job (GiB) | load average at the end |",
            "|---|---:|---|---|---|---:|---|", *rows, ""]


def _job_section(j: dict) -> list[str]:
    gen = j.get("generate", {})
    d = gen.get("data", {})
    lines = [f"### {j['label']}", ""]
    facts = [f"status **{j['status']}**", f"{j['total_s'] / 60:.1f} min in all"]
    if d:
        if j["engine"] == "duckdb":
            facts.append(f"{d['rows']:,} rows, {d['people']:,} people, file "
                         f"{d['bytes'] / 2**30:.2f} GiB")
        else:
            facts.append(f"parquet {d['bytes'] / 2**30:.2f} GiB")
        if d.get("reused"):
            facts.append("data reused from an earlier run")
        else:
            facts.append(f"data generated in {gen.get('seconds', 0):.0f} s (peak RSS "
                         f"{gen.get('peak_rss_mib', 0) / 1024:.2f} GiB)")
    if "customers" in j:
        facts.append(f"{j['customers']:,} customers, {j['lineitem_rows']:,} lineitem rows, "
                     f"{j['cores']} cores, Spark {j['spark']}, driver heap {j['driver_memory']}")
    if "runs" in j:
        facts.append(f"{j['runs']} timed run(s) per query after an untimed read of the "
                     f"data ({j.get('warm_s', 0):.0f} s)"
                     + (" and an untimed private run" if j.get("warmup") else ""))
    if "ru_maxrss_mib" in j:
        facts.append(f"process peak RSS {j.get('peak_rss_mib', 0) / 1024:.2f} GiB sampled "
                     f"(Python's `ru_maxrss` {j['ru_maxrss_mib'] / 1024:.2f} GiB)")
    facts.append(f"load average (1, 5, 15 min) {j['load_average_start']} at the start, "
                 f"{j['load_average_end']} at the end")
    lines += ["; ".join(facts) + ".", ""]
    queries = j.get("queries", {})
    if queries:
        lines += ["| query | private s | floor s | plain s | private/floor | private/plain "
                  "| peak RSS private (GiB) | peak RSS floor (GiB) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, q in queries.items():
            if "private_s" not in q:
                continue
            lines.append(
                f"| {name} | {q['private_s']:.2f} | {_f(q.get('floor_s'))} | "
                f"{_f(q.get('plain_s'))} | {_x(q.get('private_over_floor'))} | "
                f"{_x(q.get('private_over_plain'))} | "
                f"{_f(q.get('private_peak_rss_mib', 0) / 1024)} | "
                f"{_f(q.get('floor_peak_rss_mib', 0) / 1024)} |")
        lines.append("")
        refused: dict[str, list[str]] = {}
        for name, q in queries.items():
            if "private_s" not in q:
                refused.setdefault(q.get("refused", "?"), []).append(name)
        for reason, names in refused.items():
            lines += [f"Refused by dpsql before any charge: {', '.join(names)} ({reason}).", ""]
        errors = [f"{n}: {k} {v}" for n, q in queries.items() for k, v in q.items()
                  if k.endswith("_error")]
        if errors:
            lines += ["Errors of the reference queries: " + "; ".join(errors), ""]
    if j.get("cut"):
        lines += [f"Not started (job time box): {', '.join(j['cut'])}.", ""]
    return lines


def _f(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def _x(x) -> str:
    return "–" if x is None else f"{x:.2f}×"


# -- helpers -----------------------------------------------------------------------------


def _rows_label(rows: float) -> str:
    rows = float(rows)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rows >= div:
            return f"{rows / div:g}{suffix}"
    return f"{rows:g}"


def _uptime() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _say(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _environment() -> dict:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import psutil

    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    try:
        git = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]),
                              "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        git = None
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "ram_gib": psutil.virtual_memory().total / 2**30,
            "packages": {p: ver(p) for p in ("duckdb", "pyspark", "sqlglot")}, "git": git}


if __name__ == "__main__":
    sys.exit(main())
