"""Consistent answers: released values and intervals within what public bounds allow.

The post-processing stage (:mod:`dpsql.postprocess`) reads only noisy statistics and
the plan (catalog bounds, the query): these tests hand it noisy values chosen here, with
no database at all, and pin what it releases. The end-to-end tests force the noise of a
real query negative and check what the analyst sees, and that HAVING and ORDER BY see
the released value.
"""

from __future__ import annotations

import math

import pytest

import dpsql.answer_flow
import dpsql.engine
from dpsql.engine import _demo_plan
from dpsql.noise import NoisyGroups
from dpsql.postprocess import cell_range, cell_values, postprocess, stat_half_width
from dpsql.result import Result, _fmt


def answer(sql, stats, keys=((),), epsilon=1.0, **bounds):
    """Post-processes hand-made noisy statistics (one list of values per statistic)."""
    plan = _demo_plan(sql, epsilon=epsilon, **bounds)
    noisy = NoisyGroups(list(keys), {s.name: list(v) for s, v in zip(plan.stats, stats,
                                                                       strict=True)})
    return plan, postprocess(plan, noisy)


def test_a_count_forced_negative_is_released_as_zero_with_interval_zero_to_w():
    plan, ans = answer("SELECT COUNT(*) AS n FROM pums", [[-5]])
    w = stat_half_width(plan, plan.stats[0].name, 0.05)
    assert ans.rows == [(0,)] and isinstance(ans.rows[0][0], int)
    assert ans.accuracy == [(w,)]
    assert ans.intervals == [((0, w),)]
    assert ans.noisy == (True,)


def test_a_count_inside_its_range_keeps_its_symmetric_interval():
    plan, ans = answer("SELECT COUNT(*) AS n FROM pums", [[100]])
    w = stat_half_width(plan, plan.stats[0].name, 0.05)
    assert ans.rows == [(100,)] and ans.intervals == [((100 - w, 100 + w),)]
    # near zero the interval is cut at 0 but the half-width stays w
    _, ans = answer("SELECT COUNT(*) AS n FROM pums", [[2]])
    assert ans.rows == [(2,)] and ans.accuracy == [(w,)] and ans.intervals == [((0, 2 + w),)]


@pytest.mark.parametrize("count", ["COUNT(DISTINCT pid)", "COUNT(DISTINCT age)",
                                   "COUNT(income)"])
def test_every_kind_of_count_is_not_negative(count):
    plan, ans = answer(f"SELECT {count} AS n FROM pums", [[-40]])
    assert ans.rows == [(0,)] and ans.intervals[0][0][0] == 0


def test_a_sum_of_a_non_negative_column_is_not_negative_and_others_are_left_alone():
    _, ans = answer("SELECT SUM(income) AS s FROM pums", [[-1234.5]])
    assert ans.rows == [(0.0,)] and ans.intervals[0][0][0] == 0
    # age - 50 lies in [-50, 50]: a negative sum can be true, so it is released as is
    _, ans = answer("SELECT SUM(age - 50) AS s FROM pums", [[-1234]])
    assert ans.rows == [(-1234,)] and ans.intervals[0][0][0] < -1234
    # -age lies in [-100, 0]: the sum is not positive
    _, ans = answer("SELECT SUM(-age) AS s FROM pums", [[77]])
    assert ans.rows == [(0,)] and ans.intervals[0][0][1] == 0


def test_avg_and_its_interval_stay_within_the_bounds():
    # an empty group: noisy sum and count near 0; AVG(income) lies in [0, 500000]
    plan, ans = answer("SELECT AVG(income) AS a FROM pums", [[-1e6], [0]])
    (value,), ((low, high),) = ans.rows[0], ans.intervals[0]
    assert (value, low, high) == (0.0, 0.0, 500_000.0) and isinstance(value, float)
    # shown as the interval, never as "± 500,000.00" around 0
    text = _fmt(value, ans.accuracy[0][0], ans.intervals[0][0])
    assert "±" not in text and text.endswith("[0, 500,000]")


