"""Group keys the user determines (dpsql.analyze.determined): one group per user.

Two kinds of check. The plan: which queries get ``max_groups`` 1 without the L0 window,
and which keep the catalog's bound. The data: on a database built to break the rule
(a public table whose join key repeats, a user missing from a LEFT JOIN, keys compared
across types), the rewritten SQL is run up to its per-user table and no user may reach
more groups than the plan's ``max_groups`` — the assumption the noise is scaled by.
"""

from __future__ import annotations

import duckdb
import pytest
from sqlglot import exp

import dpsql
from tests.support import prepare

CATALOG = {
    "dataset": "determined",
    "tables": {
        "people": {"user_key": "uid", "max_groups": 3, "max_rows": 1, "columns": {
            "uid": "int", "region": {"type": "int", "values": [1, 2, 3]},
            "score": {"type": "float", "lower": 0, "upper": 10},
            "code": {"type": "string", "values": ["a", "b"]}}},
        "visits": {"user_key": "uid", "max_groups": 3, "max_rows": 5, "columns": {
            "uid": "int", "vid": "int", "region": {"type": "int", "values": [1, 2, 3]},
            "amount": {"type": "float", "lower": 0, "upper": 100}}},
        "regions": {"public": True, "columns": {"region": "int", "name": "string"}},
        "labels": {"public": True, "columns": {"region": "int", "label": "string"}},
    },
}

# Three people; uid 3 has no row in people (a LEFT JOIN gives them NULLs). Each person
# visits several regions; uid 1 has visit 1 twice. `labels` repeats region 1 with two
# labels and is not unique.
SETUP = """
CREATE TABLE people (uid INTEGER PRIMARY KEY, region INTEGER, score DOUBLE, code VARCHAR);
INSERT INTO people VALUES (1, 1, 1.0, 'a'), (2, 2, 2.0, 'b');
CREATE TABLE visits (uid INTEGER, vid INTEGER, region INTEGER, amount DOUBLE);
INSERT INTO visits VALUES (1, 1, 1, 5), (1, 1, 1, 5), (1, 2, 2, 5), (1, 3, 3, 5), (2, 4, 1, 5),
    (2, 5, 2, 5), (3, 6, 1, 5), (3, 7, 3, 5);
CREATE TABLE regions (region INTEGER PRIMARY KEY, name VARCHAR);
INSERT INTO regions VALUES (1, 'north'), (2, 'south'), (3, 'east');
CREATE TABLE labels (region INTEGER, label VARCHAR);
INSERT INTO labels VALUES (1, 'x'), (1, 'y'), (2, 'z'), (3, 'w');
"""

DETERMINED = {
    # the user's own row (uid is the PRIMARY KEY of people)
    "people": "SELECT p.region, COUNT(*) FROM visits v JOIN people p ON v.uid = p.uid "
              "GROUP BY p.region",
    # a public table on its unique key, reached from the user's row
    "unique public": "SELECT r.name, SUM(v.amount) FROM visits v JOIN people p "
                     "ON v.uid = p.uid JOIN regions r ON r.region = p.region GROUP BY r.name",
    # an equality in WHERE (comma joins) passes determination on
    "where": "SELECT r.name, COUNT(*) FROM people p, visits v, regions r "
             "WHERE p.uid = v.uid AND r.region = p.region GROUP BY r.name",
    # a derived table grouped by the user alone has one row per user
    "derived": "SELECT n, COUNT(*) FROM (SELECT uid, COUNT(*) AS n FROM visits "
               "GROUP BY uid) t GROUP BY n",
    "expression": "SELECT CASE WHEN p.code = 'a' THEN p.region ELSE 0 END AS k, COUNT(*) "
                  "FROM visits v JOIN people p ON v.uid = p.uid GROUP BY k",
}

