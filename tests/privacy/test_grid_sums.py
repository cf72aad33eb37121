"""One added user moves each gridded release by at most the grid units its map counts.

Property (noise switched off): for random data, stored in random orders, and one more
user whose rows land anywhere, every real statistic DuckDB computes (a sum, AVG's centred
sum, VARIANCE's squares, a quantile's histogram) is released on D and D′ as multiples of
its grid ``g = 2^k``, and in each group the two releases differ by at most
``floor(L∞ / g) + width`` units, the count the grid mechanisms' privacy maps charge for
(:class:`~dpsql.mechanisms.laplace.GridLaplace`, :class:`~dpsql.mechanisms.gaussian.
GridGaussian`); over groups, by at most ``max_groups`` times that. The values are
multiples of ``0.9999999999999999`` and the budget small, so the grid is about the size
of one user's partial and a floating-point sum's rounding crosses a grid line often
(``tests/privacy/test_float_sums.py`` is one such case, found by hand). With the grid
units summed exactly (:mod:`dpsql.grid_units`) no case can move further.
"""

from __future__ import annotations

import math
import os

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.grid_units import fine_exponent, fine_limit
from dpsql.mechanisms.gaussian import DiscreteGaussian
from dpsql.mechanisms.laplace import DiscreteLaplace, Grid
from dpsql.noise import add_noise
from tests.privacy.oracle import fixed_seed
from tests.support import checked, prepare

C = "0.9999999999999999"
CATALOG = {"tables": {"t": {"user_key": "pid", "max_rows": 2, "max_groups": 1, "columns": {
    "pid": {"type": "int"},
    "g": {"type": "int", "values": [0, 1]},
    "x": {"type": "float", "lower": 0, "upper": 2}}}}}
QUERIES = (
    f"SELECT g, SUM(x * {C}) FROM t GROUP BY g",
    f"SELECT g, AVG(x * {C}) FROM t GROUP BY g",
    f"SELECT VARIANCE(x * {C}) FROM t",
    "SELECT MEDIAN(x) FROM t",
)
#: Multiples of a half: the exact sums are odd multiples of half a grid step times C (just
#: below a rounding line) where a double sum that lost the C lands on the line itself.
VALUES = (0.5, 1.0, 1.5, 2.0, 2.0, 1.7)

rows_of_user = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(VALUES)),
                        min_size=1, max_size=3)


def _zero(self, n):
    return np.zeros(n, dtype=np.int64)


def _zero_draws(self, n):
    return [0] * n