def test_variance_and_stddev_are_not_negative_nor_above_what_bounds_allow():
    for agg in ("VAR_POP", "VAR_SAMP", "STDDEV_POP", "STDDEV"):
        # noisy sum of squares below 0: variance 0
        _, ans = answer(f"SELECT {agg}(age) AS v FROM pums", [[-500.0], [10.0], [20]])
        assert ans.rows == [(0.0,)], agg
        assert ans.intervals[0][0][0] >= 0
        # a huge noisy sum of squares over a noisy count just above 1: at most the
        # largest variance of values in [0, 100] (doubled for the sample variance)
        _, ans = answer(f"SELECT {agg}(age) AS v FROM pums", [[1e9], [0.0], [1.01]])
        top = 50.0**2 * (2 if agg in ("VAR_SAMP", "STDDEV") else 1)
        if agg.startswith("STD"):
            top = math.sqrt(top)
        assert ans.rows[0][0] == pytest.approx(top), agg
        assert ans.intervals[0][0][1] <= top + 1e-9


def test_having_and_order_by_see_the_released_value():
    # noisy counts -7 and 3: released 0 and 3; HAVING n >= 0 keeps both, and ORDER BY
    # sorts the released values
    plan = _demo_plan("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex HAVING n >= 0 "
                      "ORDER BY n DESC, sex")
    noisy = NoisyGroups([(0,), (1,)], {plan.stats[0].name: [-7, 3]})
    ans = postprocess(plan, noisy)
    assert ans.rows == [(1, 3), (0, 0)]
    # an expression over a released count: computed on the released value, and its
    # interval by interval arithmetic over the cut one
    plan = _demo_plan("SELECT sex, COUNT(*) - 1 AS m FROM pums GROUP BY sex")
    noisy = NoisyGroups([(0,), (1,)], {plan.stats[0].name: [-7, 3]})
    ans = postprocess(plan, noisy)
    w = stat_half_width(plan, plan.stats[0].name, 0.05)
    assert ans.rows == [(0, -1), (1, 2)]
    assert ans.intervals[0][1] == (-1, w - 1)


def test_consistency_reads_noisy_values_and_public_bounds_only():
    """The same noisy statistics and plan give the same answer: nothing else is read.

    ``cell_values`` and ``cell_range`` take the plan (catalog bounds, the query) and the
    noisy values; the ranges depend on the plan alone.
    """
    plan = _demo_plan("SELECT COUNT(*) AS n, SUM(income) AS s, AVG(age) AS a, "
                      "VAR_POP(age) AS v FROM pums")
    ranges = {c.name: cell_range(plan, c) for c in plan.cells}
    assert list(ranges.values()) == [(0.0, math.inf), (0.0, math.inf), (0, 100),
                                     (0.0, 2500.0)]
    stats = {s.name: [-3 if s.integer else -10.0] for s in plan.stats}
    first = cell_values(plan, NoisyGroups([()], stats))
    again = cell_values(plan, NoisyGroups([()], {k: list(v) for k, v in stats.items()}))
    assert first == again
    for cell in plan.cells:
        low, high = ranges[cell.name]
        assert all(low <= v <= high for v in first[cell.name])


def test_end_to_end_a_count_forced_negative(connect, monkeypatch):
    """Through a real query: the noise of every count forced to -10⁶."""
    real = dpsql.answer_flow.add_noise

    def negative(plan, columns, rows):
        noisy = real(plan, columns, rows)
        for s in plan.stats:
            if s.kind == "count":
                noisy.stats[s.name] = [v - 10**6 for v in noisy.stats[s.name]]
        return noisy

    monkeypatch.setattr(dpsql.answer_flow, "add_noise", negative)
    conn = connect()
    res = conn.execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex HAVING n >= 0",
                       epsilon=1.0)
    w = res.accuracy[0][1]
    assert res.rows == [(0, 0), (1, 0)]
    assert res.intervals == [(None, (0, w)), (None, (0, w))]
    assert f"0 [0, {w}]" in str(res)
    assert list(res.df["n"]) == [0, 0] and list(res.df["n_error"]) == [w, w]


# -- display rounding -------------------------------------------------------------------


