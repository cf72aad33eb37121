"""The analysis runs in named steps and returns a plan that nothing changes afterwards."""

from __future__ import annotations

import dataclasses

import pytest
from sqlglot import parse_one

from dpsql.analyze.analyze import STEPS
from dpsql.analyze.scope import build_scope
from dpsql.datasets import pums_catalog
from dpsql.engine import _demo_plan
from dpsql.errors import UnsupportedQueryError
from dpsql.rewrite import EngineTraits, rewrite


def test_the_plan_is_frozen():
    plan = _demo_plan("SELECT educ, COUNT(*) FROM pums GROUP BY educ", seed=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.epsilon = 2.0
    assert isinstance(plan.notes, tuple) and plan.notes


def test_engine_traits_shape_the_sql_without_touching_the_plan():
    plan = _demo_plan("SELECT educ, COUNT(*) FROM pums GROUP BY educ", max_groups=2, seed=1)
    before = repr(plan)
    shared = rewrite(plan).sql()
    single = rewrite(plan, engine=EngineTraits(reuse_ctes=False)).sql()
    assert "__over" in shared and "__over" not in single
    assert repr(plan) == before


def test_the_steps_run_in_the_documented_order():
    assert [s.__name__ for s in STEPS] == [
        "check_parameters", "inline_tables", "resolve_scope", "contribution_bounds",
        "check_limits", "resolve_names", "resolve_outputs", "resolve_order",
        "release_groups", "split_budget"]


def test_scope_reads_a_derived_table_only_through_the_function_it_is_given():
    select = parse_one("SELECT COUNT(*) FROM (SELECT pid, COUNT(*) AS n FROM pums "
                       "GROUP BY pid) AS t")
    with pytest.raises(UnsupportedQueryError, match="subquery in FROM"):
        build_scope(select, pums_catalog())