def _released(rows, sql, epsilon, mechanism):
    """``{statistic: (its grid mechanism, L∞, {group: released values})}`` with the
    noise off, as :meth:`dpsql.Connection.execute` releases them."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (pid INTEGER, g INTEGER, x DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    with dpsql.connect(con, catalog=CATALOG, budget=(100, 0.5), ledger=":memory:") as conn:
        with fixed_seed():
            plan, expression, backend = prepare(conn, sql, epsilon, 1e-6, None, None,
                                                mechanism)
            expression, read = checked(conn, plan, expression, backend)
        columns, exact = backend.execute(expression)
        noisy = add_noise(plan, columns, read(exact))
    out = {}
    for stat in plan.stats:
        if isinstance(stat.mechanism, Grid):
            values = noisy.stats[stat.name]
            out[stat.name] = (stat.mechanism, stat.linf, plan.max_groups, {
                g: v if isinstance(v, list) else [v]
                for g, v in zip(noisy.keys, values, strict=True)})
    return out


@pytest.fixture
def no_noise(monkeypatch):
    monkeypatch.setattr(DiscreteLaplace, "draws", _zero_draws)
    monkeypatch.setattr(DiscreteGaussian, "sample", _zero)


@settings(max_examples=int(os.environ.get("DPSQL_GRID_EXAMPLES", "25")), deadline=None,
          derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow])
@given(users=st.lists(rows_of_user, min_size=1, max_size=8), added=rows_of_user,
       order=st.randoms(use_true_random=False), query=st.sampled_from(QUERIES),
       epsilon=st.sampled_from([1e-4, 2.5e-4, 6e-4, 1e-3]),
       mechanism=st.sampled_from(["laplace", "gaussian"]))
def test_one_user_moves_a_gridded_release_by_at_most_the_units_counted(
        no_noise, users, added, order, query, epsilon, mechanism):
    d = [(pid, g, x) for pid, rows in enumerate(users) for g, x in rows]
    order.shuffle(d)
    d2 = list(d)
    for g, x in added:  # the new user's rows, anywhere in the stored order
        d2.insert(order.randint(0, len(d2)), (len(users), g, x))
    before = _released(d, query, epsilon, mechanism)
    after = _released(d2, query, epsilon, mechanism)
    assert before, "no statistic took the grid path"
    for name, (mech, linf, groups_max, released) in before.items():
        grid = mech.grid
        counted = math.floor(linf / grid) + mech.width
        total = 0
        for group, values in released.items():
            values2 = after[name][3][group]
            units = [v / grid for v in values + values2]
            assert all(u == round(u) for u in units), (name, values, values2)
            moved = sum(abs(b - a) for a, b in zip(values, values2, strict=True)) / grid
            assert moved <= counted, (name, group, values, values2, counted)
            total += moved
        assert total <= groups_max * counted, (name, total)


#: The shape of ``tests/privacy/test_float_sums.py``: one row per user (a PRIMARY KEY), a
#: sensitivity ``2·C`` just below the grid step 2 (a map that counts one unit), D's sum
#: of a few doubles near an odd number of grid half-steps, where a double sum that lost
#: the ``C`` deficits rounds (half to even) the other way than the exact one.
LINE = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
    "pid": {"type": "int"}, "x": {"type": "float", "lower": 0, "upper": 2}}}}}


def _line_release(xs, epsilon):
    con = duckdb.connect()
    con.execute("CREATE TABLE t (pid INTEGER PRIMARY KEY, x DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(xs)))
    with dpsql.connect(con, catalog=LINE, budget=(10, 0.5), ledger=":memory:") as conn:
        return conn.execute(f"SELECT SUM(x * {C}) FROM t", epsilon=epsilon).rows[0][0]


@settings(max_examples=int(os.environ.get("DPSQL_GRID_EXAMPLES", "60")), deadline=None,
          derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow])
@given(xs=st.lists(st.sampled_from((0.5, 1.0, 1.5, 2.0, 0.3, 1.7)), min_size=4, max_size=20),
       order=st.randoms(use_true_random=False))
def test_one_user_at_the_bound_moves_a_sum_by_at_most_one_unit(no_noise, xs, order):
    linf = 2 * float(C)  # 1.9999999999999998
    epsilon = linf / 12000  # scale 12000: grid 2, one unit counted
    xs2 = list(xs)
    xs2.insert(order.randint(0, len(xs)), 2.0)
    before, after = _line_release(xs, epsilon), _line_release(xs2, epsilon)
    assert before % 2 == 0 and after % 2 == 0
    assert abs(after - before) / 2 <= math.floor(linf / 2) + 1, (before, after)


def test_duckdb_sums_real_statistics_in_grid_units():
    """The property above holds by construction on DuckDB: every real statistic of these
    queries is summed in grid units (a count is not: it adds whole numbers)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (pid INTEGER, g INTEGER, x DOUBLE)")
    with dpsql.connect(con, catalog=CATALOG, budget=(100, 0.5), ledger=":memory:") as conn:
        for sql in QUERIES:
            plan, expression, backend = prepare(conn, sql, 1e-3)
            expression, _ = checked(conn, plan, expression, backend)
            for stat in plan.stats:
                assert (stat.grid is not None) == (not stat.rule.counts), (sql, stat)
                if stat.grid is not None:
                    assert stat.grid == stat.mechanism.k
                    fine = 2.0**-fine_exponent(stat.linf, stat.grid)
                    assert f"* {fine!r}" in backend.to_sql(expression)