@pytest.mark.parametrize(("value", "width", "interval", "shown"), [
    (49391.026369168365, 6834.9, None, "49,400 ± 6,900"),
    (486, 6, None, "486 ± 6"),
    (12345, 678, None, "12,350 ± 680"),  # half away from zero
    (12335, 678, None, "12,340 ± 680"),
    (0.123456, 0.0123, None, "0.123 ± 0.013"),
    (1.5, 0.25, None, "1.50 ± 0.25"),
    (3.14159, 9.95, None, "3 ± 10"),
    (0, 6, (0, 6), "0 [0, 6]"),
    (2, 6, (0, 8), "2 [0, 8]"),
    (100, 6, (94, 106), "100 ± 6"),
    (0.0, 500000.0, (0.0, 500000.0), "0 [0, 500,000]"),
    (-1885440.7, 2996416.2, None, "-1,900,000 ± 3,000,000"),
    (5.0, math.inf, None, "5.00 ± inf"),
    (5.0, 0.0, None, "5.00 ± 0.00"),
    (None, None, None, "NULL"),
    ("a", None, None, "a"),
    (7, None, None, "7"),
])
def test_values_are_shown_rounded_to_their_error_bars(value, width, interval, shown):
    assert _fmt(value, width, interval) == shown


def test_rows_keep_full_precision_while_the_display_rounds():
    res = Result(["k", "x"], [(1, 49391.026369168365)], [(None, 6834.9)], (1.0, 0.0), "")
    assert res.rows[0][1] == 49391.026369168365
    assert res.df["x"][0] == 49391.026369168365 and res.df["x_error"][0] == 6834.9
    assert "49,400 ± 6,900" in str(res) and "49,400 ± 6,900" in res._repr_html_()


def test_a_decimal_output_keeps_its_error_bar():
    # DuckDB answers BIGINT * 1.5 with a DECIMAL: it still gets its half-width
    plan, ans = answer("SELECT COUNT(*) * 1.5 AS x FROM pums", [[100]])
    w = stat_half_width(plan, plan.stats[0].name, 0.05)
    (value,), (width,), ((low, high),) = ans.rows[0], ans.accuracy[0], ans.intervals[0]
    assert float(value) == 150 and width == pytest.approx(1.5 * w)
    assert (low, high) == pytest.approx((1.5 * (100 - w), 1.5 * (100 + w)))
    assert _fmt(value, width, (low, high)).startswith("150")


def test_min_quantiles_and_max_of_one_column_come_out_ordered():
    # one noisy histogram of age: 5 in every bin (below MIN/MAX's noise level, so they
    # ignore them) and 100 in the bin of ages 60-61. Read cell by cell, the p90 (87.5)
    # lands above the MAX (61); rearranged, MIN <= MEDIAN <= p90 <= MAX
    sql = ("SELECT MIN(age) AS lo, MEDIAN(age) AS med, QUANTILE_CONT(age, 0.9) AS p90, "
           "MAX(age) AS hi FROM pums")
    plan = _demo_plan(sql)
    counts = [5] * plan.stats[0].bins.count
    counts[30] = 100
    _, ans = answer(sql, [[counts]])
    assert ans.rows == [(60.0, 60.0, 61.0, 88.0)]  # MAX of whole ages stays whole
    for value, (low, high) in zip(ans.rows[0], ans.intervals[0], strict=True):
        assert low <= value <= high  # each interval holds its (moved) value
    # the order of the select list does not matter, only each cell's quantile
    _, ans = answer("SELECT MAX(age) AS hi, QUANTILE_CONT(age, 0.9) AS p90, MIN(age) AS lo "
                    "FROM pums", [[counts]])
    assert ans.rows == [(88.0, 61.0, 60.0)]


def test_quantiles_of_different_columns_are_not_reordered_against_each_other():
    plan = _demo_plan("SELECT MIN(income) AS a, MAX(age) AS b FROM pums")
    hist = {s.name: [[0] * s.bins.count] for s in plan.stats}
    income, age = plan.stats
    hist[income.name][0][-1] = 1000  # everybody at the top income
    hist[age.name][0][0] = 1000      # everybody at age 0-1
    ans = postprocess(plan, NoisyGroups([()], {k: v for k, v in hist.items()}))
    assert ans.rows[0][0] > ans.rows[0][1]
