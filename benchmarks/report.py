"""The summary against the targets, the markdown report and the PNG plots of one run."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.measure import STAGES
from benchmarks.workloads import WORKLOADS

#: Issue 9's targets.
TARGET_FLOOR = 1.25
TARGET_UNIQUE_PLAIN = 2.0
TARGET_PEER_SPEEDUP = 10.0
#: Two median errors within this relative distance are a tie (20 trials cannot tell them
#: apart; both are dominated by the same contribution bias on counts).
ERROR_TIE = 0.01


def write(results: dict, out_dir: Path, name: str) -> dict[str, str]:
    """Writes ``<name>.md`` and the plots; returns kind → file name."""
    files = {"json": f"{name}.json"}
    files.update(plots(results, out_dir, name))
    md = markdown(results, files)
    (out_dir / f"{name}.md").write_text(md)
    files["markdown"] = f"{name}.md"
    return files


def _ran(r: dict) -> dict[str, dict]:
    """The workloads of a run that ran, in the suite's order."""
    return {k: w for k, w in r["workloads"].items() if w.get("status") == "ok"}


def _queries(wname: str) -> dict:
    return next(({q.name: q for q in w.queries} for w in WORKLOADS if w.name == wname), {})


# -- summary against the targets -------------------------------------------------------


def summary(r: dict) -> dict:
    """Headline numbers per workload and size, and each target of issue 9, met or not.

    Medians are over the queries timed at a size. *unique_user*: the queries whose
    rewrite has no per-user aggregate (the database keeps the user key unique).
    """
    out: dict = {"workloads": {}, "targets": []}
    floors, uniques = [], []
    for wname, w in _ran(r).items():
        sizes: dict = {}
        for size, info in w["sizes"].items():
            lats = {q: by[size] for q, by in w["latency"].items() if size in by}
            if not lats:
                continue
            pf = [x["private_over_floor"] for x in lats.values()]
            pp = [x["private_over_plain"] for x in lats.values()]
            unique = {q: x["private_over_plain"] for q, x in lats.items()
                      if not x.get("shape", {}).get("per_user_aggregate", True)}
            sizes[size] = {
                "label": info["label"],
                "queries": len(lats),
                "median_private_over_floor": statistics.median(pf),
                "min_private_over_floor": min(pf), "max_private_over_floor": max(pf),
                "median_private_over_plain": statistics.median(pp),
                "min_private_over_plain": min(pp), "max_private_over_plain": max(pp),
                "unique_user_private_over_plain": unique,
                # the pieces of the pipeline other than the backend (robust to the backend's
                # run-to-run noise, unlike private − backend)
                "median_overhead_ms": statistics.median(
                    sum(v for k, v in x["stages_ms"].items() if k != "backend")
                    for x in lats.values()),
            }
            floors.append((w["title"], info["label"], statistics.median(pf)))
            uniques += [(w["title"], info["label"], q, v) for q, v in unique.items()]
        acc = {}
        for eps in ("0.1", "1", "10"):
            med = [a["epsilons"][eps]["median_rel_error"] for a in w["accuracy"].values()
                   if eps in a["epsilons"] and a["epsilons"][eps]["median_rel_error"] is not None]
            noise = [a["epsilons"][eps]["median_rel_error_bounded"]
                     for a in w["accuracy"].values() if eps in a["epsilons"]
                     and a["epsilons"][eps]["median_rel_error_bounded"] is not None]
            cov = [a["epsilons"][eps]["coverage_bounded"] for a in w["accuracy"].values()
                   if eps in a["epsilons"] and a["epsilons"][eps]["coverage_bounded"] is not None]
            if med:
                acc[eps] = {"median_of_median_rel_error": statistics.median(med),
                            "max_median_rel_error": max(med),
                            "median_of_noise_rel_error": (statistics.median(noise)
                                                          if noise else None),
                            "median_coverage_bounded": statistics.median(cov) if cov else None}
        out["workloads"][wname] = {"title": w["title"], "sizes": sizes, "accuracy": acc}

    if floors:
        worst = max(floors, key=lambda x: x[2])
        out["targets"].append({
            "target": f"median private/floor ≤ {TARGET_FLOOR:g}× on every workload",
            "measured": "; ".join(f"{t} {label}: {v:.2f}×" for t, label, v in floors),
            "met": worst[2] <= TARGET_FLOOR})
    if uniques:
        out["targets"].append({
            "target": f"private/plain ≤ {TARGET_UNIQUE_PLAIN:g}× where the user key is unique "
                      "in the database",
            "measured": "; ".join(f"{t} {label} {q}: {v:.1f}×" for t, label, q, v in uniques),
            "met": all(v <= TARGET_UNIQUE_PLAIN for *_, v in uniques)})
    else:
        out["targets"].append({
            "target": f"private/plain ≤ {TARGET_UNIQUE_PLAIN:g}× where the user key is unique "
                      "in the database",
            "measured": "no query of this run has a unique user key", "met": None})
    out["targets"] += _peer_targets(r)
    return out


