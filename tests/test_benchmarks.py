"""The benchmark suite's quick configuration runs and writes sane results."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is a top-level package of the checkout
    sys.path.insert(0, str(ROOT))

import dpsql  # noqa: E402
from benchmarks import config, data, measure, tpch_queries  # noqa: E402
from benchmarks import run as bench  # noqa: E402
from benchmarks.queries import PUMS  # noqa: E402
from benchmarks.tpch_queries import TPCH  # noqa: E402
from benchmarks.workloads import get as get_workload  # noqa: E402
from benchmarks.workloads import size_key  # noqa: E402
from dpsql.datasets import catalog_path  # noqa: E402

HAVE_TPCHGEN = data.tpchgen_missing() is None
needs_tpchgen = pytest.mark.skipif(not HAVE_TPCHGEN, reason="tpchgen-cli is not installed")
QUICK_TPCH = config.QUICK.plans["tpch"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    results = bench.run("quick", out, progress=False, name="ci", peers=False)
    return out, results


@pytest.mark.slow  # runs the quick benchmark
def test_files_written(quick):
    out, results = quick
    for name in ("ci.json", "ci.md", "ci_error_vs_epsilon.png", "ci_latency_ratio.png",
                 "ci_scale.png", "ci_stages.png", "ci_sampler.png"):
        path = out / name
        assert path.exists() and path.stat().st_size > 0, name
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(results["files"].values()) <= {p.name for p in out.iterdir()}


def _check_latency(w: dict, names: set[str]) -> None:
    assert set(w["latency"]) == names
    for by_size in w["latency"].values():
        for lat in by_size.values():
            for key in ("private_ms", "plain_ms", "floor_ms", "private_over_plain",
                        "private_over_floor"):
                assert lat[key] > 0 and math.isfinite(lat[key]), key
            assert len(lat["runs_ms"]["private"]) >= 5
            assert abs(sum(lat["stage_share"].values()) - 1) < 1e-6
            assert lat["memory"]["python_peak_mib"] > 0
            assert set(lat["shape"]) == {"per_user_aggregate", "l0_window", "l0_window_ran"}


def _check_accuracy(w: dict, names: set[str]) -> None:
    assert set(w["accuracy"]) == names
    for acc in w["accuracy"].values():
        assert set(acc["epsilons"]) == {"0.1", "1", "10"}
        for a in acc["epsilons"].values():
            assert a["median_rel_error"] is not None and a["median_rel_error"] >= 0
            assert a["p90_rel_error"] >= a["median_rel_error"]
            assert 0 <= a["released_share"] <= 1
            assert 0 <= a["coverage"] <= 1
            assert 0 <= a["coverage_bounded"] <= 1


@pytest.mark.slow  # runs the quick benchmark
def test_json_sane(quick):
    out, _ = quick
    r = json.loads((out / "ci.json").read_text())
    assert {"config", "environment", "workloads", "sampler", "peers", "duration_s",
            "summary"} <= set(r)
    w = r["workloads"]["pums_dup"]
    _check_latency(w, {q.name for q in PUMS})
    _check_accuracy(w, {q.name for q in PUMS})
    # public keys are always all released; noise shrinks as epsilon grows
    assert w["accuracy"]["count_by_sex"]["epsilons"]["1"]["released_share"] == 1
    people = w["accuracy"]["people_by_married"]["epsilons"]
    assert people["10"]["median_rel_error"] <= people["0.1"]["median_rel_error"]
    assert set(w["scale"]) == {q.name for q in PUMS}
    # grouped by person attributes the catalog declares one_per_user, checked on the
    # generated data: the window is shown but does not run (dpsql.one_per_user)
    sex = w["latency"]["count_by_sex"]["10000"]["shape"]
    assert sex["l0_window"] and not sex["l0_window_ran"]
    assert w["sizes"]["10000"]["users"] == 10_000
    rates = {s["sampler"]: s["cells_per_s"] for s in r["sampler"]}
    assert len(rates) == 6 and all(v > 0 for v in rates.values())
    assert r["peers"]["smartnoise"]["status"].startswith("skipped")


@pytest.mark.slow  # runs the quick benchmark
@needs_tpchgen
def test_tpch_results(quick):
    out, _ = quick
    r = json.loads((out / "ci.json").read_text())
    w = r["workloads"]["tpch"]
    assert w["status"] == "ok"
    small, large = (size_key(s) for s in QUICK_TPCH.sizes)
    assert list(w["sizes"]) == [small, large]
    assert w["sizes"][small]["users"] == 1_500  # sf 0.01: 1,500 customers
    assert w["sizes"][large]["rows"] > w["sizes"][small]["rows"] > 50_000
    _check_latency(w, {q.name for q in TPCH})
    timed_large = {q for q, by in w["latency"].items() if large in by}
    assert timed_large == set(QUICK_TPCH.large_queries)
    assert all(small in by for by in w["latency"].values())
    # the user behind foreign keys needs the per-user aggregate; a PRIMARY KEY user does not
    shapes = {q: by[small]["shape"] for q, by in w["latency"].items()}
    assert shapes["q1"] == {"per_user_aggregate": True, "l0_window": True,
                            "l0_window_ran": True}
    assert shapes["q6"]["per_user_aggregate"] and not shapes["q6"]["l0_window"]
    assert not shapes["segment_balance"]["per_user_aggregate"]
    _check_accuracy(w, {q.name for q in TPCH})
    for q in ("q1", "q12", "segment_balance"):  # public keys: every true group released
        assert w["accuracy"][q]["epsilons"]["1"]["released_share"] == 1, q
    # Q13's true counts above orders' max_rows (10) fold into 10: those keys are never out
    q13 = w["accuracy"]["q13"]
    assert q13["true_groups"] > 11
    assert q13["epsilons"]["10"]["released_share"] == pytest.approx(11 / q13["true_groups"])
    q6 = w["accuracy"]["q6"]["epsilons"]
    assert q6["10"]["median_rel_error"] < q6["0.1"]["median_rel_error"]
    assert set(w["scale"]) == set(QUICK_TPCH.large_queries)
    for sc in w["scale"].values():
        assert sc["sizes"] == list(QUICK_TPCH.sizes)
        assert math.isfinite(sc["private_exponent"])


@pytest.mark.slow  # runs the quick benchmark
def test_summary_and_targets(quick):
    _, results = quick
    s = results["summary"]
    ran = [k for k, w in results["workloads"].items() if w.get("status") == "ok"]
    assert set(s["workloads"]) == set(ran)
    for wname in ran:
        sizes = s["workloads"][wname]["sizes"]
        assert len(sizes) == 2
        for x in sizes.values():
            assert 0 < x["min_private_over_floor"] <= x["median_private_over_floor"] \
                <= x["max_private_over_floor"]
        assert s["workloads"][wname]["accuracy"]["1"]["median_of_median_rel_error"] >= 0
    targets = {t["target"]: t for t in s["targets"]}
    assert len(targets) == 4
    floor = next(t for t in s["targets"] if "private/floor" in t["target"])
    assert floor["met"] in (True, False)
    unique = next(t for t in s["targets"] if "unique" in t["target"])
    if HAVE_TPCHGEN:
        assert "segment_balance" in unique["measured"] and unique["met"] in (True, False)
    peer = [t for t in s["targets"] if "SmartNoise" in t["target"]]
    assert len(peer) == 2 and all(t["met"] is None for t in peer)


@pytest.mark.slow  # runs the quick benchmark
def test_markdown_mentions_everything(quick):
    out, results = quick
    md = (out / "ci.md").read_text()
    for q in PUMS:
        assert q.name in md
    assert "## Summary" in md and "| target (issue 9) |" in md
    assert "smartnoise: skipped" in md
    assert "ci_error_vs_epsilon.png" in md
    if HAVE_TPCHGEN:
        for q in TPCH:
            assert f"| {q.name} |" in md
        assert "**TPC-H, sf 0.01**" in md and "**TPC-H, sf 0.02**" in md
        assert "private ms @ sf 0.01" in md
    else:
        assert "TPC-H: tpchgen-cli is not installed" in md


def test_tpch_bounds_match_the_catalog():
    cat = dpsql.load_catalog(catalog_path("tpch"))
    line, orders = cat.table("lineitem"), cat.table("orders")
    cols = line.columns
    assert line.max_rows == tpch_queries.LINEITEM_ROWS
    assert orders.max_rows == tpch_queries.ORDERS_ROWS
    for name, bounds in (("l_quantity", tpch_queries.QUANTITY),
                         ("l_extendedprice", tpch_queries.PRICE),
                         ("l_discount", tpch_queries.DISCOUNT), ("l_tax", tpch_queries.TAX)):
        assert (cols[name].lower, cols[name].upper) == bounds, name
    acct = cat.table("customer").columns["c_acctbal"]
    assert (acct.lower, acct.upper) == tpch_queries.ACCTBAL


def _bounded_matches(workload_name: str, size: float) -> None:
    """At a huge ε, dpsql's answer is the floor's bounded answer, within its error bar."""
    workload = get_workload(workload_name)
    path = workload.database(size)
    conn = dpsql.connect(str(path), catalog=workload.catalog(size), ledger=":memory:",
                         budget=(1e12, 0.5), alpha=1e-9)
    plain = measure.open_plain(path)
    try:
        for q in workload.queries:
            bounded = measure.truth(plain, q.floor, q.keys)
            # max_groups never binds: the floor skips the L0 step
            res = conn.execute(q.sql, epsilon=1e7, delta=q.delta or 1e-6, max_groups=1000)
            nk = len(q.keys)
            assert bounded, q.name
            seen = 0
            for row, acc in zip(res.rows, res.accuracy, strict=True):
                key = tuple(row[:nk])
                if key not in bounded:  # public keys the data do not have
                    continue
                seen += 1
                for col, value, width in zip(res.columns[nk:], row[nk:], acc[nk:],
                                             strict=True):
                    want = float(bounded[key][col])
                    assert abs(float(value) - want) <= width + 1e-6 * abs(want), (q.name, col)
            assert seen == min(len(bounded), len(res.rows)), q.name
    finally:
        conn.close()
        plain.close()


def test_pums_floors_are_dpsqls_bounded_statistics():
    _bounded_matches("pums_dup", 10_000)


@needs_tpchgen
def test_tpch_floors_are_dpsqls_bounded_statistics():
    _bounded_matches("tpch", QUICK_TPCH.sizes[0])


@pytest.mark.slow  # runs the quick benchmark (tens of seconds)
def test_overhead_reported(quick):
    out, results = quick
    o = results["overhead"]
    for mode in ("plan_cache_on", "plan_cache_off", "memory_ledger", "answer_cache_hit",
                 "never_seen"):
        mix = o[mode]["mix"]
        assert mix["own_ms"] > 0 and math.isfinite(mix["own_ms"])
        assert mix["total_ms"] >= mix["own_ms"]
        assert abs(sum(mix["own_share"].values()) - 1) < 1e-6
    # a cached plan skips analysis, rewriting and checks
    on = o["plan_cache_on"]["mix"]["stages_ms"]
    assert on["analysis"] + on["rewrite"] + on["to_sql"] < \
        o["plan_cache_off"]["mix"]["stages_ms"]["to_sql"]
    assert "The engine's own time per query" in (out / "ci.md").read_text()


# -- python -m benchmarks scale (issue 23, item 4) --------------------------------------


def test_scale_command_runs_a_tiny_duckdb_job(tmp_path, capfd):
    """The scale command's plumbing at 20k rows: generation and measurement each in a
    subprocess, times, ratios and memory in the JSON and the markdown."""
    from benchmarks import __main__ as cli

    out, scratch = tmp_path / "out", tmp_path / "scratch"
    assert cli.main(["scale", "--duckdb-rows", "20k", "--no-spark", "--duckdb-queries",
                     "count_by_sex", "--runs", "1", "--out", str(out), "--scratch",
                     str(scratch), "--name", "tiny"]) == 0
    results = json.loads((out / "tiny.json").read_text())
    (job,) = results["jobs"]
    assert job["status"] == "ok", job
    assert job["generate"]["data"]["rows"] > 15_000
    q = job["queries"]["count_by_sex"]
    for key in ("private_s", "plain_s", "floor_s", "private_over_floor", "private_over_plain",
                "private_peak_rss_mib"):
        assert q[key] > 0 and math.isfinite(q[key]), key
    assert job["ru_maxrss_mib"] > 0 and job["load_average_start"]
    md = (out / "tiny.md").read_text()
    assert "| count_by_sex |" in md and "load average" in md
    assert not list(scratch.glob("worker-*.json"))  # workers' hand-over files are gone
    assert "count_by_sex: private" in capfd.readouterr().err  # progress on stderr


def test_scale_command_stops_a_job_past_its_memory_limit(tmp_path):
    """Past --memory-fraction a job aborts at once, and the engine's larger sizes are
    listed as not run, with the reason."""
    from benchmarks import scale

    out = tmp_path / "out"
    assert scale.main(["--duckdb-rows", "10k,20k", "--no-spark", "--memory-fraction",
                       "0.000001", "--out", str(out), "--scratch", str(tmp_path),
                       "--name", "oom"]) == 0
    results = json.loads((out / "oom.json").read_text())
    (job,) = results["jobs"]
    assert "aborted: RSS" in job["status"]
    (skipped,) = results["not_run"]
    assert "20k" in skipped["job"] and "did not finish" in skipped["reason"]
    assert "## Not run" in (out / "oom.md").read_text()


def test_scale_sizes_parse_suffixes():
    from benchmarks import scale

    parse = scale._sizes(int)
    assert parse("100M,10m") == [10_000_000, 100_000_000]
    assert parse("1e6,20k,100_000") == [20_000, 100_000, 1_000_000]
    with pytest.raises(Exception, match="positive"):
        parse("0")


def test_l0_cost_probe_strips_only_the_l0_step():
    """``python -m benchmarks.l0_cost``'s no-L0 SQL drops the ``max_groups`` step and
    nothing else: on the resampled PUMS (one group per person) it returns what dpsql's
    SQL returns, and the probe prints one line per query asked."""
    from benchmarks import l0_cost

    workload = get_workload("pums_dup")
    path = workload.database(10_000)
    conn = measure.open_private(path, workload.catalog(10_000))
    plain = measure.open_plain(path)
    try:
        for q in workload.queries:
            v = l0_cost.sql_variants(conn, q)
            assert "__over" not in v["no_l0"] and "__bounded" not in v["no_l0"], q.name
            assert sorted(plain.execute(v["sql"]).fetchall()) == sorted(
                plain.execute(v["no_l0"]).fetchall()), q.name
    finally:
        conn.close()
        plain.close()
    assert l0_cost.main(["--size", "10000", "--runs", "1", "count_by_sex"]) == 0
