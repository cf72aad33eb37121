"""A SUM whose every per-row value is a literal inside its bounds is summed unclamped.

:func:`dpsql.aggregates.sums.literal_values_within` decides; anything that could take a
value outside the bounds (a column, arithmetic, a fraction, a literal past a bound,
unbounded bounds) keeps ``LEAST(GREATEST(...))``, which is what bounds the sensitivity.
"""

from __future__ import annotations

import math

import pytest
from sqlglot import parse_one

from dpsql.aggregates.sums import literal_values_within
from dpsql.engine import _demo_plan
from dpsql.rewrite import clamp_values, statistics_query


@pytest.mark.parametrize(("sql", "lower", "upper", "skip"), [
    ("CASE WHEN a = 1 THEN 1 ELSE 0 END", 0, 1, True),
    ("CASE WHEN a = 1 THEN 1 END", 0, 1, True),
    ("CASE WHEN a = 1 THEN -1 WHEN a = 2 THEN 1 ELSE NULL END", -1, 1, True),
    ("1", 0, 1, True),
    ("CASE WHEN a = 1 THEN 2 ELSE 0 END", 0, 1, False),    # a branch past the upper bound
    ("CASE WHEN a = 1 THEN -1 ELSE 0 END", 0, 1, False),   # below the lower bound
    ("CASE WHEN a = 1 THEN 1 ELSE 0 END", 0.5, 1, False),  # a fractional bound
    ("CASE WHEN a = 1 THEN 0.5 ELSE 0 END", 0, 1, False),  # a fractional value
    ("CASE WHEN a = 1 THEN a ELSE 0 END", 0, 1, False),    # a column
    ("CASE WHEN a = 1 THEN 1 + 0 ELSE 0 END", 0, 1, False),  # arithmetic
    ("CASE a WHEN 1 THEN 1 ELSE 0 END", 0, 1, False),      # simple CASE: not covered
    ("CASE WHEN a = 1 THEN '1' ELSE 0 END", 0, 1, False),  # a string
    ("CASE WHEN a = 1 THEN 1 ELSE 0 END", -math.inf, 1, False),
    ("a", 0, 1, False),
])
def test_literal_values_within(sql, lower, upper, skip):
    assert literal_values_within(parse_one(sql), lower, upper) is skip


def test_rewrite_skips_only_the_no_op_clamp():
    plan = _demo_plan("SELECT SUM(CASE WHEN sex = 1 THEN 1 ELSE 0 END), "
                      "SUM(CASE WHEN sex = 1 THEN age ELSE 0 END) FROM pums")
    out = clamp_values(statistics_query(plan), plan)
    first, second = (e.this.sql() for e in out.expressions)
    assert "LEAST" not in first and "GREATEST" not in first
    assert "LEAST(GREATEST(" in second
