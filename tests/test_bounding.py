"""Contribution bounding: one extreme user moves exact statistics by at most the bounds.

D is the bundled pums_dup table; D' adds one user with 1,000 rows spread over 50
ages, with values far outside the catalog's bounds. The rewritten SQL runs on both
(no noise) and the difference is compared with the sensitivity the plan claims.
"""

from __future__ import annotations

import importlib

import duckdb
import pytest

from dpsql.backends import DuckDBBackend
from dpsql.datasets import load_pums
from dpsql.engine import _demo_plan
from dpsql.rewrite import EngineTraits, rewrite

ATTACKER = 10_000_000


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory):
    base = tmp_path_factory.mktemp("neighbours")
    d, d2 = base / "d.duckdb", base / "d2.duckdb"
    for path in (d, d2):
        load_pums(path)
    con = duckdb.connect(str(d2))
    con.execute(
        "INSERT INTO pums_dup SELECT 20 + i % 50 AS age, i % 2 AS sex, 1 + i % 16 AS educ, "
        f"1 + i % 6 AS race, 1e12 AS income, i % 2 AS married, {ATTACKER} AS pid "
        "FROM range(1000) r(i)"
    )
    con.close()
    backends = DuckDBBackend(d), DuckDBBackend(d2)
    yield backends
    for b in backends:
        b.close()


def exact(backend, plan, engine=None):
    columns, rows = backend.execute(rewrite(plan, engine=engine or EngineTraits()))
    nk = len(plan.keys)
    return {tuple(r[:nk]): dict(zip(columns[nk:], r[nk:], strict=True)) for r in rows}


@pytest.mark.parametrize(("max_rows", "max_groups"), [(1, 1), (3, 1), (2, 4)])
@pytest.mark.parametrize("group_by", ["", "age", "educ"])
def test_one_user_moves_each_statistic_by_at_most_its_bound(neighbours, max_rows, max_groups,
                                                            group_by):
    select = f"{group_by}, " if group_by else ""
    tail = f" GROUP BY {group_by}" if group_by else ""
    sql = (f"SELECT {select}COUNT(*), SUM(income), AVG(age), COUNT(DISTINCT pid), "
           f"COUNT(DISTINCT age + pid) FROM pums_dup{tail}")
    plan = _demo_plan(sql, max_rows=max_rows, max_groups=max_groups, seed=3)
    before, after = (exact(b, plan) for b in neighbours)
    G = plan.max_groups
    changed = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
    assert 0 < len(changed) <= G
    for stat in plan.stats:
        diffs = [abs(float(after.get(k, {}).get(stat.name) or 0)
                     - float(before.get(k, {}).get(stat.name) or 0)) for k in changed]
        assert max(diffs) <= stat.linf + 1e-6, stat.label
        assert sum(diffs) <= G * stat.linf + 1e-6, stat.label
    # the attacker's 1,000 rows do reach the bound: the test would notice no bounding
    distinct = next(s for s in plan.stats if s.kind == "distinct")
    reach = 1 if group_by == "age" else max_rows  # by age: one value of age + pid a group
    assert max(abs((after.get(k) or {}).get(distinct.name, 0)
                   - (before.get(k) or {}).get(distinct.name, 0)) for k in changed) == reach
    count = plan.stats[0]
    assert count.label == "COUNT(*)"
    assert max(abs((after.get(k) or {}).get("__s0", 0) - (before.get(k) or {}).get("__s0", 0))
               for k in changed) == max_rows


def test_without_bounding_the_same_check_fails(neighbours):
    """The unbounded statistics query (no rewrite passes) breaks the claimed bound."""
    from dpsql.rewrite import statistics_query

    plan = _demo_plan("SELECT age, COUNT(*) FROM pums_dup GROUP BY age", max_rows=1)
    cols = []
    for backend in neighbours:
        columns, rows = backend.execute(statistics_query(plan))
        cols.append({r[0]: r[1] for r in rows})
    before, after = cols
    worst = max(abs(after.get(k, 0) - before.get(k, 0)) for k in set(before) | set(after))
    assert worst > plan.stat("__s0").linf


#: The first case runs in the quick loop (pytest -m "not slow"), the others with everything.
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(("max_rows", "max_groups"), [
    (1, 1), pytest.param(3, 1, marks=_SLOW), pytest.param(2, 4, marks=_SLOW)])
