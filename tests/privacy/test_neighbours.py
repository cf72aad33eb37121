"""CI slice of the neighbour fuzzer: a fixed-seed run over random schemas and queries.

Every answered query must satisfy the neighbour properties of
:mod:`tests.privacy.oracle` on D and D′ (one adversarial user more), with the noise off.
The slice is derandomized (the same worlds and queries every run) and does not shrink,
so it takes the same couple of minutes whether or not the engine is broken, and reports
every (check, class) it hits at once. For minimal counterexamples run
``python -m tests.privacy.fuzz --minutes N``; each one found becomes a case in
``test_regressions.py``.
"""

from __future__ import annotations

import pytest

import dpsql.engine
from dpsql.rewrite import statistics_query
from tests.privacy.fuzz import CLASSES, ci_slice, slice_report
from tests.privacy.oracle import World, check_world

#: fuzzing: left out by pytest -m "not slow"
pytestmark = pytest.mark.slow


def test_neighbour_slice():
    recorders = ci_slice()
    report, first = slice_report(recorders)
    print(report)
    queries = sum(r.queries for r in recorders)
    answered = sum(r.answered for r in recorders)
    # the grammar must keep reaching the engine's answer path, or the slice proves little
    assert queries >= 300, report
    assert answered >= 0.3 * queries, report
    if first:
        cases = []
        for (kind, klass), f in sorted(first.items(), key=lambda kv: kv[1].query_number):
            cases.append(f"[{kind}] class {klass} ({CLASSES[klass]}):\n  "
                         f"{f.violation.detail[:400]}\n  query: {f.sql}")
        pytest.fail(f"{len(first)} neighbour properties broken; minimal examples: "
                    "python -m tests.privacy.fuzz --minutes 10\n\n" + report + "\n\n"
                    + "\n\n".join(cases))


# -- the oracle catches what it claims to (the engine broken on purpose) ----------------

WORLD = World(
    catalog={"dataset": "self", "tables": {"visits": {
        "user_key": "uid", "max_groups": 1, "max_rows": 2, "columns": {
            "uid": "int", "day": "int", "amount": {"type": "float", "lower": 0, "upper": 10},
            "region": {"type": "int", "values": [1, 2, 3]}}}}},
    schema=["CREATE TABLE visits (uid INTEGER, day INTEGER, amount DOUBLE, region INTEGER)"],
    data=["INSERT INTO visits VALUES (1, 1, 5.0, 1), (1, 2, 5.0, 2), (2, 1, 3.0, 3)"],
    attacker=["INSERT INTO visits SELECT 1000, i, 1e9, 1 + i % 3 FROM range(50) r(i)"],
)


def test_the_engine_passes_on_plain_queries():
    for sql in ("SELECT COUNT(*) FROM visits", "SELECT region, SUM(amount) FROM visits "
                "GROUP BY region", "SELECT day, COUNT(*) FROM visits GROUP BY day"):
        outcome = check_world(WORLD, sql)
        assert outcome.answered and not outcome.violations, (sql, outcome)


def test_skipped_bounding_is_caught(monkeypatch):
    # no clamping, no per-user aggregate, no L0 window: the plain GROUP BY
    monkeypatch.setattr(dpsql.engine, "rewrite", lambda plan, **engine: statistics_query(plan))
    outcome = check_world(WORLD, "SELECT region, COUNT(*) FROM visits GROUP BY region")
    kinds = {v.kind for v in outcome.violations}
    assert {"linf", "groups", "l1"} <= kinds, outcome.violations


def test_data_dependent_failure_is_caught(monkeypatch):
    # a statistics query with a cast that fails only on the added user's rows
    def failing(plan, **engine):
        query = statistics_query(plan)
        return query.where("CAST(CASE WHEN uid = 1000 THEN 'x' ELSE '1' END AS INTEGER) > 0",
                           copy=False)

    monkeypatch.setattr(dpsql.engine, "rewrite", failing)
    # the backend would guard it (and its check refuse it unguarded) before the charge:
    # switch both off, so that the oracle itself is what must catch the failure
    monkeypatch.setattr("dpsql.backends.total.place_guards", lambda tree, *a, **k: tree)
    monkeypatch.setattr("dpsql.backends.total.check_total", lambda *a, **k: None)
    outcome = check_world(WORLD, "SELECT COUNT(*) FROM visits")
    assert [v.kind for v in outcome.violations] == ["one-sided-failure"], outcome.violations


def test_a_seed_that_differs_between_neighbours_is_caught(monkeypatch):
    import tests.privacy.oracle as oracle

    seeds = iter(range(1, 1000))
    monkeypatch.setattr(oracle, "SEED", None)
    monkeypatch.setattr(oracle, "fixed_seed", lambda seed=None: _seed(next(seeds)))
    outcome = check_world(WORLD, "SELECT day, COUNT(*) FROM visits GROUP BY day")
    assert "plan-differs" in {v.kind for v in outcome.violations}, outcome.violations


def _seed(value):
    import contextlib
    import secrets

    @contextlib.contextmanager
    def patch():
        original = secrets.randbits
        secrets.randbits = lambda k: value
        try:
            yield
        finally:
            secrets.randbits = original

    return patch()
