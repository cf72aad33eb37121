"""The markdown summary and PNG plots of one benchmark run."""

from __future__ import annotations

from pathlib import Path

from benchmarks.measure import STAGES
from benchmarks.queries import QUERIES

_SQL = {q.name: q for q in QUERIES}


def write(results: dict, out_dir: Path, name: str) -> dict[str, str]:
    """Writes ``<name>.md`` and the plots; returns kind → file name."""
    files = {"json": f"{name}.json"}
    files.update(plots(results, out_dir, name))
    md = markdown(results, files)
    (out_dir / f"{name}.md").write_text(md)
    files["markdown"] = f"{name}.md"
    return files


# -- markdown --------------------------------------------------------------------------


def markdown(r: dict, files: dict[str, str]) -> str:
    cfg = r["config"]
    env = r["environment"]
    pk = env["packages"]
    w = r["workloads"]["pums_dup"]
    out = [
        f"# dpsql benchmark — `{r['name']}` ({cfg['name']} configuration)",
        "",
        f"Run {r['started']} in {r['duration_s'] / 60:.1f} min on {env['cpus']} cores, "
        f"Python {env['python']}, dpsql {pk.get('dpsql')}, DuckDB {pk.get('duckdb')}, "
        f"OpenDP {pk.get('opendp')}, numpy {pk.get('numpy')}; load average "
        f"{_load(env.get('load_average_start'))} at the start, "
        f"{_load(env.get('load_average_end'))} at the end. Regenerate with "
        f"`python -m benchmarks{' --quick' if cfg['name'] == 'quick' else ''}`.",
        "",
        *_load_note(env),
        "## Workloads",
        "",
        "* **PUMS, resampled** (`pums_dup`, catalog `catalog/pums_dup.yaml`: `max_rows` 3, "
        "`max_groups` 1): each new person copies one of the 1,000 bundled PUMS rows, 1–4 "
        "times as in `pums_dup.csv`; generated in DuckDB by `benchmarks/data.py` and cached "
        "under `benchmarks/data/`. Privacy unit: " + w["unit"] + ".",
        "",
        "| people | rows | file | generate/load s |",
        "|---:|---:|---|---:|",
    ]
    for size, info in w["sizes"].items():
        out.append(f"| {int(size):,} | {info['rows']:,} | `{info['database']}` | "
                   f"{info['prepare_s']:.1f} |")
    for wname, wl in r["workloads"].items():
        if wl.get("status") == "skipped":
            label = "TPC-H" if wname == "tpch" else wname
            out += ["", f"* **{label}: {wl['reason']}** (privacy unit {wl['unit']}; skipped)."]
    out += ["", "## Queries", "", "| query | SQL | shape |", "|---|---|---|"]
    for q in QUERIES:
        extra = f"; δ = {q.delta:g}" if q.delta and "δ" not in q.note else ""
        out.append(f"| {q.name} | `{q.sql}` | {q.note}{extra} |")

    out += ["", "## Latency", "",
            f"Medians of {cfg['runs']} interleaved runs at ε = {cfg['latency_epsilon']:g}: "
            "*private* is `Connection.execute` (parse to result, ledger charge included); "
            "*plain* the same SQL run directly on DuckDB; *floor* the hand-written "
            "one-clamped-aggregate-per-(user, group) query (DESIGN.md, Rewriting; it skips "
            "the L0 `max_groups` step). Peak memory: Python by tracemalloc, DuckDB by "
            "`duckdb_memory()` sampled every 5 ms during one private query.", ""]
    for size in w["sizes"]:
        rows = [(qn, by[size]) for qn, by in w["latency"].items() if size in by]
        if not rows:
            continue
        out += [f"**{int(size):,} people**", "",
                "| query | private ms | plain ms | floor ms | private/plain | private/floor "
                "| floor/plain | Python peak MiB | DuckDB peak MiB |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for qn, lat in rows:
            mem = lat["memory"]
            out.append(
                f"| {qn} | {lat['private_ms']:.1f} | {lat['plain_ms']:.1f} | "
                f"{lat['floor_ms']:.1f} | {lat['private_over_plain']:.1f}× | "
                f"{lat['private_over_floor']:.2f}× | {lat['floor_over_plain']:.1f}× | "
                f"{mem['python_peak_mib']:.1f} | {mem['duckdb_peak_mib']:.0f} |")
        out.append("")
    out += ["## Where the time of a private query goes", "",
            "Share of each stage in one pass of the pipeline timed piece by piece with "
            "dpsql's public functions, in `execute`'s order (median of "
            f"{cfg['stage_runs']} runs, {cfg['stage_runs_large']} at "
            f"{cfg['large']:,} people and more): *check* is what `execute` does before "
            "charging (DuckDB `DESCRIBE` of the rewritten query, `check_postprocess`); "
            "*accounting* a charge in an in-memory ledger; *backend* the rewritten SQL on a "
            "separate connection to the same DuckDB instance. *Unattributed*: the median "
            "`execute` time minus the pieces' total (execute's own small costs, and run-to-run "
            "noise of the backend).", ""]
    for size in w["sizes"]:
        rows = [(qn, by[size]) for qn, by in w["latency"].items() if size in by]
        if not rows:
            continue
        out += [f"**{int(size):,} people** (share %)", "",
                "| query | " + " | ".join(STAGES) + " | all but backend, ms | "
                "unattributed ms |",
                "|---|" + "---:|" * (len(STAGES) + 2)]
        for qn, lat in rows:
            share = lat["stage_share"]
            rest = sum(v for k, v in lat["stages_ms"].items() if k != "backend")
            out.append(f"| {qn} | " + " | ".join(f"{100 * share[c]:.1f}" for c in STAGES)
                       + f" | {rest:.1f} | {lat.get('unattributed_ms', 0):.0f} |")
        out.append("")

    if w["scale"]:
        sizes = next(iter(w["scale"].values()))["people"]
        out += ["## Scale", "",
                "Time against people (log-log slope = growth exponent; 1 is linear).", "",
                "| query | " + " | ".join(f"private ms @{s:,}" for s in sizes)
                + " | exponent private | exponent floor | exponent plain |",
                "|---|" + "---:|" * (len(sizes) + 3)]
        for qn, sc in w["scale"].items():
            out.append(f"| {qn} | " + " | ".join(f"{v:.0f}" for v in sc["private_ms"])
                       + f" | {sc['private_exponent']:.2f} | {sc['floor_exponent']:.2f} | "
                       f"{sc['plain_exponent']:.2f} |")
        out.append("")

    if w["accuracy"]:
        first = next(iter(w["accuracy"].values()))
        out += ["## Accuracy", "",
                f"{first['people']:,} people, {cfg['trials']} trials per ε. Relative error "
                "|noisy − true| / |true| over every cell of a true group (true = the plain "
                "query, so clamping and `max_rows` bias count); *released*: share of true "
                "groups in the answer; *coverage*: share of cells whose true value lies within "
                "the reported 95% half-width; *coverage (bounded)*: the same against the "
                "floor's exact bounded statistics, i.e. the noise alone.", "",
                "| query | ε | cost (ε, δ) | median rel. error | p90 rel. error | median vs "
                "bounded | released | coverage | coverage (bounded) | median by column |",
                "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
        for qn, acc in w["accuracy"].items():
            for eps, a in acc["epsilons"].items():
                by_col = ", ".join(f"{c} {_pct(v['median_rel_error'])}"
                                   for c, v in a["columns"].items())
                out.append(f"| {qn} | {eps} | ({a['cost'][0]:g}, {a['cost'][1]:g}) | "
                           f"{_pct(a['median_rel_error'])} | {_pct(a['p90_rel_error'])} | "
                           f"{_pct(a.get('median_rel_error_bounded'))} | "
                           f"{_pct(a['released_share'])} | {_pct(a['coverage'])} | "
                           f"{_pct(a['coverage_bounded'])} | {by_col} |")
        out += ["", "Bias of contribution bounding alone (no noise): median over true groups of "
                "|bounded − true| / |true|, bounded = the floor's exact statistics (`max_rows` 3 "
                "drops the 4th row of 9% of people; AVG uses DESIGN.md's centred sum).", "",
                "| query | " + " | ".join(["column", "bias"]) + " |", "|---|---|---:|"]
        for qn, acc in w["accuracy"].items():
            for col, b in acc.get("bounding_bias", {}).items():
                out.append(f"| {qn} | {col} | {_pct(b)} |")
        out.append("")

    out += ["## Sampler throughput", "",
            "Noise draws per second for one vector (median of repeats, fewer when a draw "
            "takes long); scale 10 (GridLaplace: sum of values in [0, 500000] at ε = 1).", "",
            "| sampler | " + " | ".join(f"n = {n:,}" for n in cfg["sampler_sizes"]) + " |",
            "|---|" + "---:|" * len(cfg["sampler_sizes"])]
    by_name: dict[str, dict[int, float]] = {}
    for s in r["sampler"]:
        by_name.setdefault(s["sampler"], {})[s["n"]] = s["cells_per_s"]
    for sname, vals in by_name.items():
        out.append(f"| {sname} | " + " | ".join(f"{_rate(vals.get(n))}"
                                                 for n in cfg["sampler_sizes"]) + " |")
    out.append("")

    out += ["## SmartNoise SQL side by side", ""]
    sn = r["peers"]["smartnoise"]
    if sn.get("status") != "ok":
        out += [f"smartnoise: {sn['status']}", ""]
    else:
        out += [
            f"SmartNoise SQL {sn['version']} in its own virtual environment "
            "(`benchmarks/.peers/smartnoise`; it pins opendp<0.15), run by "
            "`benchmarks/peers/smartnoise_runner.py` in a subprocess on an SQLite copy of the "
            f"same {sn['people']:,}-person table. Adaptation: its DuckDB route samples each "
            "user's rows with `ORDER BY random()` in a window (`sample_max_ids`), which DuckDB "
            "2.x refuses, so it runs on its SQLite route; metadata mirrors the catalog "
            f"(`max_ids: 3`, same bounds), δ = {sn['delta']:g}. SmartNoise has no public key "
            "domains: it thresholds every GROUP BY and charges ε per noisy aggregate plus one "
            "for the key count; its accuracy trials reuse one exact pre-aggregation "
            "(`pre_aggregated=`), drawing fresh noise each time.", "",
            "Latency (median of the runs at ε = 1; SmartNoise's exact aggregation alone in "
            "brackets) and the cost of asking each query at ε = 1:", "",
            "| query | dpsql ms | SmartNoise ms | dpsql cost | SmartNoise cost |",
            "|---|---:|---:|---|---|"]
        acc = w["accuracy"]
        errors = []
        for qn, e in sn["queries"].items():
            if "latency_ms" not in e:
                out.append(f"| {qn} | | | | SmartNoise error: {e.get('error', '')[:100]} |")
                continue
            one = "1" if "1" in e["epsilons"] else next(iter(e["epsilons"]), None)
            dcost = acc.get(qn, {}).get("epsilons", {}).get(one or "", {}).get("cost")
            scost = e["epsilons"].get(one or "", {}).get("cost")
            dl = e.get("dpsql_latency_ms")
            out.append(f"| {qn} | {'' if dl is None else f'{dl:.0f}'} | {e['latency_ms']:.0f} "
                       f"({e['exact_aggregation_ms']:.0f}) | {_cost(dcost)} | {_cost(scost)} |")
            errors += [f"{qn} at ε = {k}: {v[:160]}" for k, v in e.get("errors", {}).items()]
        out += ["", "Median relative error against the true answer: dpsql; SmartNoise asked at "
                "the same ε (it then spends more); SmartNoise asked at ε / k so that it spends "
                "what dpsql spends (*equal spend*); and, against the bounded answer (the noise "
                "alone), dpsql and SmartNoise at equal spend. In brackets: the share of true "
                "groups released, when not all. (SmartNoise's own bounded answer differs "
                "from the floor where it keeps `max_ids` sampled rows of a user instead of "
                "clamping the user's sum: SUM and AVG columns.)", "",
                "| query | ε | dpsql | SmartNoise, same ε asked | SmartNoise, equal spend | "
                "dpsql vs bounded | SmartNoise equal spend vs bounded |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for qn, e in sn["queries"].items():
            if "latency_ms" not in e:
                continue
            ours = acc.get(qn, {}).get("epsilons", {})
            for k in ours:
                a, b = e["epsilons"].get(k, {}), e["equal_spend"].get(k, {})
                out.append(
                    f"| {qn} | {k} | {_err(ours[k])} | {_err(a)} | {_err(b)} | "
                    f"{_pct(ours[k].get('median_rel_error_bounded'))} | "
                    f"{_pct(b.get('median_rel_error_bounded'))} |")
        if errors:
            out += ["", "SmartNoise refused (– above):", "", *[f"* {x}" for x in errors]]
        out.append("")

    out += ["## Plots", ""]
    for kind, fname in files.items():
        if fname.endswith(".png"):
            out.append(f"![{kind}]({fname})")
    out.append("")
    if r.get("notes"):
        out += ["## Notes", "", *[f"* {n}" for n in r["notes"]], ""]
    return "\n".join(out)


def _load_note(env: dict) -> list[str]:
    loads = [x for x in (env.get("load_average_start"), env.get("load_average_end")) if x]
    if not loads or max(x[0] for x in loads) <= (env.get("cpus") or 1):
        return []
    return ["**The machine was shared with other work during this run** (load average above "
            "the core count): absolute times are inflated and noisy; the ratios come from "
            "interleaved runs and suffer less.", ""]


def _load(x) -> str:
    return "unknown" if not x else "/".join(f"{v:.1f}" for v in x)


def _pct(x) -> str:
    if x is None:
        return "–"
    if x == 0:
        return "0"
    if x < 0.001:
        return f"{100 * x:.2g}%"
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def _rate(x) -> str:
    if x is None:
        return "–"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M/s"
    return f"{x / 1e3:.0f} k/s"


def _err(a: dict) -> str:
    """Median relative error, with the released share when groups were missing."""
    if not a:
        return "–"
    share = a.get("released_share")
    if share is not None and share < 0.9995:
        if not a.get("cells"):
            return "none released"
        return f"{_pct(a.get('median_rel_error'))} ({_pct(share)} released)"
    return _pct(a.get("median_rel_error"))


def _cost(c) -> str:
    return "–" if c is None else f"ε={c[0]:g}, δ={c[1]:.2g}"


# -- plots -----------------------------------------------------------------------------


def plots(r: dict, out_dir: Path, name: str) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = r["workloads"]["pums_dup"]
    files = {}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    # relative error vs epsilon, one panel per query
    if w["accuracy"]:
        n = len(w["accuracy"])
        ncols = 4
        nrows = (n + ncols - 1) // ncols
        fig, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols, 3.2 * nrows), squeeze=False)
        sn = r["peers"]["smartnoise"]
        from matplotlib.ticker import FuncFormatter, NullFormatter

        pct = FuncFormatter(lambda v, _: f"{100 * v:.4g}%")
        for ax, (qn, acc) in zip(axes.flat, w["accuracy"].items(), strict=False):
            eps = [float(e) for e in acc["epsilons"]]
            med = [_pos(a["median_rel_error"]) for a in acc["epsilons"].values()]
            p90 = [_pos(a["p90_rel_error"]) for a in acc["epsilons"].values()]
            ax.plot(eps, med, "o-", color=colors[0], label="dpsql median")
            ax.plot(eps, p90, "o--", color=colors[0], alpha=0.5, label="dpsql p90")
            noise = [_pos(a.get("median_rel_error_bounded")) for a in acc["epsilons"].values()]
            ax.plot(eps, noise, ":", color=colors[2], label="dpsql median vs bounded (noise)")
            peer = sn.get("queries", {}).get(qn) if sn.get("status") == "ok" else None
            if peer and peer.get("equal_spend"):
                eq = peer["equal_spend"]
                pe = [float(e) for e in eq]
                ax.plot(pe, [_pos(a["median_rel_error"]) for a in eq.values()], "s-",
                        color=colors[1], label="SmartNoise median (equal spend)")
                ax.plot(pe, [_pos(a["p90_rel_error"]) for a in eq.values()], "s--",
                        color=colors[1], alpha=0.5, label="SmartNoise p90 (equal spend)")
            ax.set_xscale("log")
            shown = [v for line in ax.get_lines() for v in line.get_ydata()
                     if v == v and v > 0]
            if shown and max(shown) / min(shown) > 10:
                ax.set_yscale("log")
                ax.yaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_formatter(pct)
            ax.tick_params(axis="y", which="both", labelsize=7)
            ax.set_title(qn, fontsize=10)
            ax.set_xlabel("ε spent by the query")
            ax.set_ylabel("relative error")
            ax.grid(True, which="both", alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        fig.suptitle(f"Relative error vs ε ({next(iter(w['accuracy'].values()))['people']:,} "
                     "people)")
        fig.tight_layout()
        files["error_vs_epsilon"] = _save(fig, out_dir, f"{name}_error_vs_epsilon.png")

    # DP / plain and DP / floor latency ratios per query and size
    if w["latency"]:
        import numpy as np

        qnames = list(w["latency"])
        sizes = list(w["sizes"])
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
        width = 0.8 / len(sizes)
        x = np.arange(len(qnames))
        for ax, key, title in ((axes[0], "private_over_plain", "private / plain"),
                               (axes[1], "private_over_floor", "private / floor")):
            for i, size in enumerate(sizes):
                vals = [w["latency"][q].get(size, {}).get(key, np.nan) for q in qnames]
                ax.bar(x + i * width, vals, width, label=f"{int(size):,} people",
                       color=colors[i % len(colors)])
            ax.set_xticks(x + width * (len(sizes) - 1) / 2, qnames, rotation=30, ha="right",
                          fontsize=8)
            ax.set_yscale("log")
            ax.axhline(1, color="grey", lw=0.8)
            ax.set_title(f"latency ratio {title}")
            ax.grid(True, axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        files["latency_ratio"] = _save(fig, out_dir, f"{name}_latency_ratio.png")

        # stage shares at the largest size each query was timed at
        fig, ax = plt.subplots(figsize=(10, 0.45 * len(qnames) + 1.5))
        cols = list(STAGES)
        left = np.zeros(len(qnames))
        for i, c in enumerate(cols):
            vals = []
            for q in qnames:
                last = w["latency"][q][list(w["latency"][q])[-1]]
                vals.append(last["stage_share"][c])
            ax.barh(qnames, vals, left=left, label=c, color=plt.cm.tab10(i % 10))
            left += np.asarray(vals)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of the pipeline's time, stage by stage (largest size timed)")
        ax.legend(ncol=5, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25))
        fig.tight_layout()
        files["stages"] = _save(fig, out_dir, f"{name}_stages.png")

    # time vs data size
    if w["scale"]:
        fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharey=True)
        for ax, kind in zip(axes, ("private", "floor", "plain"), strict=True):
            for i, (qn, sc) in enumerate(w["scale"].items()):
                ax.plot(sc["people"], [v / 1000 for v in sc[f"{kind}_ms"]], "o-",
                        color=colors[i % len(colors)],
                        label=f"{qn} (slope {sc[f'{kind}_exponent']:.2f})")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{kind} query")
            ax.set_xlabel("people")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        axes[0].set_ylabel("seconds (median)")
        fig.tight_layout()
        files["scale"] = _save(fig, out_dir, f"{name}_scale.png")

    # sampler throughput
    if r["sampler"]:
        import numpy as np

        names = list(dict.fromkeys(s["sampler"] for s in r["sampler"]))
        ns = sorted({s["n"] for s in r["sampler"]})
        fig, ax = plt.subplots(figsize=(10, 0.5 * len(names) + 1.5))
        height = 0.8 / len(ns)
        y = np.arange(len(names))
        for i, n in enumerate(ns):
            vals = [next((s["cells_per_s"] for s in r["sampler"]
                          if s["sampler"] == nm and s["n"] == n), np.nan) for nm in names]
            ax.barh(y + i * height, vals, height, label=f"n = {n:,}", color=colors[i])
        ax.set_yticks(y + height * (len(ns) - 1) / 2, names, fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("noise draws per second")
        ax.grid(True, axis="x", which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        files["sampler"] = _save(fig, out_dir, f"{name}_sampler.png")
    return files


def _pos(x):
    """A value for a log axis: zero or missing becomes a gap."""
    return float("nan") if x is None or x <= 0 else x


def _save(fig, out_dir: Path, fname: str) -> str:
    fig.savefig(out_dir / fname, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return fname
