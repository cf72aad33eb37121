"""DP quantiles: bins, the estimate, its error bar, and the engine end to end."""

from __future__ import annotations

import dataclasses

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.datasets import load_pums, pums_catalog
from dpsql.mechanisms import DiscreteLaplace, laplace
from dpsql.mechanisms.gaussian import DiscreteGaussian, gaussian
from dpsql.mechanisms.quantile import MAX_BINS, Bins, edge_errors, estimate, interval


def test_integer_bins_hold_whole_values():
    bins = Bins.for_interval(0, 100, integer=True)
    assert (bins.count, bins.step) == (51, 2)
    assert bins.edges[0] == -0.5 and bins.edges[-1] == 101.5
    small = Bins.for_interval(1, 6, integer=True)
    assert (small.count, small.step) == (6, 1)
    assert Bins.for_interval(5, 5, integer=True).count == 1


def test_float_bins_cover_the_range_exactly():
    bins = Bins.for_interval(0.0, 500000.0, integer=False)
    assert bins.count == MAX_BINS
    assert bins.edges[0] == 0.0 and bins.edges[-1] == 500000.0
    assert np.all(np.diff(bins.edges) > 0)
    assert Bins.for_interval(-1e308, 1e308, integer=False).edges[-1] == 1e308  # no overflow


@pytest.mark.parametrize("q", [0.1, 0.25, 0.5, 0.9])
def test_exact_histogram_estimate_is_within_one_bin_of_the_true_quantile(q):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 101, 5000)
    bins = Bins.for_interval(0, 100, integer=True)
    counts = np.histogram(data, bins=bins.edges)[0]
    truth = float(np.quantile(data, q))
    assert abs(estimate(counts, q, bins) - truth) <= bins.step


def test_min_and_max_ignore_bins_below_the_noise_level():
    bins = Bins.for_interval(0, 63, integer=True)
    counts = [3, -2, 0, 0, 0, 0, 0, 0, 0, 0, 500, 400] + [0] * 50 + [2, 1]
    assert estimate(counts, 0.0, bins, threshold=10) == 10
    assert estimate(counts, 1.0, bins, threshold=10) == 11
    assert estimate(counts, 0.0, bins, threshold=0) == 0


def test_an_empty_noisy_histogram_answers_the_middle():
    bins = Bins.for_interval(0.0, 10.0, integer=False)
    assert estimate([-1.0] * bins.count, 0.5, bins) == 5.0


def _coverage(mechanism, q, shrink=1.0, trials=2000, alpha=0.05):
    """Share of noisy draws whose interval holds the true quantile of fixed data."""
    rng = np.random.default_rng(7)
    bins = Bins.for_interval(0, 99, integer=True)  # 50 bins of 2
    data = np.clip(rng.normal(50, 12, 400).round(), 0, 99)
    counts = np.histogram(data, bins=bins.edges)[0]
    truth = float(np.quantile(data, q))
    noise = mechanism.sample(trials * bins.count).reshape(trials, bins.count)
    hits = 0
    for row in noise:
        if shrink == 1.0:
            low, high = interval(counts + row, q, bins, mechanism, alpha)
        else:  # a broken error bar: the per-edge errors scaled down
            c = counts + row
            prefix = np.concatenate(([0.0], np.cumsum(c)))
            d = prefix - q * prefix[-1]
            w = shrink * edge_errors(mechanism, q, bins.count, alpha / (bins.count + 1))
            below, above = np.nonzero(d + w < 0)[0], np.nonzero(d - w > 0)[0]
            low = bins.edges[below[-1]] if below.size else 0
            high = bins.edges[above[0]] if above.size else 99
        hits += low <= truth <= high
    return hits / trials