@pytest.mark.parametrize("group_by", ["", pytest.param("educ", marks=_SLOW)])
def test_one_user_moves_a_histogram_by_at_most_max_rows(neighbours, max_rows, max_groups,
                                                         group_by):
    """The user's 1,000 rows over 50 ages add at most R to a group's bins, in L1."""
    select = f"{group_by}, " if group_by else ""
    tail = f" GROUP BY {group_by}" if group_by else ""
    plan = _demo_plan(f"SELECT {select}MEDIAN(age), MAX(income) FROM pums_dup{tail}",
                      max_rows=max_rows, max_groups=max_groups, seed=3)
    before, after = (exact(b, plan) for b in neighbours)
    changed = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
    assert 0 < len(changed) <= plan.max_groups
    for stat in plan.stats:
        assert stat.kind == "hist" and stat.linf == max_rows
        per_group = [sum(abs(float((after.get(k) or {}).get(c) or 0)
                             - float((before.get(k) or {}).get(c) or 0)) for c in stat.columns)
                     for k in changed]
        # the rows reach the bound (the test would notice no scaling) and never pass it
        assert max(per_group) == pytest.approx(max_rows)
        assert sum(per_group) <= plan.max_groups * max_rows + 1e-9


def test_an_unscaled_histogram_breaks_the_bound(neighbours):
    from dpsql.rewrite import statistics_query

    plan = _demo_plan("SELECT MEDIAN(age) FROM pums_dup", max_rows=1)
    stat = plan.stats[0]
    before, after = (dict(zip(b.execute(statistics_query(plan))[0],
                              b.execute(statistics_query(plan))[1][0], strict=True))
                     for b in neighbours)
    assert sum(abs(after[c] - before[c]) for c in stat.columns) > stat.linf


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """pums_dup plus 3,000 rows of people with 1 to 5 ages each, and rows without a pid."""
    path = tmp_path_factory.mktemp("mixed") / "d.duckdb"
    load_pums(path)
    con = duckdb.connect(str(path))
    con.execute(
        "INSERT INTO pums_dup SELECT 20 + (i * 7) % 50 AS age, i % 2 AS sex, "
        "1 + (i * 5) % 16 AS educ, 1 + i % 6 AS race, 1000 * (i % 90) AS income, "
        "i % 2 AS married, CASE WHEN i % 37 = 0 THEN NULL ELSE 50000 + i // (1 + i % 5) "
        "END AS pid FROM range(3000) r(i)")
    con.close()
    backend = DuckDBBackend(path)
    yield backend
    backend.close()


@pytest.mark.parametrize("max_groups", [1, 2, 3])
@pytest.mark.parametrize("sql", [
    "SELECT age, COUNT(*), SUM(income) FROM pums_dup GROUP BY age",
    "SELECT educ, sex, AVG(income), COUNT(DISTINCT age) FROM pums_dup GROUP BY educ, sex",
])
def test_the_split_l0_step_keeps_what_one_window_keeps(mixed, sql, max_groups):
    """Users within the bound skip the window (bound_groups); the rows kept are the same."""
    plan = _demo_plan(sql, max_rows=2, max_groups=max_groups, seed=5)
    assert plan.bound_groups
    split = exact(mixed, plan)
    one_window = exact(mixed, plan, EngineTraits(reuse_ctes=False))
    assert split == one_window
    assert "__over" in rewrite(plan).sql() and "__over" not in rewrite(
        plan, engine=EngineTraits(reuse_ctes=False)).sql()
    unbounded = _demo_plan(sql, max_rows=2, max_groups=100, seed=5)
    assert exact(mixed, unbounded) != split  # some users are over the bound here


def _neighbour_at(cover_base, combos: list[tuple[int, int]]) -> DuckDBBackend:
    """pums_dup plus one user with 200 rows at each (sex, married) combination given."""
    base, backends = cover_base
    name = f"at_{'_'.join(f'{s}{m}' for s, m in combos)}"
    if name in backends:
        return backends[name]
    path = base / f"{name}.duckdb"
    load_pums(path)
    con = duckdb.connect(str(path))
    for sex, married in combos:
        con.execute(
            f"INSERT INTO pums_dup SELECT 20 + i % 50, {sex}, 1 + i % 16, 1 + i % 6, 1e12, "
            f"{married}, {ATTACKER} FROM range(200) r(i)")
    con.close()
    backends[name] = DuckDBBackend(path)
    return backends[name]


