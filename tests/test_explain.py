"""``explain`` and partition-selection reporting.

* explain and execute agree: same budget split, same threshold (both run one analysis;
  these tests fail if either starts computing its own);
* exact values pinned for a few queries (thresholds in users, noise scales, half-widths);
* an answer's partition-selection note tells how many keys cleared and the threshold, and
  nothing else about the keys that did not clear (neighbouring databases that differ only
  in keys below the threshold get identical notes);
* the predicted ± of AVG, VARIANCE and STDDEV bound the error of dpsql's own
  post-processing for adversarial noise within the noise's half-widths, and the ± of
  counts and sums is the one every answer shows.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.accuracy import _avg_bound, _rank_error, _var_bound
from dpsql.engine import _demo_plan
from dpsql.mechanisms import DiscreteLaplace
from dpsql.mechanisms.partition import LaplaceThreshold
from dpsql.mechanisms.quantile import Bins, edge_errors, interval
from dpsql.postprocess import _avg, _variance

CATALOG = {"dataset": "visits", "tables": {"visits": {
    "user_key": "uid", "max_groups": 1, "max_rows": 1, "columns": {
        "uid": {"type": "int"},
        "city": {"type": "string"},
        "region": {"type": "int", "values": [0, 1]},
        "amount": {"type": "float", "lower": 0, "upper": 100}}}}}

GROUP_SQL = "SELECT city, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY city"


def _database(path, cities: dict[str, int]):
    """One row per user; ``cities`` maps a city to its number of users."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE visits (uid INTEGER, city VARCHAR, region INTEGER, "
                "amount DOUBLE)")
    rows, uid = [], 0
    for city, users in cities.items():
        for _ in range(users):
            rows.append((uid, city, uid % 2, float(uid % 101)))
            uid += 1
    con.executemany("INSERT INTO visits VALUES (?, ?, ?, ?)", rows)
    con.close()
    return path


@pytest.fixture(scope="module")
def visits_file(tmp_path_factory):
    """Three big cities (300 users each) and forty cities of one user (made once: dpsql
    only reads it)."""
    cities = {f"big{i}": 300 for i in range(3)} | {f"tiny{i}": 1 for i in range(40)}
    return _database(tmp_path_factory.mktemp("explain") / "visits.duckdb", cities)


@pytest.fixture
def visits(visits_file):
    """A fresh connection to :func:`visits_file`, its ledger in memory."""
    conn = dpsql.connect(visits_file, catalog=CATALOG, budget=(1e6, 0.5), ledger=":memory:")
    yield conn
    conn.close()


def _threshold(note: str) -> int:
    return int(re.search(r"reaches ([\d,]+)", note).group(1).replace(",", ""))


def _released(note: str) -> int:
    found = re.search(r"partition selection: ([\d,]+) group key", note)
    return int(found.group(1).replace(",", "")) if found else 0


SPLIT_KEYS = ("name", "statistic", "linf", "l1", "epsilon", "rho", "mechanism", "scale",
              "half_width", "feeds")


@pytest.mark.parametrize("sql, kwargs", [
    (GROUP_SQL, {"epsilon": 6.0, "delta": 1e-6}),
    (GROUP_SQL, {"epsilon": 6.0, "delta": 1e-6, "mechanism": "gaussian", "alpha": 0.1}),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 9, delta = 1e-7, "
     "max_groups_contributed = 2) city, SUM(amount) AS s FROM visits GROUP BY city", {}),
    ("SELECT region, COUNT(*) AS n, VARIANCE(amount) AS v FROM visits GROUP BY region",
     {"epsilon": 1.0}),
])
def test_explain_and_execute_agree(visits, sql, kwargs):
    """Same split of the budget, same threshold; explain spends nothing."""
    ex = visits.explain(sql, **kwargs)
    assert visits.budget.spent == (0.0, 0.0)
    res = visits.execute(sql, **kwargs)
    assert res.cost == ex.cost
    assert ([[s[k] for k in SPLIT_KEYS] for s in res.split]
            == [[s[k] for k in SPLIT_KEYS] for s in ex.statistics])
    ps = ex.partition_selection
    notes = [n for n in res.notes if n.startswith("partition selection")]
    if ps is None:
        assert notes == []
        return
    assert len(notes) == 1 and _threshold(notes[0]) == ps["threshold"]
    assert _released(notes[0]) == len(res.rows) == 3  # the three big cities
    assert f"reaches {ps['threshold']:,}" in str(ex)


