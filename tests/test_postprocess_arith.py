"""Outer arithmetic in Python (dpsql.postprocess_arith) is DuckDB's, bit for bit.

Random expressions over released columns (floats, integers) and literals are computed
by :func:`evaluate` and by DuckDB over the same Arrow table, as the scratch database
runs them (``TRY(...)``); wherever ``evaluate`` answers, DuckDB answers the same double
(sign of zero included). A second test runs TPC-H's q14 shape through the engine both
ways and compares the released rows.
"""

from __future__ import annotations

import math
import struct

import duckdb
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp, parse_one

from dpsql.postprocess_arith import evaluate

FLOATS = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.sampled_from([0.0, -0.0, 1.0, 3.0, 0.1, 1e308, -1e-308, 5e-324]))
INTS = st.one_of(st.integers(-10**6, 10**6), st.sampled_from([0, 2**53 - 1, 2**53, -2**60]))
LITERALS = st.sampled_from(["100.00", "0.5", "3", "1e2", "2.5e-3", "0.1", "7", "1e308",
                            "123456789.123456789", "0.0000000000000000000000001",
                            "9007199254740993", "1.5"])


def _expressions():
    leaf = st.one_of(st.sampled_from(["__a0", "__a1", "__a2", "__a3"]), LITERALS)
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from("+-*/"), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda e: f"-({e})")),
        max_leaves=6)


def _bits(x):
    return struct.pack(">d", x) if isinstance(x, float) else x


@settings(max_examples=400, deadline=None)
@given(text=_expressions(), a0=FLOATS, a1=FLOATS, a2=FLOATS, a3=INTS)
def test_evaluate_is_duckdb(text, a0, a1, a2, a3):
    row = {"__a0": a0, "__a1": a1, "__a2": a2, "__a3": a3}
    ours = evaluate(parse_one(text, read="duckdb"), row)
    if ours is None:
        return
    table = pa.table({k: pa.array([v]) for k, v in row.items()})
    con = duckdb.connect()
    con.register("__noisy", table)
    (theirs,) = con.execute(f"SELECT TRY({text}) FROM __noisy").fetchone()
    assert isinstance(theirs, float) and math.isfinite(theirs), (text, row, theirs)
    assert _bits(ours) == _bits(theirs), (text, row, ours, theirs)


def test_left_to_duckdb():
    """Exact arithmetic, NULLs, NaN, zero divisors and functions say None."""
    row = {"__a0": 1.5, "__a1": 0.0, "__a2": None, "__a3": 4, "__a4": math.nan}
    for text in ("__a3 * 2", "1 / 3", "__a0 / __a1", "__a2 + 1.0e0", "__a4 * 1e0",
                 "ABS(__a0)", "CASE WHEN __a0 > 1 THEN __a0 END", "__a3 + 9007199254740993"):
        assert evaluate(parse_one(text, read="duckdb"), row) is None, text
    assert evaluate(exp.column("__a0"), row) == 1.5


@settings(max_examples=60, deadline=None)
@given(values=st.lists(FLOATS, min_size=4, max_size=4))
def test_postprocess_both_ways(values):
    """postprocess() over a q14-shaped plan: the rows with the arithmetic in Python
    equal the scratch database's rows, bit for bit, for any noisy values."""
    import dpsql.postprocess as post
    from dpsql.engine import _demo_plan
    from dpsql.noise import NoisyGroups

    plan = _demo_plan("SELECT 100.00 * SUM(CASE WHEN sex = 1 THEN income ELSE 0 END) / "
                      "SUM(income) AS share, SUM(income) - 1e3 * SUM(age) AS d FROM pums")
    stats = {s.name: [v] for s, v in zip(plan.stats, values, strict=False)}
    groups = NoisyGroups(keys=[()], stats=stats)
    ours = post.postprocess(plan, groups)
    real = post.evaluate
    try:
        post.evaluate = lambda e, r: None  # the scratch database
        theirs = post.postprocess(plan, groups)
    finally:
        post.evaluate = real
    assert [[_bits(v) for v in r] for r in ours.rows] == \
        [[_bits(v) for v in r] for r in theirs.rows]
    assert ours.accuracy == theirs.accuracy