def test_release_units_adds_integer_noise_to_integer_units(monkeypatch):
    """(units + noise) · 2^k, each the nearest float: exact integers first (beyond int64
    too), one rounding at the end, ±inf past the double range (never an error)."""
    from dpsql.mechanisms.laplace import GridLaplace

    monkeypatch.setattr(DiscreteLaplace, "draws", lambda self, n: [1] * n)
    m = GridLaplace(8192.0, -12)
    assert m.release_units([]) == []
    assert m.release_units([3, -5, 0]) == [4 / 4096, -4 / 4096, 1 / 4096]
    assert m.release_units([2**70, 2**53]) == [math.ldexp(float(2**70 + 1), -12),
                                               math.ldexp(float(2**53 + 1), -12)]
    top = GridLaplace(8192.0, 1000)
    assert top.release_units([1, 2**30]) == [2.0**1001, math.inf]


@pytest.mark.slow
def test_a_histograms_bins_add_up_to_at_most_its_bound(monkeypatch):
    """MEDIAN over 2 bins with ``max_rows`` R = 2^25 − 1 and a grid of 2^24: one user of
    2^25 rows (more than R, so each bin's weight is scaled to 2^24 − 1/2) and one of
    2^24 rows (2^23 per bin, a tie of the grid). Rounded to nearest one by one, the
    first user's bins added 2^25 fine units, more than R, and the release moved 4 grid
    units where ``floor(R / g) + width = 3`` are counted (attack review). Floored, they
    add at most R."""
    seen = []
    release_units = Grid.release_units

    def spy(self, units):
        seen.append([int(u) for u in units])
        return release_units(self, units)

    monkeypatch.setattr(Grid, "release_units", spy)
    monkeypatch.setattr(DiscreteLaplace, "draws", _zero_draws)
    big = 2**25 - 1
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": big, "columns": {
        "pid": {"type": "int"}, "x": {"type": "int", "lower": 0, "upper": 1}}}}}
    released = []
    for with_a in (False, True):
        con = duckdb.connect()
        b = f"SELECT 2 AS pid, CAST(i % 2 AS INTEGER) AS x FROM range({2**24}) r(i)"
        a = f"SELECT 1 AS pid, CAST(i % 2 AS INTEGER) AS x FROM range({2**25}) r(i)"
        con.execute(f"CREATE VIEW t AS {a} UNION ALL {b}" if with_a else f"CREATE VIEW t AS {b}")
        seen.clear()
        with dpsql.connect(con, catalog=catalog, budget=(10, 0.5), ledger=":memory:") as conn:
            stat = conn.explain("SELECT MEDIAN(x) FROM t", epsilon=2.0**-11 * 0.999).statistics[0]
            conn.execute("SELECT MEDIAN(x) FROM t", epsilon=2.0**-11 * 0.999)
        released.append(seen[0])
    k = math.floor(math.log2(stat["scale"])) - 12
    assert k == 24, stat
    moved = sum(abs(x - y) for x, y in zip(*released, strict=True))
    assert moved <= big // 2**k + 2, released


def test_a_fine_limit_above_2_to_53_keeps_the_sum_in_integers():
    """At a large ε share the clamp bound M = floor(L∞ / 2^j) is above 2^53; written as
    float text it made the clamp, and so the sum, a DOUBLE (attack review). M is an
    integer literal, and the checks before the charge insist that a gridded sum comes
    back as an integer type."""
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": 0, "upper": 2**40}}}}}
    con = duckdb.connect()
    con.execute("CREATE TABLE t (pid INTEGER, x DOUBLE)")
    con.execute("INSERT INTO t VALUES (1, 1.5), (2, 1099511627775.0)")
    with dpsql.connect(con, catalog=catalog, budget=(1e10, 0.5), ledger=":memory:") as conn:
        plan, expression, backend = prepare(conn, "SELECT SUM(x) FROM t", 1e9)
        expression, _ = checked(conn, plan, expression, backend)
        stat = plan.stats[0]
        assert fine_limit(stat.linf, fine_exponent(stat.linf, stat.grid)) > 2**53
        schema = dict(backend.check(expression))
        assert schema[stat.name] == "HUGEINT", schema
        assert conn.execute("SELECT SUM(x) FROM t", epsilon=1e9).rows
