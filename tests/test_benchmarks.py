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

from benchmarks import run as bench  # noqa: E402
from benchmarks.queries import QUERIES  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    results = bench.run("quick", out, progress=False, name="ci", peers=False)
    return out, results


def test_files_written(quick):
    out, results = quick
    for name in ("ci.json", "ci.md", "ci_error_vs_epsilon.png", "ci_latency_ratio.png",
                 "ci_scale.png"):
        path = out / name
        assert path.exists() and path.stat().st_size > 0, name
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(results["files"].values()) <= {p.name for p in out.iterdir()}


def test_json_sane(quick):
    out, _ = quick
    r = json.loads((out / "ci.json").read_text())
    assert {"config", "environment", "workloads", "sampler", "peers", "duration_s"} <= set(r)
    w = r["workloads"]["pums_dup"]
    assert r["workloads"]["tpch"]["status"] == "skipped"
    assert set(w["latency"]) == {q.name for q in QUERIES}
    for by_size in w["latency"].values():
        for lat in by_size.values():
            for key in ("private_ms", "plain_ms", "floor_ms", "private_over_plain",
                        "private_over_floor"):
                assert lat[key] > 0 and math.isfinite(lat[key]), key
            assert abs(sum(lat["stage_share"].values()) - 1) < 1e-6
            assert lat["memory"]["python_peak_mib"] > 0
    for acc in w["accuracy"].values():
        assert set(acc["epsilons"]) == {"0.1", "1", "10"}
        for a in acc["epsilons"].values():
            assert a["median_rel_error"] is not None and a["median_rel_error"] >= 0
            assert a["p90_rel_error"] >= a["median_rel_error"]
            assert 0 <= a["released_share"] <= 1
            assert 0 <= a["coverage"] <= 1
    # public keys are always all released; noise shrinks as epsilon grows
    assert w["accuracy"]["count_by_sex"]["epsilons"]["1"]["released_share"] == 1
    people = w["accuracy"]["people_by_married"]["epsilons"]
    assert people["10"]["median_rel_error"] <= people["0.1"]["median_rel_error"]
    assert set(w["scale"]) == {q.name for q in QUERIES}
    rates = {s["sampler"]: s["cells_per_s"] for s in r["sampler"]}
    assert len(rates) == 6 and all(v > 0 for v in rates.values())
    assert r["peers"]["smartnoise"]["status"].startswith("skipped")


def test_markdown_mentions_everything(quick):
    out, _ = quick
    md = (out / "ci.md").read_text()
    for q in QUERIES:
        assert q.name in md
    assert "TPC-H: waiting for joins, issue 5" in md
    assert "smartnoise: skipped" in md
    assert "ci_error_vs_epsilon.png" in md
