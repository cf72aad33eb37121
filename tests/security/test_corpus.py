"""The hostile-query corpus against a real connection over the bundled PUMS data.

Each refusal case must raise its expected ``DpsqlError`` subclass, with a message that
names the problem, and leave the budget untouched. See ``corpus.py`` for the cases.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

import dpsql
from dpsql import UnsupportedQueryError

#: the attack corpus: left out by pytest -m "not slow"
pytestmark = pytest.mark.slow


def _load_corpus():
    # --import-mode=importlib: sibling modules are not importable by name
    name = "dpsql_security_corpus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("corpus.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


corpus = _load_corpus()
THEMES, SAFE, ERROR_CHANNELS = corpus.THEMES, corpus.SAFE, corpus.ERROR_CHANNELS
HITS, MISSES = corpus.HITS, corpus.MISSES
CASES = corpus.all_cases()


def _classes(error):
    return error if isinstance(error, tuple) else (error,)


def _param(item_id, case, marks=()):
    marks = list(marks)
    if case.finding:
        marks.append(pytest.mark.xfail(strict=True, reason=f"FINDING: {case.finding}"))
    return pytest.param(case, id=item_id, marks=marks)


def test_corpus_size_and_themes():
    assert len(CASES) >= 150
    assert len(THEMES) >= 14
    for theme, cases in THEMES.items():
        assert cases, theme
    # every refusal names a DpsqlError subclass
    for _, item_id, case in CASES:
        classes = _classes(case.error)
        assert all(issubclass(c, dpsql.DpsqlError) for c in classes), item_id


@pytest.mark.parametrize("case", [_param(i, c) for _, i, c in CASES])
def test_hostile_query_is_refused_for_free(refusal_conn, sec, case):
    out = sec.outcome(refusal_conn, case.sql, case.epsilon, case.delta,
                      timeout=case.timeout or sec.HANG_SECONDS, **case.kwargs)
    assert out.kind == sec.REFUSED, out.describe()
    assert isinstance(out.value, case.error), out.describe()
    if case.match is not None:
        alternatives = case.match if isinstance(case.match, tuple) else (case.match,)
        message = str(out.value).lower()
        assert any(m.lower() in message for m in alternatives), out.describe()
    assert out.value.charged is False
    assert refusal_conn.budget.spent == (0.0, 0.0)


@pytest.mark.parametrize(
    "case",
    [_param(i, c) for _, i, c in CASES
     if isinstance(c.sql, str) and dpsql.BackendError not in _classes(c.error)
     and dpsql.BudgetExhaustedError not in _classes(c.error)
     and not c.kwargs and c.epsilon in (1.0, None) and c.timeout is None],
)
def test_explain_refuses_the_same_way(refusal_conn, case):
    """``explain`` spends nothing, but must not be a way around validation either."""
    with pytest.raises(dpsql.DpsqlError) as info:
        refusal_conn.explain(case.sql, epsilon=case.epsilon, delta=case.delta)
    assert isinstance(info.value, case.error), repr(info.value)
    assert refusal_conn.budget.spent == (0.0, 0.0)


@pytest.mark.parametrize(
    "case", [_param(s.id or f"safe-{i}", s) for i, s in enumerate(SAFE)])
def test_hostile_looking_query_is_answered_or_refused_safely(rich_conn, sec, case):
    out = sec.outcome(rich_conn, case.sql, case.epsilon, case.delta,
                      timeout=sec.HANG_SECONDS, **case.kwargs)
    sec.assert_safe(out)
    if out.kind == sec.RESULT:
        res = out.value
        eps_spent = out.spent_after[0] - out.spent_before[0]
        assert math.isclose(eps_spent, res.cost[0], rel_tol=1e-9, abs_tol=1e-12)
        if case.releases_nothing:
            assert res.rows == [], f"released {len(res.rows)} group(s): {res.rows[:3]}"
        if case.expect_rows is not None:
            assert len(res.rows) == case.expect_rows, res.rows


@pytest.mark.parametrize(
    "channel",
    [pytest.param(c, id=c.id or f"channel-{i}",
                  marks=[pytest.mark.xfail(strict=True, reason=f"FINDING: {c.finding}")]
                  if c.finding else [])
     for i, c in enumerate(ERROR_CHANNELS)],
)
def test_errors_do_not_depend_on_the_data(rich_conn, sec, channel):
    hit = sec.outcome(rich_conn, channel.template.format(cond=HITS), 1.0, channel.delta,
                      timeout=sec.HANG_SECONDS)
    miss = sec.outcome(rich_conn, channel.template.format(cond=MISSES), 1.0, channel.delta,
                       timeout=sec.HANG_SECONDS)
    assert hit.kind == miss.kind, (
        f"the outcome depends on the data: with {HITS!r} {hit.describe()}; "
        f"with {MISSES!r} {miss.describe()}")
    sec.assert_safe(hit)
    sec.assert_safe(miss)


# -- resource abuse: analysis cost -------------------------------------------------------

def test_analysis_work_grows_linearly_with_the_number_of_aggregates(refusal_conn, monkeypatch):
    """Counts SQL renderings (sqlglot ``Expression.sql``) rather than seconds: deterministic.

    (A fixed finding: analysis used to be quadratic in the number of aggregates.)
    """
    from sqlglot import exp

    calls = {"n": 0}
    original = exp.Expression.sql

    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(exp.Expression, "sql", counting)

    def work(n):
        sql = "SELECT " + ", ".join(f"SUM(age + {i})" for i in range(n)) + " FROM pums"
        calls["n"] = 0
        refusal_conn.explain(sql, epsilon=1.0)
        return calls["n"]

    small, large = work(50), work(200)
    assert refusal_conn.budget.spent == (0.0, 0.0)
    # 4x the aggregates: ~4x the work if linear, ~16x if quadratic
    assert large < 8 * small, f"SQL renderings: 50 aggregates {small}, 200 aggregates {large}"


def test_many_aggregates_are_answered_in_bounded_time(refusal_conn, sec):
    """Not a hang: 300 aggregates (well under the node cap) finish within the limit, answered
    or refused for their number of statistics."""
    sql = "SELECT " + ", ".join(f"SUM(age + {i})" for i in range(300)) + " FROM pums"
    finished, _, exc = sec.call_with_timeout(lambda: refusal_conn.explain(sql, epsilon=1.0),
                                             sec.HANG_SECONDS)
    assert finished and (exc is None or "noisy statistics" in str(exc)), exc
    assert refusal_conn.budget.spent == (0.0, 0.0)


# -- messages name the construct ---------------------------------------------------------

NAMED = [
    ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", "read_csv", None),
    ("SELECT COUNT(*) FROM read_parquet('/tmp/x.parquet')", "read_parquet", None),
    ("SELECT COUNT(*) FROM range(10)", "range", None),
    ("SELECT COUNT(*) FROM glob('/*')", "glob", None),
    ("SELECT COUNT(*) FROM query('SELECT * FROM pums')", "query", None),
    ("SELECT COUNT(*) FROM read_json('/etc/passwd')", "read_json", None),
    ("SELECT COUNT(*) FROM duckdb_settings()", "duckdb_settings", None),
    ("SELECT COUNT(*) FROM sqlite_scan('/tmp/x.db', 't')", "sqlite_scan", None),
    ("CHECKPOINT", "checkpoint", None),
    ("DEALLOCATE s", "deallocate", None),
    ("SELECT SUM(DISTINCT income) FROM pums", "sum(distinct", None),
    ("SELECT ANY_VALUE(income) FROM pums", "any_value", None),
]


@pytest.mark.parametrize(
    "sql,name",
    [pytest.param(sql, name, id=name, marks=[pytest.mark.xfail(
        strict=True, reason=f"FINDING (message): the refusal does not name {name}: {why}")]
        if why else [])
     for sql, name, why in NAMED],
)
def test_refusal_names_the_construct(refusal_conn, sql, name):
    with pytest.raises(UnsupportedQueryError) as info:
        refusal_conn.execute(sql, epsilon=1.0)
    assert name.lower() in str(info.value).lower()
    assert refusal_conn.budget.spent == (0.0, 0.0)


# -- refusals leave the ledger consistent -----------------------------------------------

def test_many_refusals_then_a_real_query_costs_exactly_its_epsilon(security_db, sec):
    conn = sec.open_owner_conn(security_db)
    try:
        for _, _, case in CASES:
            if case.finding is None and case.timeout is None:
                sec.outcome(conn, case.sql, case.epsilon, case.delta, **case.kwargs)
        assert conn.budget.spent == (0.0, 0.0)
        res = conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.5)
        assert res.cost == (0.5, 0.0)
        assert conn.budget.spent == (0.5, 0.0)
    finally:
        conn.close()


def test_closed_connection_refuses(security_db, sec):
    conn = sec.open_owner_conn(security_db)
    conn.close()
    with pytest.raises(dpsql.DpsqlError):
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=1.0)