@pytest.fixture(scope="module")
def cover_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("cover")
    d = base / "d.duckdb"
    load_pums(d)
    backends = {"d": DuckDBBackend(d)}
    yield base, backends
    for b in backends.values():
        b.close()


def _assert_within_bounds(before, after, plan):
    G = plan.max_groups
    changed = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
    assert 0 < len(changed) <= G, f"{len(changed)} groups changed, max_groups {G}"
    for stat in plan.stats:
        diffs = [abs(float(after.get(k, {}).get(stat.name) or 0)
                     - float(before.get(k, {}).get(stat.name) or 0)) for k in changed]
        assert max(diffs) <= stat.linf + 1e-6, stat.label
        assert sum(diffs) <= G * stat.linf + 1e-6, stat.label


@pytest.mark.parametrize(("sql", "max_groups"), [
    ("SELECT sex, COUNT(*), SUM(income), AVG(age) FROM pums_dup GROUP BY sex", 1),
    ("SELECT sex, married, COUNT(*), SUM(income) FROM pums_dup GROUP BY sex, married", 3),
])
def test_the_cover_rule_keeps_each_statistic_within_its_bound(cover_base, sql, max_groups):
    """A product of max_groups + 1 public combinations: ``__over`` is the users at all of
    them (bound_groups._over_by_cover); a user at every combination, and one at all but
    one, each move at most max_groups groups, each statistic by at most its bound."""
    plan = _demo_plan(sql, max_rows=2, max_groups=max_groups, seed=11)
    assert plan.bound_groups and "__k0 = 0" in rewrite(plan).sql()  # the rule applies
    combos = [(0, 0), (0, 1), (1, 0), (1, 1)]
    d = cover_base[1]["d"]
    for reached in (combos, combos[:-1], combos[::3]):
        _assert_within_bounds(exact(d, plan), exact(_neighbour_at(cover_base, reached), plan),
                              plan)


@pytest.mark.parametrize(("sql", "max_groups"), [
    ("SELECT sex, COUNT(*), SUM(income) FROM pums_dup GROUP BY sex", 1),
    ("SELECT sex, married, AVG(income) FROM pums_dup GROUP BY sex, married", 3),
])
def test_the_cover_rule_keeps_what_the_aggregate_keeps(mixed, cover_base, sql, max_groups,
                                                      monkeypatch):
    """Same rows as ``GROUP BY __uid HAVING COUNT(*) > G`` (so the L0 choice is today's)."""
    module = importlib.import_module("dpsql.rewrite.bound_groups")

    everywhere = _neighbour_at(cover_base, [(0, 0), (0, 1), (1, 0), (1, 1)])
    plan = _demo_plan(sql, max_rows=2, max_groups=max_groups, seed=5)
    for backend in (mixed, everywhere):
        cover = exact(backend, plan)
        with monkeypatch.context() as m:
            m.setattr(module, "_over_by_cover", lambda plan, G: None)
            assert "__k0 = 0" not in rewrite(plan).sql()
            aggregate = exact(backend, plan)
        assert cover == aggregate


def test_the_cover_rule_where_its_premise_fails_breaks_the_bound(cover_base, monkeypatch):
    """Broken on purpose: the cover applied to 4 combinations under max_groups 2 (the
    product is not max_groups + 1) misses a user at 3 of them, who keeps 3 groups."""
    module = importlib.import_module("dpsql.rewrite.bound_groups")

    d, three = cover_base[1]["d"], _neighbour_at(cover_base, [(0, 0), (0, 1), (1, 0)])
    plan = _demo_plan("SELECT sex, married, COUNT(*) FROM pums_dup GROUP BY sex, married",
                      max_rows=2, max_groups=2, seed=11)
    assert "__k0 = 0" not in rewrite(plan).sql()
    _assert_within_bounds(exact(d, plan), exact(three, plan), plan)
    original = module._over_by_cover
    monkeypatch.setattr(module, "_over_by_cover", lambda plan, G: original(plan, G + 1))
    assert "__k0 = 0" in rewrite(plan).sql()
    with pytest.raises(AssertionError, match="3 groups changed"):
        _assert_within_bounds(exact(d, plan), exact(three, plan), plan)