NOT_DETERMINED = {
    "visit region": "SELECT region, COUNT(*) FROM visits GROUP BY region",
    # labels repeats region 1: the same user's rows get two labels
    "non-unique public": "SELECT l.label, COUNT(*) FROM visits v JOIN people p "
                         "ON v.uid = p.uid JOIN labels l ON l.region = p.region "
                         "GROUP BY l.label",
    # the right side of a LEFT JOIN is never taken as the user's own row (here every
    # user's rows do share one code, NULL for uid 3, but the rule cannot know that)
    "left join": "SELECT p.code, COUNT(*) FROM visits v LEFT JOIN people p "
                 "ON v.uid = p.uid GROUP BY p.code",
    "mixed keys": "SELECT p.region, v.region, COUNT(*) FROM visits v JOIN people p "
                  "ON v.uid = p.uid GROUP BY p.region, v.region",
    "derived per visit": "SELECT n, COUNT(*) FROM (SELECT uid, vid, COUNT(*) AS n "
                         "FROM visits GROUP BY uid, vid) t GROUP BY n",
}


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    path = tmp_path_factory.mktemp("determined") / "db.duckdb"
    con = duckdb.connect(str(path))
    con.execute(SETUP)
    con.close()
    c = dpsql.connect(path, catalog=CATALOG, ledger=":memory:", budget=(1e6, 0.1))
    yield c
    c.close()


def _plan(conn, sql):
    plan, expression, backend = prepare(conn, sql, 1.0, 1e-6, None, None)
    return plan, expression, backend


def _groups_per_user(backend, expression, plan) -> int:
    """Most groups any user's bounded rows reach, from the rewritten SQL itself."""
    source = "__bounded" if plan.bound_groups else "__per_user"
    probe = expression.copy()
    probe.set("expressions", [exp.Max(this=exp.column("c"))])
    probe.set("from_", None)
    probe.set("group", None)
    probe.set("order", None)
    probe = probe.from_(f"(SELECT __uid, COUNT(*) AS c FROM {source} GROUP BY __uid) AS g")
    _, rows = backend.execute(probe)
    return rows[0][0]


@pytest.mark.parametrize("name", list(DETERMINED))
def test_user_determined_keys_get_one_group(conn, name):
    plan, expression, backend = _plan(conn, DETERMINED[name])
    assert plan.max_groups == 1 and not plan.bound_groups
    assert "ROW_NUMBER" not in backend.to_sql(expression)
    assert _groups_per_user(backend, expression, plan) == 1


@pytest.mark.parametrize("name", list(NOT_DETERMINED))
def test_other_keys_keep_the_catalog_bound(conn, name):
    plan, expression, backend = _plan(conn, NOT_DETERMINED[name])
    assert plan.max_groups > 1
    reached = _groups_per_user(backend, expression, plan)
    assert reached <= plan.max_groups
    if name != "left join":  # the data do give a user several groups: the bound binds
        assert reached > 1


def test_every_user_within_the_planned_groups_on_all_queries(conn):
    for sql in [*DETERMINED.values(), *NOT_DETERMINED.values()]:
        plan, expression, backend = _plan(conn, sql)
        assert _groups_per_user(backend, expression, plan) <= plan.max_groups, sql


def test_one_group_scales_noise_down(conn):
    """Noise for one group per user: max_groups (3) times smaller than the catalog's."""
    one, _, _ = _plan(conn, DETERMINED["people"])
    three, _, _ = _plan(conn, NOT_DETERMINED["visit region"])
    count_one = one.stat(one.cells[0].stats[0]).mechanism.accuracy(0.05)
    count_three = three.stat(three.cells[0].stats[0]).mechanism.accuracy(0.05)
    assert count_three == pytest.approx(3 * count_one, rel=0.05)


def test_without_the_database_constraint_the_rule_does_not_apply(tmp_path):
    path = tmp_path / "db.duckdb"
    con = duckdb.connect(str(path))
    con.execute(SETUP.replace("uid INTEGER PRIMARY KEY", "uid INTEGER")
                .replace("region INTEGER PRIMARY KEY", "region INTEGER"))
    con.execute("INSERT INTO people VALUES (1, 2, 1.0, 'a')")  # uid 1 twice
    con.close()
    c = dpsql.connect(path, catalog=CATALOG, ledger=":memory:", budget=(1e6, 0.1))
    plan, expression, backend = _plan(c, DETERMINED["people"])
    assert plan.max_groups == 3  # the domain has 3 regions: no window needed either
    assert _groups_per_user(backend, expression, plan) == 2
    c.close()


def test_explain_says_why_the_noise_is_smaller(conn):
    text = str(conn.explain(DETERMINED["unique public"], epsilon=1.0, delta=1e-6))
    assert "max_groups=1" in text and "determined by the user's own row" in text
    assert "determined" not in str(conn.explain(NOT_DETERMINED["visit region"], epsilon=1.0))
