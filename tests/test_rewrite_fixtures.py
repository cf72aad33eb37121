"""Golden rewrite fixtures, checked for text and for meaning in one test.

``tests/fixtures/<pass>.sql`` holds cases: an analyst query, then the SQL after every
pass up to and including ``<pass>`` (``statistics_query.sql``: the plain statistics
query). Options such as ``# max_rows: 4`` precede a case (``# catalog: tpch``: over
the TPC-H catalog, checked on TPC-H at scale 0.01). For each case the test checks the
text, then runs the plain statistics query and the rewritten one on the PUMS data
(which satisfy the catalog's bounds at these options) and requires equal exact
statistics: bounding must change nothing on data that are already in bounds.

A new case is written as its query followed by ``TODO;``; regenerate after an
intended change (or to fill TODOs) with ``DPSQL_REGEN_FIXTURES=1 pytest
tests/test_rewrite_fixtures.py`` and review the diff.
"""

from __future__ import annotations

import inspect
import math
import os
from pathlib import Path

import pytest

from dpsql.engine import _demo_plan
from dpsql.grid_units import choose_grids, fine_exponent
from dpsql.rewrite import RULES, EngineTraits, statistics_query
from tests.support import read_cases, write_cases

FIXTURES = Path(__file__).parent / "fixtures"
PASSES = {"statistics_query": 0, **{rule.__name__: i + 1 for i, rule in enumerate(RULES)}}
#: ``# max_rows: 4`` before a case: an option of its plan.
OPTIONS = {"max_rows": int, "max_groups": int, "catalog": str,
           # an engine trait (dpsql.rewrite.traits): ``# exact_summands: false``
           "exact_summands": lambda v: v.strip().lower() == "true",
           # ``# grid_sums: true``: real statistics summed in grid units
           # (dpsql.grid_units), as on DuckDB; off by default
           "grid_sums": lambda v: v.strip().lower() == "true"}
TRAITS = ("exact_summands", "grid_sums")
REGEN = os.environ.get("DPSQL_REGEN_FIXTURES") == "1"


def rewritten(sql: str, upto: int, options: dict):
    traits = EngineTraits(exact_summands=options.get("exact_summands", True),
                          grid_sums=options.get("grid_sums", False))
    plan = _demo_plan(sql, seed=0, **{k: v for k, v in options.items() if k not in TRAITS})
    choose_grids(plan, traits)  # as the engine does before its rewrite
    expression = statistics_query(plan)
    for rule in RULES[:upto]:
        if "engine" in inspect.signature(rule).parameters:
            expression = rule(expression, plan, engine=traits)
        else:
            expression = rule(expression, plan)
    return plan, expression


def all_cases():
    for path in sorted(FIXTURES.glob("*.sql")):
        assert path.stem in PASSES, f"fixture {path.name} names no rewrite pass"
        for i, case in enumerate(read_cases(path, OPTIONS)[1]):
            yield pytest.param(path, i, case, id=f"{path.stem}-{i}")


def _rows(con, expression, names=None):
    """Rows as tuples in the order of ``names`` (default: the query's own columns)."""
    cur = con.execute(expression.sql(dialect="duckdb"))
    columns = [d[0] for d in cur.description]
    order = [columns.index(n) for n in (names or columns)]
    return sorted((tuple(r[i] for i in order) for r in cur.fetchall()), key=repr), columns


@pytest.mark.parametrize(("path", "index", "case"), list(all_cases()))
def test_fixture(path, index, case, request):
    plan, expression = rewritten(case["sql"], PASSES[path.stem], case["options"])
    got = expression.sql(dialect="duckdb")
    if REGEN:
        header, cases = read_cases(path, OPTIONS)
        cases[index]["expected"] = got
        write_cases(path, header, cases)
    else:
        assert case["expected"] not in (None, "TODO"), f"{path.name}: case {index} unfilled"
        assert got == case["expected"]

    # Meaning: on in-bounds data the rewrite leaves every exact statistic unchanged.
    data = request.getfixturevalue(
        "tpch_db" if case["options"].get("catalog") == "tpch" else "pums_db")
    # A gridded statistic comes back in whole units of its fine grid, each summand (and
    # each row of a user's partial) rounded: within a step per row read of the exact value.
    grids = {c: fine_exponent(s.linf, s.grid) for s in plan.stats if s.grid is not None
             for c in s.columns}
    plain, names = _rows(data, statistics_query(plan))
    private, _ = _rows(data, expression, names)
    summands = _rows_read(data) if grids else 0
    assert len(plain) == len(private)
    for a, b in zip(plain, private, strict=True):
        for name, x, y in zip(names, a, b, strict=True):
            if name in grids:
                assert isinstance(y, int), (name, y)
                step = 2.0**grids[name]
                assert abs(float(x or 0) - y * step) <= summands * step, (name, x, y)
            elif isinstance(x, int | float) and isinstance(y, int | float):
                assert math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-6)
            else:
                assert x == y


def _rows_read(con) -> int:
    """Rows of all the database's tables: a bound on the summands of any statistic."""
    tables = [t for (t,) in con.execute("SHOW TABLES").fetchall()]
    return sum(con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables)


def test_every_pass_has_fixtures():
    assert {p.stem for p in FIXTURES.glob("*.sql")} == set(PASSES)