@pytest.mark.parametrize(("sql", "max_groups"), [
    ("SELECT sex + 0, COUNT(*) FROM pums GROUP BY sex + 0", 1),  # not a bare column
    ("SELECT sex, married, COUNT(*) FROM pums WHERE NOT (sex = 0 AND married = 0) "
     "GROUP BY sex, married", 2),  # WHERE restricts the combinations: plan.groups
    ("SELECT sex, married, COUNT(*) FROM pums GROUP BY sex, married", 2),  # 4 ≠ 2 + 1
    ("SELECT educ, COUNT(*) FROM pums GROUP BY educ", 15),  # 16 = 15 + 1 > MAX_COVER
])
def test_the_cover_rule_applies_only_where_its_premise_holds(sql, max_groups):
    plan = _demo_plan(sql, max_groups=max_groups)
    assert plan.bound_groups
    assert "HAVING COUNT(*) > " in rewrite(plan).sql()


@pytest.mark.parametrize("sql", [
    "SELECT sex, COUNT(DISTINCT educ), MEDIAN(age) FROM pums_dup GROUP BY sex",
    "SELECT sex, COUNT(DISTINCT educ), MAX(income) FROM pums_dup WHERE age > 0 GROUP BY sex",
])
def test_the_cover_rule_bounds_distinct_counts_and_histograms(cover_base, sql):
    """COUNT(DISTINCT) and histogram statistics read their own per-user tables: under the
    cover rule a user at both sexes still moves one group, each statistic within bound."""
    plan = _demo_plan(sql, max_rows=2, max_groups=1, seed=11)
    assert plan.bound_groups and "__k0 = 0" in rewrite(plan).sql()  # the rule applies
    d = cover_base[1]["d"]
    for reached in ([(0, 0), (1, 1)], [(1, 0)]):
        _assert_within_bounds(exact(d, plan), exact(_neighbour_at(cover_base, reached), plan),
                              plan)


def _sqlite_dates(path, extra):
    """An SQLite file: 40 people on one of 4 days each, plus ``extra`` (pid, d) rows."""
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (pid INTEGER, d DATE)")
    con.executemany("INSERT INTO t VALUES (?, ?)",
                    [(i, f"2020-01-0{1 + i % 4}") for i in range(40)] + list(extra))
    con.commit()
    con.close()
    return f"sqlite:///{path}"


def _released_counts(url, sql):
    import datetime

    import dpsql
    from dpsql.catalog import Catalog, Column, Table
    from tests.support import checked, prepare

    day = datetime.date
    catalog = Catalog({"t": Table("t", {
        "pid": Column("pid", "int"),
        "d": Column("d", "date", day(2020, 1, 1), day(2020, 1, 4))},
        user_key="pid", max_groups=3, max_rows=1)})
    conn = dpsql.connect(url, catalog=catalog, budget=(100, 1e-3), ledger=":memory:")
    try:
        plan, expression, backend = prepare(conn, sql)
        expression, read = checked(conn, plan, expression, backend)
        columns, rows = backend.execute(expression)
        exact = {r[0]: r[1] for r in read(rows)}
        return plan, expression, {k[0]: exact.get(k[0], 0) for k in plan.public_groups()}
    finally:
        conn.close()


@pytest.mark.parametrize("days", [["2020-01-01", "2020-01-02", "2020-01-03"],
                                  ["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-04"]])
def test_the_cover_rule_on_sqlite_dates_that_are_not_iso_text(tmp_path, days):
    """SQLite keeps DATE as text: ``2020-01-01 00:00:00`` passes restrict_domains' ``d
    BETWEEN '2020-01-01' AND '2020-01-04'`` yet would match no ``__k0 = '2020-01-01'`` of
    the cover, so a user with such rows and 3 of the 4 days would not be in ``__over``
    (attack review). Date keys therefore keep the aggregate; the released groups move by
    at most max_groups, each by at most max_rows."""
    attacker = [(ATTACKER, d) for d in days]
    attacker += [(ATTACKER, f"{d} 00:00:00") for d in days[:2]]
    sql = "SELECT d, COUNT(*) FROM t GROUP BY d"
    plan, expression, before = _released_counts(_sqlite_dates(tmp_path / "d.db", []), sql)
    assert "__k0 = '2020-01-01'" not in expression.sql("sqlite")  # no cover for dates
    _, _, after = _released_counts(_sqlite_dates(tmp_path / "d2.db", attacker), sql)
    changed = [k for k in before if before[k] != after[k]]
    assert 0 < len(changed) <= plan.max_groups
    assert all(abs(after[k] - before[k]) <= 1 for k in changed)
