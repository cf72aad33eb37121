"""ORDER BY, LIMIT and OFFSET over released columns in Python (:mod:`dpsql.postprocess_order`)
give DuckDB's answer.

Each case post-processes the same hand-made noisy groups twice: once with the Python
path and once with it turned off, so the scratch DuckDB (the reference) orders them. The
values are distinct where they are ordered on, so the two orders must agree exactly.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql.postprocess as postprocess_module
from dpsql.engine import _demo_plan
from dpsql.noise import NoisyGroups
from dpsql.postprocess import postprocess
from dpsql.released_table import arrow_array, scanned_rows

BASE = "SELECT educ AS e, COUNT(*) AS n, SUM(income) AS s FROM pums GROUP BY educ"
ORDERS = [
    "n", "n DESC", "2", "2 DESC", "s DESC, e", "e DESC NULLS FIRST", "e NULLS FIRST",
    "e", "e DESC", "n DESC, e DESC", "E", "N DESC", "3", "1 DESC NULLS LAST",
    "e NULLS LAST", "s ASC NULLS FIRST", "COUNT(*) DESC", "SUM(income)", "educ DESC",
]
CUTS = ["", " LIMIT 3", " LIMIT 2 OFFSET 1", " OFFSET 2", " LIMIT 0", " LIMIT 100 OFFSET 50"]


def _answer(sql, keys, counts, sums, fast, monkeypatch):
    plan = _demo_plan(sql, epsilon=1.0)
    names = [s.name for s in plan.stats]
    noisy = NoisyGroups([(k,) for k in keys], dict(zip(names, [counts, sums], strict=True)))
    if not fast:
        monkeypatch.setattr(postprocess_module, "sort_rows", lambda *args: None)
    out = postprocess(plan, noisy)
    monkeypatch.undo()
    return out


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(order=st.sampled_from(ORDERS), cut=st.sampled_from(CUTS),
       keys=st.lists(st.integers(1, 16), min_size=1, max_size=8, unique=True),
       null_key=st.booleans(), data=st.data())
def test_python_order_is_duckdbs(monkeypatch, order, cut, keys, null_key, data):
    keys = [*keys, None] if null_key else keys
    n = len(keys)
    counts = data.draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True))
    sums = data.draw(st.lists(st.floats(1.0, 1e9), min_size=n, max_size=n, unique=True))
    sql = f"{BASE} ORDER BY {order}{cut}"
    fast = _answer(sql, keys, counts, sums, True, monkeypatch)
    slow = _answer(sql, keys, counts, sums, False, monkeypatch)
    assert fast.rows == slow.rows, sql
    assert fast.accuracy == slow.accuracy and fast.intervals == slow.intervals


@pytest.mark.parametrize("sql", [
    f"{BASE} ORDER BY n",
    f"{BASE} ORDER BY e DESC LIMIT 2",
    f"{BASE} LIMIT 2",
])
def test_the_python_path_runs_no_database(monkeypatch, sql):
    def no_scratch():
        raise AssertionError("a scratch database was opened")

    monkeypatch.setattr(postprocess_module, "scratch", no_scratch)
    plan = _demo_plan(sql, epsilon=1.0)
    names = [s.name for s in plan.stats]
    out = postprocess(plan, NoisyGroups([(1,), (2,), (3,)],
                                        dict(zip(names, [[5, 7, 6], [1.0, 2.0, 3.0]],
                                                 strict=True))))
    assert len(out.rows) in (2, 3)


@pytest.mark.parametrize("sql", [
    f"{BASE} ORDER BY n + 1",          # an expression
    f"{BASE} ORDER BY -s",            # an expression over a released column
])
def test_what_is_not_provably_duckdbs_goes_to_duckdb(monkeypatch, sql):
    opened = []
    real = postprocess_module.scratch

    def counting():
        opened.append(1)
        return real()

    monkeypatch.setattr(postprocess_module, "scratch", counting)
    plan = _demo_plan(sql, epsilon=1.0)
    names = [s.name for s in plan.stats]
    postprocess(plan, NoisyGroups([(1,), (2,)], dict(zip(names, [[5, 7], [1.0, 2.0]],
                                                         strict=True))))
    assert opened == [1]


def test_a_nan_key_goes_to_duckdb():
    from sqlglot import parse_one

    from dpsql.postprocess_order import sort_rows

    order = parse_one("SELECT 1 ORDER BY 1", read="duckdb").args["order"]
    assert sort_rows([(float("nan"), 0), (1.0, 1)], ["x"], [None], order, None, None) is None
    assert sort_rows([(2.0, 0), (1.0, 1)], ["x"], [None], order, None, None) == [(1.0, 1),
                                                                                (2.0, 0)]


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=3),
    st.integers(min_value=-2**64, max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 2**63 - 1, -2**63, 2**63, -2**63 - 1]),
)


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=1, max_value=4).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.lists(_SCALARS, min_size=n, max_size=n),
                                             min_size=1, max_size=3))))
def test_released_rows_read_without_arrow_are_the_rows_arrow_gives(case):
    """Where the noise stage skips Arrow (released_table.scanned_rows), each row is the one the
    Arrow table would give back, value, type and sign of zero alike; elsewhere it
    declines (fails when a column mixing ints and floats, or an int beyond int64, is
    read without Arrow)."""
    import math

    import pyarrow as pa

    n, columns = case
    data = {f"c{i}": values for i, values in enumerate(columns)}
    fast = scanned_rows(data, n)
    if fast is None:
        return
    arrow = pa.table({k: arrow_array(v) for k, v in data.items()}
                     ).to_pylist()

    def same(a, b):
        if type(a) is not type(b):
            return False
        if isinstance(a, float):
            return (math.isnan(a) and math.isnan(b)) or a.hex() == b.hex()
        return a == b

    assert len(fast) == len(arrow)
    for got, want in zip(fast, arrow, strict=True):
        assert list(got) == list(want)
        assert all(same(got[k], want[k]) for k in got), (data, got, want)
