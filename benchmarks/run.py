"""The benchmark runner: :func:`run` is the entry point of ``python -m benchmarks``.

One run measures, on the same machine and data: latency (private / plain / floor, with
a stage breakdown and peak memory) at every size, accuracy at one size, the growth of
time with data size, sampler throughput, and SmartNoise SQL side by side. It writes
``<out_dir>/<name>.json``, ``<name>.md`` and ``<name>_*.png``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from benchmarks import data, measure, report, workloads
from benchmarks.config import Config, get
from benchmarks.peers import smartnoise
from benchmarks.workloads import WORKLOADS, Workload, size_key

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: The workload SmartNoise SQL runs on (it has no foreign-key privacy units and reads
#: its SQLite copy of one table).
PEER_WORKLOAD = "pums_dup"


def run(config_name: str, out_dir: Path, progress: bool = True, *, name: str | None = None,
        peers: bool | None = None) -> dict:
    """Runs one configuration and writes its results; returns them.

    Args:
        config_name: ``"quick"`` or ``"full"``.
        out_dir: where ``<name>.json``, ``<name>.md`` and the PNG plots go.
        progress: show progress bars on stderr.
        name: base name of the output files (default: the configuration's name).
        peers: run SmartNoise SQL (default: as the configuration says).
    """
    config = get(config_name)
    name = name or config.name
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict = {
        "name": name,
        "config": config.as_dict(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "environment": environment(),
        "workloads": {},
        "notes": [],
    }
    with Bars(progress) as bars:
        for workload in WORKLOADS:
            reason = workload.skip_reason
            if reason is None and workload.name not in config.plans:
                reason = f"not in the {config.name} configuration"
            if reason is not None:
                results["workloads"][workload.name] = {"status": "skipped", "reason": reason,
                                                       "title": workload.title,
                                                       "unit": workload.unit}
                continue
            results["workloads"][workload.name] = run_workload(workload, config, bars)
        results["sampler"] = run_sampler(config, bars)
        use_peers = config.peers if peers is None else peers
        pums = results["workloads"].get(PEER_WORKLOAD, {})
        if not use_peers:
            smartnoise_result = {"status": "skipped (not in this run)"}
        elif pums.get("status") != "ok":
            smartnoise_result = {"status": f"skipped ({PEER_WORKLOAD} did not run)"}
        else:
            smartnoise_result = run_smartnoise(workloads.get(PEER_WORKLOAD), config, pums, bars)
        results["peers"] = {"smartnoise": smartnoise_result}
        if config.overhead_runs:
            from benchmarks import overhead

            results["overhead"] = overhead.run(config.overhead_runs)
    results["duration_s"] = time.perf_counter() - started
    results["environment"]["load_average_end"] = _load()
    results["summary"] = report.summary(results)
    json_path = out_dir / f"{name}.json"
    json_path.write_text(json.dumps(_clean(results), indent=1) + "\n")
    results["files"] = report.write(results, out_dir, name)
    json_path.write_text(json.dumps(_clean(results), indent=1) + "\n")
    return results


def rerender(json_path: Path) -> dict:
    """Rewrites the summary, markdown and plots of a finished run from its JSON."""
    json_path = Path(json_path)
    results = json.loads(json_path.read_text())
    results["summary"] = report.summary(results)
    results["files"] = report.write(results, json_path.parent, results["name"])
    json_path.write_text(json.dumps(_clean(results), indent=1) + "\n")
    return results


def run_workload(workload: Workload, config: Config, bars: Bars) -> dict:
    """Latency at every size of the workload's plan, accuracy at one, and the scale fit."""
    plan = config.plans[workload.name]
    queries = workload.queries
    dbs = {}
    with bars.task(f"{workload.title}: generate data", len(plan.sizes)) as tick:
        for size in plan.sizes:
            t = time.perf_counter()
            path = workload.database(size, config.seed)
            users, rows = workload.counts(path)
            dbs[size] = {"label": workload.size_label(size), "database": path.name,
                         "users": users, "rows": rows, "prepare_s": time.perf_counter() - t,
                         "path": path}
            tick()
    out: dict = {"status": "ok", "title": workload.title, "unit": workload.unit,
                 "size_unit": workload.size_unit, "sizes": {}, "latency": {}, "accuracy": {},
                 "scale": {}}
    for size in plan.sizes:
        info = dbs[size]
        key = size_key(size)
        out["sizes"][key] = {k: v for k, v in info.items() if k != "path"}
        large = size >= plan.large
        timed = queries
        if large and plan.large_queries is not None:
            timed = tuple(q for q in queries if q.name in plan.large_queries)
        stage_runs = config.stage_runs_large if large else config.stage_runs
        conn = measure.open_private(info["path"], workload.catalog(size))
        plain = measure.open_plain(info["path"])
        try:
            measure.warm(plain, workload.tables)
            with bars.task(f"{workload.title}: latency, {info['label']}",
                           len(timed) * (config.runs + 2)) as tick:
                for q in timed:
                    if not large:  # a first run of each, untimed (plans, caches)
                        conn.execute(q.sql, epsilon=config.latency_epsilon, delta=q.delta)
                        plain.execute(q.floor).fetchall()
                    lat = measure.latency(conn, plain, q, config.runs, stage_runs,
                                          config.latency_epsilon, tick)
                    out["latency"].setdefault(q.name, {})[key] = lat
            if size == plan.accuracy_size:
                total = len(queries) * len(config.epsilons) * config.trials
                with bars.task(f"{workload.title}: accuracy, {info['label']}", total) as tick:
                    for q in queries:
                        out["accuracy"][q.name] = {
                            "size": key, "label": info["label"],
                            **measure.accuracy(conn, plain, q, config.epsilons, config.trials,
                                               tick)}
        finally:
            conn.close()
            plain.close()
    for q in queries:
        by_size = out["latency"].get(q.name, {})
        sizes = sorted(float(s) for s in by_size)
        if len(sizes) < 2:
            continue
        entry = {"sizes": sizes, "size_unit": workload.size_unit}
        for kind in ("private", "plain", "floor"):
            ms = [by_size[size_key(s)][f"{kind}_ms"] for s in sizes]
            entry[f"{kind}_ms"] = ms
            entry[f"{kind}_exponent"] = float(np.polyfit(np.log(sizes), np.log(ms), 1)[0])
        out["scale"][q.name] = entry
    return out


def run_sampler(config: Config, bars: Bars) -> list[dict]:
    with bars.task("sampler throughput", 6 * len(config.sampler_sizes)) as tick:
        return measure.sampler_throughput(config.sampler_sizes, config.sampler_repeats,
                                          config.sampler_cap_s, tick)


def run_smartnoise(workload: Workload, config: Config, main: dict, bars: Bars) -> dict:
    size = int(config.plans[workload.name].accuracy_size)
    with bars.task("SmartNoise SQL: environment", 1) as tick:
        python, why = smartnoise.ensure_environment()
        tick()
    if python is None:
        return {"status": f"unavailable ({why})"}
    db = workload.database(size, config.seed)
    with bars.task(f"SmartNoise SQL, {workload.size_label(size)} (subprocess)", 1) as tick:
        sqlite = data.sqlite_copy(db)
        job = {
            "database": str(sqlite),
            "metadata": smartnoise.metadata(data.TABLE, workload.catalog(size)),
            "delta": 1e-6,
            "latency_epsilon": config.latency_epsilon,
            "runs": config.peer_runs,
            "epsilons": list(config.epsilons),
            "trials": config.peer_trials,
            "queries": [{"name": q.name, "sql": q.sql} for q in workload.queries],
        }
        try:
            raw = smartnoise.run(job, python)
        except RuntimeError as exc:
            return {"status": f"unavailable ({exc})"}
        finally:
            tick()
    plain = measure.open_plain(db)
    out = {"status": "ok", "version": raw.get("version"), "route": raw.get("route"),
           "people": size, "delta": job["delta"], "queries": {}}
    try:
        for q in workload.queries:
            got = raw["queries"].get(q.name, {})
            if "latency_s" not in got:
                out["queries"][q.name] = {"error": got.get("error", "no result")}
                continue
            true = measure.truth(plain, q.sql, q.keys)
            bounded = measure.truth(plain, q.floor, q.keys)
            entry = {"latency_ms": got["latency_s"] * 1000,
                     "exact_aggregation_ms": got["exact_aggregation_s"] * 1000,
                     "epsilons": {}, "equal_spend": {}, "errors": got.get("errors", {})}
            dp_lat = main["latency"].get(q.name, {}).get(size_key(size))
            if dp_lat:
                entry["dpsql_latency_ms"] = dp_lat["private_ms"]
            for eps in config.epsilons:
                for label, target in ((str(eps), "epsilons"), (f"equal:{eps}", "equal_spend")):
                    if label not in got["trials"]:
                        continue
                    trials = [(got["columns"], rows, None) for rows in got["trials"][label]]
                    entry[target][f"{eps:g}"] = {**measure.score(trials, q.keys, true, bounded),
                                                 "cost": got["cost"][label]}
            out["queries"][q.name] = entry
    finally:
        plain.close()
    return out


def environment() -> dict:
    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_start": _load(),
        "packages": {p: ver(p) for p in ("dpsql", "duckdb", "opendp", "numpy", "sqlglot")},
        "git": _git(),
    }


def _git() -> dict | None:
    """The checkout's commit, and whether dpsql's sources differ from it (results of a
    working tree with uncommitted engine changes say so)."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args],
                              capture_output=True, text=True, check=True, timeout=30).stdout

    try:
        commit = git("rev-parse", "--short", "HEAD").strip()
        changed = git("status", "--porcelain", "--", "dpsql", "catalog").splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "engine_changes_uncommitted": len(changed)}


class Bars:
    """Progress bars on stderr (rich), or nothing."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._progress = None

    def __enter__(self) -> Bars:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description:<40}"),
                                      BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=Console(stderr=True))
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextmanager
    def task(self, description: str, total: int):
        if self._progress is None:
            yield lambda: None
            return
        task = self._progress.add_task(description, total=total)
        try:
            yield lambda: self._progress.advance(task)
        finally:
            self._progress.update(task, completed=total)


def _load() -> list[float] | None:
    """1, 5 and 15-minute load averages (other work on the machine skews timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _clean(value):
    """JSON-safe: no NaN/inf, no Paths, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items() if k != "path"}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    return value