def _peer_targets(r: dict) -> list[dict]:
    sn = r["peers"]["smartnoise"]
    speed = {"target": f"≥ {TARGET_PEER_SPEEDUP:g}× faster than SmartNoise SQL (PUMS)",
             "measured": f"smartnoise: {sn.get('status')}", "met": None}
    error = {"target": "median relative error ≤ SmartNoise's at the same total ε",
             "measured": speed["measured"], "met": None}
    if sn.get("status") != "ok":
        return [speed, error]
    w = r["workloads"].get("pums_dup", {})
    ratios = {q: e["latency_ms"] / e["dpsql_latency_ms"] for q, e in sn["queries"].items()
              if e.get("dpsql_latency_ms")}
    if ratios:
        med = statistics.median(ratios.values())
        speed["measured"] = (f"{sn['people']:,} people: median {med:.1f}× "
                             f"({min(ratios.values()):.1f}–{max(ratios.values()):.1f}×)")
        speed["met"] = med >= TARGET_PEER_SPEEDUP
        speed["ratios"] = ratios
    pairs, strict, losses, quieter = 0, [], [], 0
    for q, e in sn["queries"].items():
        ours = w.get("accuracy", {}).get(q, {}).get("epsilons", {})
        for eps, a in ours.items():
            theirs = e.get("equal_spend", {}).get(eps)
            if not theirs or not theirs.get("cells") or a.get("median_rel_error") is None:
                continue
            pairs += 1
            mine, other = a["median_rel_error"], theirs["median_rel_error"]
            noise, other_noise = (a.get("median_rel_error_bounded"),
                                  theirs.get("median_rel_error_bounded"))
            quieter += noise is not None and other_noise is not None and noise <= other_noise
            if mine > other:
                text = f"{q} at ε = {eps}: {100 * mine:.4f}% vs {100 * other:.4f}%"
                strict.append(text)
                if mine > other * (1 + ERROR_TIE):
                    losses.append(text)
    if pairs:
        error["measured"] = (
            f"dpsql's median error ≤ SmartNoise's (equal spend) in {pairs - len(strict)} of "
            f"{pairs} (query, ε) pairs"
            + (f"; higher in {'; '.join(strict)}" if strict else "")
            + f"; its noise alone (against the bounded answer) is ≤ SmartNoise's in "
              f"{quieter} of {pairs}"
            + (f"; differences within {100 * ERROR_TIE:g}% count as ties" if strict else ""))
        error["met"] = not losses
    return [speed, error]


# -- markdown --------------------------------------------------------------------------