def test_pinned_values(visits):
    """Exact values, so that a change in the split, the threshold or the noise shows."""
    ex = visits.explain(GROUP_SQL, epsilon=0.5, delta=1e-6)
    # three shares of ε/3: COUNT(*), the centred SUM for AVG, the selection
    assert [(s["statistic"], s["linf"], s["scale"], s["half_width"]) for s in ex.statistics] \
        == [("COUNT(*)", 1, 6.0, 18), ("SUM(amount - 50)", 50, 300.375, 899.84375),
            ("COUNT(DISTINCT <user>)", 1, 6.0, 18)]
    ps = ex.partition_selection
    assert (ps["threshold"], ps["likely"], ps["keys"]) == (81, 95, ["city"])
    assert ps["scale"] == 6.0 and ps["delta"] == 1e-6
    assert math.isclose(ps["at_threshold"], 1 / (1 + math.exp(-1 / 6)))
    assert math.isclose(ps["single_user"], math.exp(-80 / 6) / (1 + math.exp(-1 / 6)))
    n, a = (o for o in ex.outputs if o["role"] == "noisy")
    assert n["half_width"] == 18.0 and n["by_size"] is None
    # AVG at level α/2 each: h_S = 1108.09375, h_N = 22, r = 50: (h_S + 50·22)/(n − 22)
    assert a["by_size"] == {size: (1108.09375 + 50 * 22) / (size - 22)
                            for size in (100, 1_000, 10_000)}
    assert a["by_size"][1_000] == pytest.approx(2.2577645705)
    assert a["worst_case"] == 100
    assert "±18 in every group" in str(ex)

    # a public domain: no selection, no δ, every value shown
    pub = visits.explain("SELECT region, COUNT(*) AS n FROM visits GROUP BY region",
                         epsilon=0.5)
    assert pub.partition_selection is None and pub.cost == (0.5, 0.0)
    assert pub.outputs[0]["domain_size"] == 2 and pub.outputs[1]["half_width"] == 6.0
    assert "exact; public domain of 2 values" in str(pub)


@pytest.mark.parametrize("epsilon, delta, max_groups, threshold", [
    (1.0, 1e-6, 1, 15), (0.25, 1e-6, 1, 54), (1 / 3, 1e-6, 2, 85), (10.0, 1e-12, 1, 4),
    (0.5, 1e-5, 3, 73),
])
def test_threshold_is_the_smallest_that_meets_delta(epsilon, delta, max_groups, threshold):
    """Pinned thresholds, checked against the exact tail and against OpenDP.

    A key held only by the differing user is released iff ``1 + Z >= τ``; with ``G`` such
    keys that is at most ``G·q^(τ−1)/(1+q)``, which must be <= δ at τ and > δ at τ − 1.
    OpenDP 0.16 reports a δ at most ours for the same threshold (its map leaves out the
    mass at the threshold itself, opendp/opendp#2922), so it must accept τ too.
    """
    sel = LaplaceThreshold(epsilon, delta, max_groups)
    assert sel.threshold == threshold
    q = math.exp(-sel.noise.s / sel.noise.t)
    assert max_groups * q ** (threshold - 1) / (1 + q) <= delta
    assert max_groups * q ** (threshold - 2) / (1 + q) > delta
    assert math.isclose(sel.release_probability(1), q ** (threshold - 1) / (1 + q))
    p = 1 - 0.05
    likely = sel.users_needed(p)
    assert sel.release_probability(likely) >= p > sel.release_probability(likely - 1)
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    meas = dp.m.make_laplace_threshold(
        dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int)),
        dp.l01inf_distance(dp.absolute_distance(T=int)),
        scale=sel.noise.scale, threshold=threshold)
    eps, opendp_delta = meas.map((max_groups, max_groups, 1))
    assert math.isclose(eps, epsilon, rel_tol=1e-6) and opendp_delta <= delta