@pytest.mark.slow  # statistical
@pytest.mark.parametrize("q", [0.0, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("mechanism", [DiscreteLaplace(8.0), DiscreteGaussian(8.0)],
                         ids=["laplace", "gaussian"])
def test_error_bar_covers_the_true_quantile(mechanism, q):
    assert _coverage(mechanism, q) >= 0.95


@pytest.mark.slow  # statistical
def test_a_too_narrow_error_bar_is_caught():
    """Per-edge errors a tenth of the derived ones: coverage falls well below 95%."""
    assert _coverage(DiscreteLaplace(8.0), 0.5, shrink=0.1) < 0.9


def test_edge_errors_pinned():
    # Gaussian: sqrt(2 σ² Σa² ln(2/α)); Laplace: the Chernoff bound, a little above the
    # Gaussian proxy of the same variance for few coordinates
    w = edge_errors(DiscreteGaussian(1.0), 0.5, 2, 0.1)
    assert w.tolist() == pytest.approx([np.sqrt(2 * 0.5 * np.log(20))] * 3)
    w = edge_errors(DiscreteGaussian(1.0), 0.0, 2, 0.1)  # weights 1 below k, 0 above
    one = DiscreteGaussian(1.0).accuracy(0.1)  # one draw: its exact tail is tighter
    assert w.tolist() == pytest.approx([0.0, one, np.sqrt(4 * np.log(20))])
    w = edge_errors(DiscreteLaplace(1.0), 0.0, 1, 0.1)  # one coordinate: |Z| tail
    assert w.tolist() == [0.0, DiscreteLaplace(1.0).accuracy(0.1)]
    many = edge_errors(DiscreteLaplace(1.0), 0.5, 60, 0.1)  # Chernoff beats the union
    assert many[30] < 0.5 * 60 * DiscreteLaplace(1.0).accuracy(0.1 / 60)
    assert many[30] > np.sqrt(60 * 2 * 0.25)  # but not below one standard deviation


def test_histogram_noise_is_calibrated_to_its_bins():
    """Rounding to the grid moves each of the ``width`` bins by up to one unit."""
    m = laplace(linf=3, max_groups=2, epsilon=1.0, integer=False, width=51)
    assert m.privacy_map(3, 2) == pytest.approx(1.0)
    scalar = laplace(linf=3, max_groups=2, epsilon=1.0, integer=False)
    assert m.units.scale > scalar.units.scale  # the extra 50 units per group
    assert m.units.scale == pytest.approx(2 * (np.floor(3 / m.grid) + 51))
    g = gaussian(linf=3, max_groups=2, rho=0.5, integer=False, width=51)
    assert g.privacy_map(3, 2) == pytest.approx(0.5)
    steps = np.floor(3 / g.grid)
    assert g.units.scale == pytest.approx(np.sqrt(2 * ((steps + 1) ** 2 + 50) / (2 * 0.5)))


@pytest.fixture(scope="module")
def pums():
    con = duckdb.connect()
    load_pums(con)
    yield con
    con.close()


def _conn(con):
    catalog = dataclasses.replace(pums_catalog(), budget=(1e9, 0.5))
    return dpsql.connect(con, catalog=catalog, ledger=":memory:")


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_quantiles_at_high_epsilon_match_the_plain_query(pums, mechanism):
    sql = ("SELECT sex, MEDIAN(age) AS med, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age) "
           "AS p90, MIN(age) AS lo, MAX(age) AS hi FROM {t} GROUP BY sex ORDER BY sex")
    conn = _conn(pums)
    for table in ("pums", "pums_dup"):  # one row per user; up to 4 (identical) rows
        res = conn.execute(sql.format(t=table), epsilon=1e5, delta=1e-6,
                           mechanism=mechanism, max_rows=4)
        plain = pums.execute(sql.format(t=table)).fetchall()
        assert len(res.rows) == len(plain) == 2
        for got, want in zip(res.rows, plain, strict=True):
            assert got[0] == want[0]
            for g, w in zip(got[1:], want[1:], strict=True):
                assert abs(g - w) <= 2, (table, got, want)  # one bin of 2 years


def test_quantiles_share_one_histogram_and_cost_one_statistic(pums):
    conn = _conn(pums)
    plan = conn.explain("SELECT MIN(income), MEDIAN(income), MAX(income) FROM pums",
                        epsilon=1.0)
    assert len(plan.statistics) == 1
    assert plan.statistics[0]["statistic"].startswith("HISTOGRAM(income, 64 bins")
    assert plan.statistics[0]["epsilon"] == 1.0


@pytest.mark.slow  # statistical
def test_engine_error_bars_cover_the_median(pums):
    conn = _conn(pums)
    truth = pums.execute("SELECT MEDIAN(age) FROM pums").fetchone()[0]
    hits = 0
    for _ in range(60):
        res = conn.execute("SELECT MEDIAN(age) FROM pums", epsilon=0.5)
        value, half = res.rows[0][0], res.accuracy[0][0]
        hits += value - half - 1 <= truth <= value + half + 1  # within the bin
    assert hits >= 55


def test_a_derived_per_user_maximum(pums):
    conn = _conn(pums)
    sql = "SELECT AVG(m) FROM (SELECT pid, MAX(age) AS m FROM pums_dup GROUP BY pid) t"
    res = conn.execute(sql, epsilon=1e5)
    assert res.rows[0][0] == pytest.approx(pums.execute(sql).fetchone()[0], abs=0.5)


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT QUANTILE_CONT(age, 1.5) FROM pums", "between 0 and 1"),
    ("SELECT QUANTILE_CONT(age, age) FROM pums", "number literal"),
    ("SELECT MAX(pid) FROM pums", "no lower/upper bounds"),
    ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY age, sex) FROM pums", "one ORDER BY"),
    ("SELECT MEDIAN(DISTINCT age) FROM pums", "DISTINCT"),
])
def test_bad_quantiles_are_refused_for_free(pums, sql, message):
    conn = _conn(pums)
    with pytest.raises(dpsql.DpsqlError, match=message):
        conn.execute(sql, epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