def markdown(r: dict, files: dict[str, str]) -> str:
    cfg = r["config"]
    env = r["environment"]
    pk = env["packages"]
    ran = _ran(r)
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
        *_git_note(env),
        *_load_note(env),
    ]
    out += _summary_md(r)
    out += ["## Workloads", ""]
    for wname, w in r["workloads"].items():
        if w.get("status") != "ok":
            out += [f"* **{w.get('title', wname)}: {w['reason']}** (privacy unit {w['unit']}; "
                    "skipped).", ""]
            continue
        workload = next(x for x in WORKLOADS if x.name == wname)
        out += [f"* {workload.describe()}", "",
                "| size | users | rows | file | generate/load s |",
                "|---|---:|---:|---|---:|"]
        for info in w["sizes"].values():
            out.append(f"| {info['label']} | {info['users']:,} | {info['rows']:,} | "
                       f"`{info['database']}` | {info['prepare_s']:.1f} |")
        out.append("")

    out += ["## Queries", "",
            "*Rewrite*: what dpsql's SQL does beyond the plain query — a per-user aggregate "
            "(*per-user*), and the `max_groups` window (*L0*); *unique user* means the "
            "database keeps the user key unique, so neither is needed. Where every key is a "
            "`one_per_user` column the data proves one per user, the window is shown "
            "(`Result.sql`) but not run: it would keep every row (`dpsql/one_per_user.py`).",
            ""]
    for wname, w in ran.items():
        queries = _queries(wname)
        out += [f"**{w['title']}**", "", "| query | SQL | shape | rewrite |", "|---|---|---|---|"]
        for qname, q in queries.items():
            extra = f"; δ = {q.delta:g}" if q.delta and "δ" not in q.note else ""
            out.append(f"| {qname} | `{' '.join(q.sql.split())}` | {q.note}{extra} | "
                       f"{_shape(w, qname)} |")
        out.append("")

    out += ["## Latency", "",
            f"Medians of {cfg['runs']} interleaved runs (more, up to 25, while a query's "
            f"runs take under a second) at ε = {cfg['latency_epsilon']:g}: "
            "*private* is `Connection.execute` (parse to result, ledger charge included); "
            "*plain* the same SQL run directly on DuckDB; *floor* the hand-written "
            "one-clamped-aggregate-per-(user, group) query, with the join that finds the user "
            "(DESIGN.md, Rewriting; it skips the L0 `max_groups` step). Peak memory: Python by "
            "tracemalloc, DuckDB by `duckdb_memory()` sampled every 5 ms during one private "
            "query.", ""]
    for w in ran.values():
        for size, info in w["sizes"].items():
            rows = [(qn, by[size]) for qn, by in w["latency"].items() if size in by]
            if not rows:
                continue
            out += [f"**{w['title']}, {info['label']}**", "",
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
            f"{cfg['stage_runs']} runs, {cfg['stage_runs_large']} at a plan's large sizes): "
            "*check* is what `execute` does before "
            "charging (DuckDB `DESCRIBE` of the rewritten query, `check_postprocess`); "
            "*accounting* a charge in an in-memory ledger; *backend* the rewritten SQL on a "
            "separate connection to the same DuckDB instance. *Unattributed*: the median "
            "`execute` time minus the pieces' total (execute's own small costs, and run-to-run "
            "noise of the backend).", ""]
    for w in ran.values():
        for size, info in w["sizes"].items():
            rows = [(qn, by[size]) for qn, by in w["latency"].items() if size in by]
            if not rows:
                continue
            out += [f"**{w['title']}, {info['label']}** (share %)", "",
                    "| query | " + " | ".join(STAGES) + " | all but backend, ms | "
                    "unattributed ms |",
                    "|---|" + "---:|" * (len(STAGES) + 2)]
            for qn, lat in rows:
                share = lat["stage_share"]
                rest = sum(v for k, v in lat["stages_ms"].items() if k != "backend")
                out.append(f"| {qn} | " + " | ".join(f"{100 * share[c]:.1f}" for c in STAGES)
                           + f" | {rest:.1f} | {lat.get('unattributed_ms', 0):.0f} |")
            out.append("")

    scaled = {k: w for k, w in ran.items() if w["scale"]}
    if scaled:
        out += ["## Scale", "",
                "Time against data size (log-log slope = growth exponent; 1 is linear).", ""]
        for w in scaled.values():
            labels = [w["sizes"][s]["label"] for s in w["sizes"]]
            out += [f"**{w['title']}**", "",
                    "| query | " + " | ".join(f"private ms @ {x}" for x in labels)
                    + " | exponent private | exponent floor | exponent plain |",
                    "|---|" + "---:|" * (len(labels) + 3)]
            for qn, sc in w["scale"].items():
                out.append(f"| {qn} | " + " | ".join(f"{v:.0f}" for v in sc["private_ms"])
                           + f" | {sc['private_exponent']:.2f} | {sc['floor_exponent']:.2f} | "
                           f"{sc['plain_exponent']:.2f} |")
            out.append("")

    accurate = {k: w for k, w in ran.items() if w["accuracy"]}
    if accurate:
        out += ["## Accuracy", "",
                f"{cfg['trials']} trials per ε. Relative error |noisy − true| / |true| over "
                "every cell of a true group (true = the plain query, so clamping and `max_rows` "
                "bias count); *released*: share of true groups in the answer; *coverage*: share "
                "of cells whose true value lies within the reported 95% half-width; *coverage "
                "(bounded)*: the same against the floor's exact bounded statistics, i.e. the "
                "noise alone.", ""]
        for w in accurate.values():
            first = next(iter(w["accuracy"].values()))
            out += [f"**{w['title']}, {first['label']}**", "",
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
            out.append("")
        out += ["Bias of contribution bounding alone (no noise): median over true groups of "
                "|bounded − true| / |true|, bounded = the floor's exact statistics (PUMS: "
                "`max_rows` 3 drops the 4th row of 9% of people; TPC-H: `max_rows` 40 line "
                "items and 10 orders per customer and group; AVG as dpsql computes it).", "",
                "| workload | query | column | bias |", "|---|---|---|---:|"]
        for w in accurate.values():
            for qn, acc in w["accuracy"].items():
                for col, b in acc.get("bounding_bias", {}).items():
                    out.append(f"| {w['title']} | {qn} | {col} | {_pct(b)} |")
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
    out += _smartnoise_md(r)
    if r.get("overhead"):
        from benchmarks import overhead

        out += [overhead.markdown(r["overhead"])]

    out += ["## Plots", ""]
    for kind, fname in files.items():
        if fname.endswith(".png"):
            out.append(f"![{kind}]({fname})")
    out.append("")
    if r.get("notes"):
        out += ["## Notes", "", *[f"* {n}" for n in r["notes"]], ""]
    return "\n".join(out)


def _summary_md(r: dict) -> list[str]:
    s = r.get("summary") or summary(r)
    out = ["## Summary", "",
           "Medians over the queries timed at each size; error at ε = 1 is the median over "
           "queries of each query's median relative error against the true answer (bias of "
           "the contribution bounds included), *noise* the same against the bounded answer.",
           "", "| workload | size | private/floor | private/plain | overhead ms (all but "
           "backend) | error at ε = 1 | noise at ε = 1 |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for w in s["workloads"].values():
        one = w["accuracy"].get("1", {})
        for x in w["sizes"].values():
            out.append(
                f"| {w['title']} | {x['label']} | {x['median_private_over_floor']:.2f}× "
                f"({x['min_private_over_floor']:.2f}–{x['max_private_over_floor']:.2f}) | "
                f"{x['median_private_over_plain']:.1f}× ({x['min_private_over_plain']:.1f}–"
                f"{x['max_private_over_plain']:.1f}) | {x['median_overhead_ms']:.0f} | "
                f"{_pct(one.get('median_of_median_rel_error'))} | "
                f"{_pct(one.get('median_of_noise_rel_error'))} |")
    out += ["", "| target (issue 9) | measured | met |", "|---|---|---|"]
    for t in s["targets"]:
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        out.append(f"| {t['target']} | {t['measured']} | {met} |")
    out.append("")
    return out


def _smartnoise_md(r: dict) -> list[str]:
    out = ["## SmartNoise SQL side by side", ""]
    sn = r["peers"]["smartnoise"]
    if sn.get("status") != "ok":
        return out + [f"smartnoise: {sn['status']}", ""]
    w = r["workloads"]["pums_dup"]
    out += [
        f"SmartNoise SQL {sn['version']} in its own virtual environment "
        "(`benchmarks/.peers/smartnoise`; it pins opendp<0.15), run by "
        "`benchmarks/peers/smartnoise_runner.py` in a subprocess on an SQLite copy of the "
        f"same {sn['people']:,}-person PUMS table. Adaptation: its DuckDB route samples each "
        "user's rows with `ORDER BY random()` in a window (`sample_max_ids`), which DuckDB "
        "2.x refuses, so it runs on its SQLite route; metadata mirrors the catalog "
        f"(`max_ids: 3`, same bounds), δ = {sn['delta']:g}. SmartNoise has no public key "
        "domains: it thresholds every GROUP BY and charges ε per noisy aggregate plus one "
        "for the key count; its accuracy trials reuse one exact pre-aggregation "
        "(`pre_aggregated=`), drawing fresh noise each time. It does not run on TPC-H: it "
        "has no foreign-key privacy units (the user key must be a column of every private "
        "table) and refuses joins of private tables (\"We only know how to handle tables "
        "with one key\").", "",
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
    return out


def _shape(w: dict, qname: str) -> str:
    by_size = w["latency"].get(qname) or {}
    if not by_size:
        return "–"
    sh = next(iter(by_size.values())).get("shape", {})
    if not sh.get("per_user_aggregate", True):
        return "unique user"
    if sh.get("l0_window") and not sh.get("l0_window_ran", True):
        return "per-user (+ L0 shown, left out: keys checked one per user)"
    return "per-user + L0" if sh.get("l0_window") else "per-user"


def _git_note(env: dict) -> list[str]:
    git = env.get("git")
    if not git:
        return []
    dirty = git.get("engine_changes_uncommitted") or 0
    text = f"Engine: commit `{git['commit']}`"
    if dirty:
        text += (f", with {dirty} uncommitted change(s) under `dpsql/` or `catalog/` in the "
                 "working tree")
    return [text + ".", ""]


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
    """One figure per kind, one row (or panel group) per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = _ran(r)
    files = {}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    accurate = {k: w for k, w in ran.items() if w["accuracy"]}
    if accurate:
        files["error_vs_epsilon"] = _error_plot(r, accurate, out_dir, name, plt, colors)

    timed = {k: w for k, w in ran.items() if w["latency"]}
    if timed:
        files["latency_ratio"] = _latency_plot(timed, out_dir, name, plt, colors)
        files["stages"] = _stages_plot(timed, out_dir, name, plt)

    scaled = {k: w for k, w in ran.items() if w["scale"]}
    if scaled:
        fig, axes = plt.subplots(len(scaled), 3, figsize=(14, 4 * len(scaled)), squeeze=False)
        for row, w in zip(axes, scaled.values(), strict=True):
            for ax, kind in zip(row, ("private", "floor", "plain"), strict=True):
                for i, (qn, sc) in enumerate(w["scale"].items()):
                    ax.plot(sc["sizes"], [v / 1000 for v in sc[f"{kind}_ms"]], "o-",
                            color=colors[i % len(colors)],
                            label=f"{qn} (slope {sc[f'{kind}_exponent']:.2f})")
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_title(f"{w['title']}: {kind} query")
                ax.set_xlabel(w["size_unit"])
                ax.grid(True, which="both", alpha=0.3)
                ax.legend(fontsize=7)
            row[0].set_ylabel("seconds (median)")
        fig.tight_layout()
        files["scale"] = _save(fig, out_dir, f"{name}_scale.png")

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


def _error_plot(r: dict, accurate: dict, out_dir: Path, name: str, plt, colors) -> str:
    """Relative error vs ε, one panel per query; each workload starts a new row."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ncols = 4
    rows_of = {k: (len(w["accuracy"]) + ncols - 1) // ncols for k, w in accurate.items()}
    nrows = sum(rows_of.values())
    fig, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols, 3.2 * nrows), squeeze=False)
    sn = r["peers"]["smartnoise"]
    pct = FuncFormatter(lambda v, _: f"{100 * v:.4g}%")
    first_row = 0
    for wname, w in accurate.items():
        panels = axes[first_row:first_row + rows_of[wname]].flat
        first_row += rows_of[wname]
        label = next(iter(w["accuracy"].values()))["label"]
        panels = list(panels)
        for ax, (qn, acc) in zip(panels, w["accuracy"].items(), strict=False):
            eps = [float(e) for e in acc["epsilons"]]
            vals = list(acc["epsilons"].values())
            ax.plot(eps, [_pos(a["median_rel_error"]) for a in vals], "o-", color=colors[0],
                    label="dpsql median")
            ax.plot(eps, [_pos(a["p90_rel_error"]) for a in vals], "o--", color=colors[0],
                    alpha=0.5, label="dpsql p90")
            ax.plot(eps, [_pos(a.get("median_rel_error_bounded")) for a in vals], ":",
                    color=colors[2], label="dpsql median vs bounded (noise)")
            peer = (sn.get("queries", {}).get(qn)
                    if sn.get("status") == "ok" and wname == "pums_dup" else None)
            if peer and peer.get("equal_spend"):
                eq = peer["equal_spend"]
                pe = [float(e) for e in eq]
                ax.plot(pe, [_pos(a["median_rel_error"]) for a in eq.values()], "s-",
                        color=colors[1], label="SmartNoise median (equal spend)")
                ax.plot(pe, [_pos(a["p90_rel_error"]) for a in eq.values()], "s--",
                        color=colors[1], alpha=0.5, label="SmartNoise p90 (equal spend)")
            ax.set_xscale("log")
            shown = [v for line in ax.get_lines() for v in line.get_ydata() if v == v and v > 0]
            if shown and max(shown) / min(shown) > 10:
                ax.set_yscale("log")
                ax.yaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_formatter(pct)
            ax.tick_params(axis="y", which="both", labelsize=7)
            ax.set_title(f"{qn}\n{w['title']}, {label}", fontsize=9)
            ax.set_xlabel("ε spent by the query")
            ax.set_ylabel("relative error")
            ax.grid(True, which="both", alpha=0.3)
        for ax in panels[len(w["accuracy"]):]:
            ax.axis("off")
        panels[0].legend(fontsize=7)
    fig.suptitle("Relative error vs ε")
    fig.tight_layout()
    return _save(fig, out_dir, f"{name}_error_vs_epsilon.png")


def _latency_plot(timed: dict, out_dir: Path, name: str, plt, colors) -> str:
    """private / plain and private / floor per query and size, one row per workload."""
    import numpy as np

    fig, axes = plt.subplots(len(timed), 2, figsize=(13, 4.2 * len(timed)), squeeze=False)
    for row, w in zip(axes, timed.values(), strict=True):
        qnames = list(w["latency"])
        sizes = list(w["sizes"])
        width = 0.8 / len(sizes)
        x = np.arange(len(qnames))
        for ax, key, title in ((row[0], "private_over_plain", "private / plain"),
                               (row[1], "private_over_floor", "private / floor")):
            for i, size in enumerate(sizes):
                vals = [w["latency"][q].get(size, {}).get(key, np.nan) for q in qnames]
                ax.bar(x + i * width, vals, width, label=w["sizes"][size]["label"],
                       color=colors[i % len(colors)])
            ax.set_xticks(x + width * (len(sizes) - 1) / 2, qnames, rotation=30, ha="right",
                          fontsize=8)
            ax.set_yscale("log")
            ax.axhline(1, color="grey", lw=0.8)
            if key == "private_over_floor":
                ax.axhline(TARGET_FLOOR, color="red", lw=0.8, ls="--",
                           label=f"target {TARGET_FLOOR:g}×")
            ax.set_title(f"{w['title']}: latency ratio {title}")
            ax.grid(True, axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out_dir, f"{name}_latency_ratio.png")


def _stages_plot(timed: dict, out_dir: Path, name: str, plt) -> str:
    """Stage shares at the largest size each query was timed at, every workload."""
    import numpy as np

    labels, shares = [], []
    for w in timed.values():
        for qn, by_size in w["latency"].items():
            last = list(by_size)[-1]
            labels.append(f"{w['title']}: {qn} ({w['sizes'][last]['label']})")
            shares.append(by_size[last]["stage_share"])
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(labels) + 1.5))
    left = np.zeros(len(labels))
    for i, c in enumerate(STAGES):
        vals = np.asarray([s[c] for s in shares])
        ax.barh(labels, vals, left=left, label=c, color=plt.cm.tab10(i % 10))
        left += vals
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the pipeline's time, stage by stage (largest size timed)")
    ax.legend(ncol=5, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    return _save(fig, out_dir, f"{name}_stages.png")


def _pos(x):
    """A value for a log axis: zero or missing becomes a gap."""
    return float("nan") if x is None or x <= 0 else x


def _save(fig, out_dir: Path, fname: str) -> str:
    fig.savefig(out_dir / fname, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return fname
