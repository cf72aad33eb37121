"""Runs SmartNoise SQL on a benchmark job; executed by the peer's own Python.

Reads one JSON job on stdin, writes one JSON document on stdout. Standard library and
SmartNoise SQL only: this file runs in ``benchmarks/.peers/smartnoise``, a virtual
environment separate from dpsql's because SmartNoise pins ``opendp<0.15``.

Job::

    {"database": "/path/pums_dup.sqlite", "metadata": {...}, "delta": 1e-6,
     "latency_epsilon": 1.0, "runs": 5, "epsilons": [0.1, 1, 10], "trials": 20,
     "queries": [{"name": ..., "sql": ...}, ...]}

Per query it reports the latency of ``reader.execute`` (the whole path: rewrite, exact
aggregation in SQLite, noise), the cost SmartNoise itself computes for the query
(``get_privacy_cost``; it charges ε per noisy aggregate, and δ for its thresholding of
group keys), and the answers of ``trials`` runs per ε: asked at ε (key ``"<ε>"``), and
asked at the ε that makes its total cost ε (key ``"equal:<ε>"``, what dpsql spends).
The trials reuse one exact pre-aggregation per query (``execute(...,
pre_aggregated=...)``), so each trial draws fresh noise without re-scanning the table.
An ε that SmartNoise refuses (its noise-scale limit) is reported under ``errors``.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import time
import traceback


def main() -> None:
    job = json.load(sys.stdin)
    import snsql
    from snsql import Privacy

    try:
        from importlib.metadata import version

        snsql_version = version("smartnoise-sql")
    except Exception:  # noqa: BLE001
        snsql_version = "unknown"
    con = sqlite3.connect(job["database"])
    out = {"engine": "smartnoise-sql", "version": snsql_version, "route": "sqlite",
           "queries": {}}

    def reader(epsilon: float):
        return snsql.from_connection(con, engine="sqlite", metadata=job["metadata"],
                                     privacy=Privacy(epsilon=epsilon, delta=job["delta"]))

    for q in job["queries"]:
        res: dict = {}
        try:
            r = reader(job["latency_epsilon"])
            r.execute(q["sql"])  # warm-up
            times = []
            for _ in range(job["runs"]):
                t = time.perf_counter()
                r.execute(q["sql"])
                times.append(time.perf_counter() - t)
            res["latency_s"] = statistics.median(times)
            res["latency_runs_s"] = times
            subquery, _ = r._rewrite(q["sql"])
            t = time.perf_counter()
            exact = r.reader._execute_ast(subquery)
            res["exact_aggregation_s"] = time.perf_counter() - t
            res["trials"] = {}
            res["cost"] = {}
            res["errors"] = {}
            res["noise_s"] = {}
            for eps in job["epsilons"]:
                key = str(eps)
                try:
                    cost = reader(eps).get_privacy_cost(q["sql"])
                    res["cost"][key] = [float(cost[0]), float(cost[1])]
                    # the same query asked at the epsilon SmartNoise answers it with, and at
                    # the one that makes it spend what dpsql spends (epsilon in total)
                    runs = {key: eps, f"equal:{key}": eps * eps / float(cost[0])}
                    for label, asked in runs.items():
                        r = reader(asked)
                        spent = r.get_privacy_cost(q["sql"])
                        res["cost"][label] = [float(spent[0]), float(spent[1])]
                        answers = []
                        t = time.perf_counter()
                        for _ in range(job["trials"]):
                            rows = r.execute(q["sql"], pre_aggregated=exact)
                            answers.append([list(map(_plain, row)) for row in rows[1:]])
                        res["noise_s"][label] = ((time.perf_counter() - t)
                                                 / max(job["trials"], 1))
                        res["trials"][label] = answers
                        res["columns"] = list(rows[0])
                except Exception as exc:  # noqa: BLE001 - e.g. its noise-scale limit
                    res["errors"][key] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported per query, the run goes on
            res["error"] = f"{type(exc).__name__}: {exc}"
            res["traceback"] = traceback.format_exc(limit=3)
        out["queries"][q["name"]] = res
    json.dump(out, sys.stdout)


def _plain(value):
    """A JSON-able Python number (numpy scalars have .item())."""
    if hasattr(value, "item"):
        value = value.item()
    return value


if __name__ == "__main__":
    main()