def test_zero_keys_explain_themselves(tmp_path):
    """GROUP BY at a small ε over small groups: no row, and a note that says why."""
    path = _database(tmp_path / "small.duckdb", {f"c{i}": 10 + i for i in range(5)})
    conn = dpsql.connect(path, catalog=CATALOG, budget=(10.0, 1e-5), ledger=":memory:")
    sql = "SELECT city, COUNT(*) FROM visits GROUP BY city"
    ex = conn.explain(sql, epsilon=0.5, delta=1e-6)
    res = conn.execute(sql, epsilon=0.5, delta=1e-6)
    assert res.rows == [] and res.cost == (0.5, 1e-6)   # charged: selection is paid for
    note = res.notes[0]
    assert note.startswith("partition selection: no group key of city cleared")
    assert _threshold(note) == ex.partition_selection["threshold"] == 54
    for words in ("raise epsilon", "raise delta", "public domain of city", "explain"):
        assert words in note
    assert "max_groups" not in note  # G = 1: lowering it is no advice
    conn.close()


def test_notes_say_nothing_about_keys_below_the_threshold(tmp_path):
    """Neighbours that differ only in keys below the threshold get the same notes.

    At ε = 20 the selection's noise has scale 0.1: the big cities always clear, the
    single-user ones never do (probability ~1e-13), so the two answers release the same
    keys. A note that counted the keys found in the data, or said anything else about
    the ones left out, would differ.
    """
    big = {f"big{i}": 50 for i in range(3)}
    small = {f"tiny{i}": 1 for i in range(25)} | {"pair": 2}
    notes, explained = [], []
    for name, cities in (("d", big), ("d2", big | small)):
        path = _database(tmp_path / f"{name}.duckdb", cities)
        conn = dpsql.connect(path, catalog=CATALOG, budget=(100.0, 1e-5),
                             ledger=":memory:")
        sql = "SELECT city, COUNT(*) AS n FROM visits GROUP BY city"
        res = conn.execute(sql, epsilon=20.0, delta=1e-12)
        assert sorted(r[0] for r in res.rows) == ["big0", "big1", "big2"]
        notes.append(res.notes)
        text = str(conn.explain(sql, epsilon=20.0, delta=1e-12))
        # the rewritten SQL carries a fresh random seed for the L0 step's order
        explained.append(text[:text.index("Rewritten SQL")])
        conn.close()
    assert notes[0] == notes[1]
    assert explained[0] == explained[1]
    assert _released(notes[0][0]) == 3 and "not revealed" in notes[0][0]


def test_explain_speaks_the_analysts_names(visits):
    ex = visits.explain("SELECT city, AVG(amount) * 2 AS twice, AVG(amount) AS a, "
                        "MEDIAN(amount) AS med, "
                        "COUNT(*) / SUM(amount) AS ratio FROM visits GROUP BY city",
                        epsilon=1.0, delta=1e-6)
    text = str(ex)
    columns = text[:text.index("Noisy statistics")]
    assert "__" not in columns and "L∞" not in columns
    assert "AVG(amount) * 2" in columns and "SUM(amount - 50), COUNT(*)" in columns
    by_name = {o["column"]: o for o in ex.outputs}
    assert by_name["city"]["role"] == "key" and by_name["city"]["domain_size"] is None
    assert by_name["twice"]["by_size"] == {n: 2 * w for n, w in by_name["a"]["by_size"].items()}
    assert by_name["med"]["rank_error"] > 0 and "percentile points" in by_name["med"]["meaning"]
    assert by_name["ratio"]["half_width"] is None and by_name["ratio"]["by_size"] is None
    assert "depends on the values" in text
    # the technical values stay available, under plain headers
    assert "one user moves it by <=" in text and "SQL column" in text
    assert {"linf", "l1", "scale", "name"} <= set(ex.statistics[0])


def test_fixed_half_widths_are_what_answers_show(visits):
    """A count's and a sum's predicted ± is the ± of every answer (public keys here)."""
    sql = ("SELECT region, COUNT(*) AS n, SUM(amount) AS s, COUNT(*) + 1 AS n1 "
           "FROM visits GROUP BY region")
    ex = visits.explain(sql, epsilon=1.0, alpha=0.1)
    res = visits.execute(sql, epsilon=1.0, alpha=0.1)
    predicted = [o["half_width"] for o in ex.outputs]
    for acc in res.accuracy:
        assert [None if a is None else float(a) for a in acc] == [None, *predicted[1:]]


AVG_PLAN = _demo_plan("SELECT AVG(income) AS a, VAR_POP(age) AS vp, VARIANCE(age) AS vs, "
                      "STDDEV(age) AS sd FROM pums", 1.0, 0.0)


@pytest.mark.parametrize("n", [50, 100, 1_000, 10_000])
def test_avg_and_variance_bounds_hold_for_adversarial_noise(n):
    """The predicted bound covers post-processing's answer for any noise in the event.

    The data are extreme configurations within the bounds (all at L, all at U, half at
    each, all at the centre); the noise is each statistic at −h, 0 or +h (and the bound's
    worst corners). ``_avg`` and ``_variance`` are the functions that make the answer,
    so a change there that the prediction does not follow fails here.
    """
    plan = AVG_PLAN
    by_cell = {c.name: c for c in plan.cells}
    for out in plan.outputs:
        cell = by_cell[out.cells[0]]
        level = 0.05 / len(cell.stats)
        h = [float(plan.stat(s).mechanism.accuracy(level)) for s in cell.stats]
        low, high, m = cell.lower, cell.upper, cell.center
        configs = [[low] * n, [high] * n, [low] * (n // 2) + [high] * (n - n // 2), [m] * n,
                   [low] + [high] * (n - 1)]
        for values in configs:
            centred = [x - m for x in values]
            if cell.kind == "avg":
                s, count = sum(centred), n
                bound = min(_avg_bound(h[0], h[1], max(m - low, high - m), n), high - low)
                truth = sum(values) / n
                for es, en in itertools.product(*([-x, 0.0, x] for x in h)):
                    assert abs(_avg(cell, s + es, count + en) - truth) <= bound + 1e-9
                continue
            q, s = sum(c * c for c in centred), sum(centred)
            r = max(m - low, high - m)
            var = _var_bound(cell.kind.replace("std", "var"), *h, r, n)
            bound = math.sqrt(var) if cell.kind.startswith("std") else var
            truth = float(np.var(values, ddof=1 if cell.kind.endswith("samp") else 0))
            truth = math.sqrt(truth) if cell.kind.startswith("std") else truth
            for eq, es, en in itertools.product(*([-x, 0.0, x] for x in h)):
                released = _variance(cell, q + eq, s + es, n + en)
                assert abs(released - truth) <= bound + 1e-9, (cell.kind, n, values[:2])


def test_quantile_rank_statement_holds():
    """On the 1 − α event, every bin edge inside the ± interval has a true rank within 2W.

    That is what explain states for quantiles (the interval lies between the true
    ``q ± 2W/n`` quantiles, widened by one bin); checked on random data and real noise,
    whenever the noise falls in the event the statement assumes.
    """
    rng = np.random.default_rng(7)
    bins = Bins.for_interval(0, 127, integer=True)
    mech = DiscreteLaplace(3.0)
    edges = bins.edges
    checked = 0
    for trial in range(150):
        q = (0.5, 0.1, 0.9, 0.0, 1.0)[trial % 5]
        n = int(rng.integers(200, 3000))
        values = np.round(np.clip(rng.normal(rng.uniform(10, 110), rng.uniform(1, 30), n),
                                  0, 127))
        counts = np.histogram(values, bins=edges)[0]
        noisy = np.asarray(counts) + np.asarray(mech.release([0] * bins.count))
        w = edge_errors(mech, q, bins.count, 0.05 / (bins.count + 1))
        true_d = np.concatenate(([0], np.cumsum(counts))) - q * n
        noisy_d = np.concatenate(([0], np.cumsum(noisy))) - q * noisy.sum()
        if np.any(np.abs(noisy_d - true_d) > w):
            continue  # outside the event: no promise
        checked += 1
        low, high = interval(noisy, q, bins, mech, 0.05)
        inside = (edges > low) & (edges < high)
        assert np.all(np.abs(true_d[inside]) <= 2 * w.max() + 1e-9), (trial, q)
    assert checked > 100
    plan = _demo_plan("SELECT MEDIAN(age) FROM pums", 1.0, 0.0)
    stat = plan.stat(plan.cells[0].stats[0])
    assert _rank_error(plan, plan.cells[0], 0.05) == 2 * float(np.max(edge_errors(
        stat.mechanism, 0.5, stat.bins.count, 0.05 / (stat.bins.count + 1))))


def test_cli_explain_shows_threshold_and_columns(tmp_path):
    from click.testing import CliRunner

    from dpsql.cli import main

    path = _database(tmp_path / "cli.duckdb", {"a": 5})
    cat = tmp_path / "visits.yaml"
    import yaml

    cat.write_text(yaml.safe_dump(CATALOG))
    out = CliRunner().invoke(main, ["explain", GROUP_SQL, "-d", str(path), "-c", str(cat),
                                    "-e", "0.5", "--delta", "1e-6"])
    assert out.exit_code == 0, out.output
    assert "Partition selection: a key needs a noisy user count >= 81" in out.output
    assert "Output columns" in out.output and "±18 in every group" in out.output


def test_the_stated_threshold_is_the_one_applied(tmp_path):
    """Keys with exactly τ users are released and keys with τ − 1 are not, τ from explain.

    The selection's noise has scale 1/40 here (q = e^-40): release is decided by the
    threshold alone, so a threshold that explain or the note stated differently from the
    one the selection applies fails here, whichever of them moved.
    """
    path = tmp_path / "probe.duckdb"
    sql = "SELECT city, COUNT(*) AS n FROM visits GROUP BY city"
    probe = _database(path, {"x": 1})
    conn = dpsql.connect(probe, catalog=CATALOG, budget=(1e3, 0.5), ledger=":memory:")
    tau = conn.explain(sql, epsilon=80.0, delta=1e-100).partition_selection["threshold"]
    conn.close()
    assert tau == 7
    path.unlink()
    cities = {f"at{i}": tau for i in range(3)} | {f"below{i}": tau - 1 for i in range(3)}
    conn = dpsql.connect(_database(path, cities), catalog=CATALOG, budget=(1e3, 0.5),
                         ledger=":memory:")
    res = conn.execute(sql, epsilon=80.0, delta=1e-100)
    assert sorted(r[0] for r in res.rows) == ["at0", "at1", "at2"]
    assert _threshold(res.notes[0]) == tau and _released(res.notes[0]) == 3
    conn.close()


def test_explanation_escapes_what_it_shows(visits):
    """Every new part of the rendering escapes (dpsql refuses control characters in
    names and literals already; this guards the rendering on its own)."""
    evil = "a\x1b[2J\nb\u202ec"
    ex = visits.explain(GROUP_SQL, epsilon=1.0, delta=1e-6)
    outputs = [dict(o, column=o["column"] + evil, expression=evil, meaning=evil,
                    statistics=[evil]) for o in ex.outputs]
    selection = dict(ex.partition_selection, keys=[evil])
    statistics = [dict(s, feeds=[evil]) for s in ex.statistics]
    bad = dataclasses.replace(ex, outputs=outputs, partition_selection=selection,
                              statistics=statistics)
    for text in (str(bad), bad._repr_html_()):
        assert "\x1b" not in text and "\u202e" not in text and "a\nb" not in text
    assert "a\\x1b[2J\\nb" in str(bad)


def test_explain_shows_the_sql_and_mechanism_that_run(tmp_path):
    """``SUM(x)`` over a HUGEINT column: the analysis plans an integer sum, DuckDB does
    not type the sum as an exact integer, and execute()'s checks turn it into a grid sum
    and write the SQL again (dpsql.answering.settle_grids). explain() runs the same
    checks, so it shows the grid mechanism and the grid-unit SQL that execute() runs,
    not the integer plan (it showed discrete Laplace)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (pid INTEGER, x HUGEINT)")
    con.execute("INSERT INTO t VALUES (1, 4), (2, 7)")
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 4, "columns": {
        "pid": {"type": "int"}, "x": {"type": "int", "lower": 0, "upper": 10}}}}}
    with dpsql.connect(con, catalog=catalog, budget=(10, 0.5),
                       ledger=str(tmp_path / "l.db")) as conn:
        shown = conn.explain("SELECT SUM(x) FROM t", epsilon=1.0)
        ran = conn.execute("SELECT SUM(x) FROM t", epsilon=1.0)
    assert shown.statistics[0]["mechanism"] == "grid Laplace", shown.statistics
    assert "SUM(LEAST(GREATEST(TRY_CAST(" in shown.sql, shown.sql  # fine grid units
    assert len(ran.rows) == 1
