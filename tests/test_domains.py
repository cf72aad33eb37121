"""Public key domains: bounded int columns, and WHERE restricting the released keys.

Two rules of :mod:`dpsql.analyze.domains`, tested through the engine against exact
answers (the noise switched off, as in the neighbour oracle) and DuckDB's own answers:

* an ``int`` column with ``lower``/``upper`` bounds (at most ``max_int_domain`` keys)
  has a public domain: ``GROUP BY age`` releases all 101 ages with no partition
  selection and no δ, and never a key outside the bounds;
* conditions over public-domain keys (WHERE conjuncts, INNER JOIN ON conjuncts) are
  evaluated on the domains alone, so only keys that can satisfy them are released.
"""

from __future__ import annotations

import dataclasses

import duckdb
import pytest
from sqlglot import parse_one

import dpsql
from dpsql.analyze.domains import column_values, domain, released_groups
from dpsql.backends.loaders import copy_tables
from dpsql.catalog import Column, load_catalog
from dpsql.datasets import pums_catalog
from dpsql.limits import DEFAULT, Limits
from dpsql.noise import add_noise
from tests.privacy.oracle import Neighbours, World, fixed_seed, noise_off
from tests.support import checked, prepare


def exact(conn, sql, epsilon=1.0, delta=1e-6):
    """The released keys and their exact first statistic (the noise off), and the plan."""
    with fixed_seed():
        plan, expression, backend = prepare(conn, sql, epsilon, delta, None, None)
        expression, _ = checked(conn, plan, expression, backend)
    columns, rows = backend.execute(expression) if plan.stats else ([], [])
    with noise_off(plan):
        groups = add_noise(plan, columns, rows)
    first = plan.stats[0].name
    return dict(zip(groups.keys, groups.stats[first], strict=True)), plan


# -- item 2: an int column's bounds are a public domain -----------------------------------

def test_group_by_bounded_int_releases_every_key_without_delta(connect):
    conn = connect()
    res = conn.execute("SELECT age, COUNT(*) FROM pums GROUP BY age", epsilon=0.5, delta=1e-6)
    assert [r[0] for r in res.rows] == list(range(101))
    assert res.cost == (0.5, 0.0)  # no partition selection, so no delta spent
    res = conn.execute("SELECT age, COUNT(*) FROM pums GROUP BY age", epsilon=0.5)  # delta 0
    assert len(res.rows) == 101


def test_bounded_int_domain_is_exact_whatever_the_data(tmp_path):
    """Keys are the bounds' whole numbers: rows outside them (or NULL in a column not
    declared nullable) count nowhere, and a key only the data hold is never released."""
    path = tmp_path / "t.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (uid INTEGER, age INTEGER, n INTEGER)")
    con.execute("INSERT INTO t VALUES (1, 0, 0), (2, 2, 0), (3, 2, NULL), (4, 5, 1), "
                "(5, -1, 1), (6, NULL, 0), (7, 3, 0), (8, 4, 0)")
    con.close()
    catalog = {"tables": {"t": {"user_key": "uid", "columns": {
        "uid": "int", "age": {"type": "int", "lower": 0, "upper": 3},
        "n": {"type": "int", "lower": 0, "upper": 1, "nullable": True}}}}}
    conn = dpsql.connect(path, catalog=catalog, budget=(100, 1e-3), ledger=":memory:")
    counts, plan = exact(conn, "SELECT age, COUNT(*) FROM t GROUP BY age")
    assert counts == {(0,): 1, (1,): 0, (2,): 2, (3,): 1}
    assert plan.selection is None and plan.delta == 0
    # a nullable bounded column has the key NULL too
    counts, _ = exact(conn, "SELECT n, COUNT(*) FROM t GROUP BY n")
    assert counts == {(0,): 5, (1,): 2, (None,): 1}
    # through an expression: the keys are the image of the bounds, and (as for a values
    # list) a row counts where its key lies in that image: age -1 gives 0 (// truncates),
    # age 4 gives 2, outside [0, 3] // 2, and is left out
    counts, _ = exact(conn, "SELECT age // 2 AS h, COUNT(*) FROM t GROUP BY h")
    assert counts == {(0,): 2, (1,): 3}
    conn.close()


def test_a_unique_user_key_keeps_exactly_the_domains_rows(tmp_path):
    """A unique user key (no per-user step, dpsql.rewrite.restrict_domains): values
    outside the domain, NULL and near-spellings count nowhere."""
    path = tmp_path / "t.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (uid INTEGER PRIMARY KEY, seg VARCHAR, age INTEGER, "
                "v DOUBLE)")
    con.execute("INSERT INTO t VALUES (1, 'a', 0, 1), (2, 'b', 2, 2), (3, 'a ', 3, 4), "
                "(4, 'A', 5, 8), (5, NULL, -1, 16), (6, 'b', NULL, 32), (7, 'c', 3, 64), "
                "(8, 'a', 1, 128)")
    con.close()
    catalog = {"tables": {"t": {"user_key": "uid", "columns": {
        "uid": "int", "seg": {"type": "string", "values": ["a", "b"]},
        "age": {"type": "int", "lower": 0, "upper": 3},
        "v": {"type": "float", "lower": 0, "upper": 200}}}}}
    conn = dpsql.connect(path, catalog=catalog, budget=(100, 1e-3), ledger=":memory:")
    sql = conn.explain("SELECT seg, COUNT(*) FROM t GROUP BY seg", epsilon=1.0).sql
    assert "__per_user" not in sql and "seg IN ('a', 'b')" in sql, sql
    counts, _ = exact(conn, "SELECT seg, COUNT(*) FROM t GROUP BY seg")
    assert counts == {("a",): 2, ("b",): 2}
    sums, _ = exact(conn, "SELECT seg, SUM(v) FROM t GROUP BY seg")
    assert sums == {("a",): 129, ("b",): 34}
    counts, _ = exact(conn, "SELECT age, COUNT(*) FROM t GROUP BY age")
    assert counts == {(0,): 1, (1,): 1, (2,): 1, (3,): 2}
    counts, _ = exact(conn, "SELECT seg, age, COUNT(*) FROM t GROUP BY seg, age")
    assert counts == {("a", 0): 1, ("a", 1): 1, ("a", 2): 0, ("a", 3): 0, ("b", 0): 0,
                      ("b", 1): 0, ("b", 2): 1, ("b", 3): 0}
    conn.close()
    # five values and NULL: written as short IN lists joined by OR, the same rows
    catalog["tables"]["t"]["columns"]["seg"] = {
        "type": "string", "values": ["a", "b", "A", "x", "y"], "nullable": True}
    conn = dpsql.connect(path, catalog=catalog, budget=(100, 1e-3), ledger=":memory:")
    sql = conn.explain("SELECT seg, COUNT(*) FROM t GROUP BY seg", epsilon=1.0).sql
    assert "seg IN ('a', 'b', 'A', 'x') OR seg IN ('y') OR seg IS NULL" in sql, sql
    counts, _ = exact(conn, "SELECT seg, COUNT(*) FROM t GROUP BY seg")
    assert counts == {("a",): 2, ("b",): 2, ("A",): 1, ("x",): 0, ("y",): 0, (None,): 1}
    conn.close()


def test_neighbour_with_keys_outside_the_bounds_changes_no_key():
    """D′ adds a user with ages outside the bounds and in them: the released keys are
    the same on D and D′ and each statistic moves within its sensitivity."""
    world = World(
        catalog={"tables": {"t": {"user_key": "uid", "max_groups": 2, "max_rows": 2,
                                  "columns": {"uid": "int", "race": {
                                      "type": "int", "values": [1, 2, 3]},
                                      "age": {"type": "int", "lower": 0, "upper": 9}}}}},
        schema=["CREATE TABLE t (uid INTEGER, age INTEGER, race INTEGER)"],
        data=["INSERT INTO t VALUES (1, 3, 1), (2, 4, 2), (3, 9, 3)"],
        attacker=["INSERT INTO t VALUES " + ", ".join(
            f"(99, {a}, {r})" for a in (-3, 0, 1, 2, 5, 10, 11, 500) for r in (1, 2, 4))])
    with Neighbours(world) as n:
        for sql in ["SELECT age, COUNT(*) FROM t GROUP BY age",
                    "SELECT age, race, COUNT(*), SUM(age) FROM t GROUP BY age, race",
                    "SELECT age // 3 AS a, COUNT(*) FROM t WHERE age > 4 GROUP BY a",
                    "SELECT race, COUNT(*) FROM t WHERE race IN (1, 4) AND age < 3 "
                    "GROUP BY race",
                    "SELECT age, COUNT(*) FROM t WHERE age = 10 OR age < 2 GROUP BY age"]:
            out = n.check(sql)
            assert out.answered and not out.violations, (sql, out.violations)


def test_domain_limit_is_the_owners(tmp_path):
    assert Limits().max_int_domain == 5000
    wide = Column("x", "int", 0, 5000)  # 5001 keys: over the default
    assert column_values(wide) is None
    assert len(column_values(wide, limits=Limits(max_int_domain=5001))) == 5001
    assert column_values(Column("x", "int", 0, 9), limits=Limits(max_int_domain=0)) is None
    assert column_values(Column("x", "float", 0, 9)) is None  # floats have no finite domain
    cat = load_catalog({"limits": {"max_int_domain": 0}, "tables": {"t": {
        "row_privacy": True, "columns": {"age": {"type": "int", "lower": 0, "upper": 9}}}}})
    assert domain(parse_one("age"), lambda c: cat.table("t").column("age"),
                  cat.limits) is None


def test_over_the_limit_keys_come_from_the_data(connect):
    catalog = pums_catalog()
    narrow = dataclasses.replace(catalog, budget=None, limits=dataclasses.replace(
        catalog.limits, max_int_domain=100))  # age has 101 keys
    conn = connect(catalog=narrow)
    with pytest.raises(dpsql.PrivacyParameterError, match="needs delta > 0"):
        conn.execute("SELECT age, COUNT(*) FROM pums GROUP BY age", epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
    plan = conn.explain("SELECT age // 10, COUNT(*) FROM pums GROUP BY 1", epsilon=1.0,
                        delta=1e-6)
    assert plan.partition_selection is not None


def test_expressions_over_bounded_ints(connect):
    conn = connect()
    for sql, keys in [
        ("SELECT age // 10 AS d, COUNT(*) FROM pums GROUP BY d", list(range(11))),
        ("SELECT CASE WHEN age < 18 THEN 'minor' ELSE 'adult' END AS g, COUNT(*) FROM pums "
         "GROUP BY g", ["adult", "minor"]),
        ("SELECT age / 50 AS h, COUNT(*) FROM pums GROUP BY h",
         [i / 50 for i in range(101)]),
    ]:
        counts, plan = exact(conn, sql)
        assert [k[0] for k in counts] == keys and plan.selection is None


def test_max_groups_is_capped_by_the_released_keys(connect):
    conn = connect()
    plan = conn.explain("SELECT race, COUNT(*) FROM pums_dup WHERE race IN (1, 2) "
                        "GROUP BY race", epsilon=1.0, max_groups=5)
    # two keys can be released, so a user reaches at most two of them: no L0 window
    assert "__bounded" not in plan.sql
    assert plan.statistics[0]["scale"] == 2 * 3  # L1 = 2 groups x max_rows 3, epsilon 1
    counts, p = exact(conn, "SELECT race, COUNT(*) FROM pums_dup WHERE race IN (1, 2) "
                      "GROUP BY race")
    assert p.max_groups == 1 and len(counts) == 2


def test_domain_cells_limit_counts_the_released_keys(connect):
    catalog = pums_catalog()
    small = dataclasses.replace(catalog, budget=None, limits=dataclasses.replace(
        catalog.limits, max_domain_cells=500))
    conn = connect(catalog=small)
    with pytest.raises(dpsql.UnsupportedQueryError, match="max_domain_cells"):
        conn.explain("SELECT age, race, COUNT(*) FROM pums GROUP BY age, race", epsilon=1.0)
    # WHERE leaves 2 x 21 combinations of the 606
    ex = conn.explain("SELECT age, race, COUNT(*) FROM pums WHERE race IN (1, 2) "
                      "AND age BETWEEN 20 AND 40 GROUP BY age, race", epsilon=1.0)
    assert ex.cost == (1.0, 0.0)


# -- item 4: WHERE restricts the released public keys -------------------------------------

#: (query's WHERE and GROUP BY, the keys it must release). All answers are compared with
#: DuckDB's exact answer on the same data as well.
CASES = [
    ("WHERE race IN (1, 2) GROUP BY race", [(1,), (2,)]),
    ("WHERE sex = 1 GROUP BY sex", [(1,)]),
    ("WHERE race < 3 GROUP BY race", [(1,), (2,)]),
    ("WHERE race > 2.5 GROUP BY race", [(3,), (4,), (5,), (6,)]),
    ("WHERE race NOT IN (1, 2) GROUP BY race", [(3,), (4,), (5,), (6,)]),
    ("WHERE NOT (race >= 2) GROUP BY race", [(1,)]),
    ("WHERE age BETWEEN 20 AND 25 GROUP BY age", [(a,) for a in range(20, 26)]),
    ("WHERE age >= 18 GROUP BY age", [(a,) for a in range(18, 101)]),
    ("WHERE age >= 18 GROUP BY age // 10", [(d,) for d in range(1, 11)]),
    ("WHERE age // 10 = 3 GROUP BY age // 10", [(3,)]),
    ("WHERE age >= 18 GROUP BY CASE WHEN age < 18 THEN 'minor' ELSE 'adult' END",
     [("adult",)]),
    ("WHERE race = 1 AND sex = 0 OR race = 3 GROUP BY race, sex", [(1, 0), (3, 0), (3, 1)]),
    ("WHERE (race = 1 OR race = 2) AND sex <> 0 GROUP BY race, sex", [(1, 1), (2, 1)]),
    ("WHERE race = sex GROUP BY race, sex", [(1, 1)]),
    ("WHERE married = 1 AND sex = 0 GROUP BY married, sex", [(1, 0)]),
    ("WHERE educ > 14 AND age < 20 GROUP BY educ, age // 10",
     [(15, 0), (15, 1), (16, 0), (16, 1)]),
    # three-valued logic: a NULL condition keeps no row
    ("WHERE race IN (1, NULL) GROUP BY race", [(1,)]),
    ("WHERE race NOT IN (1, NULL) GROUP BY race", []),
    ("WHERE race IS NULL GROUP BY race", []),
    ("WHERE race IS DISTINCT FROM 1 GROUP BY race", [(2,), (3,), (4,), (5,), (6,)]),
    ("WHERE race <> 1 OR race IS NULL GROUP BY race", [(2,), (3,), (4,), (5,), (6,)]),
    ("WHERE race > 6 GROUP BY race", []),  # (race IN (7) is refused: no public value)
    # a conjunct over other columns is not used; the others are
    ("WHERE race = 1 AND income > 1000 GROUP BY race", [(1,)]),
    # not evaluable exactly: every key, as before
    ("WHERE race = 1 OR income > 1000 GROUP BY race", [(r,) for r in range(1, 7)]),
    ("WHERE sex = 1 GROUP BY race", [(r,) for r in range(1, 7)]),  # sex is no key
    ("WHERE age + 0 >= 99 GROUP BY age", [(a,) for a in range(101)]),
    ("WHERE race = '1' GROUP BY race", [(r,) for r in range(1, 7)]),  # types differ
]


@pytest.mark.parametrize(("tail", "keys"), CASES, ids=[c[0] for c in CASES])
def test_where_restricts_public_keys_exactly(connect, pums_db, tail, keys):
    conn = connect()
    group = tail.split("GROUP BY ")[1]
    sql = f"SELECT {group}, COUNT(*) FROM pums {tail}"
    counts, plan = exact(conn, sql)
    assert list(counts) == keys
    assert plan.selection is None
    truth = {tuple(r[:-1]): r[-1] for r in pums_db.execute(sql).fetchall()}
    # no key holding data is dropped, and every released count is DuckDB's exact one
    assert set(truth) <= set(counts), set(truth) - set(counts)
    assert counts == {k: truth.get(k, 0) for k in counts}


@pytest.fixture(scope="module")
def sqlite_pums(pums_db, tmp_path_factory):
    """The PUMS tables copied into SQLite."""
    path = tmp_path_factory.mktemp("sqlite") / "pums.db"
    copy_tables(pums_db, f"sqlite:///{path}", ["pums", "pums_dup"])
    return f"sqlite:///{path}"


def test_where_restricted_keys_on_sqlite(connect, sqlite_pums, pums_db):
    """The same released keys and exact counts on SQLite as DuckDB's answer."""
    conn = connect(database=sqlite_pums)
    # (comparing across types, e.g. race = '1', differs between SQLite and DuckDB: such
    # conditions are never evaluated on the domains, and are left out here)
    for tail, keys in [c for c in CASES if "income" not in c[0] and "'1'" not in c[0]]:
        group = tail.split("GROUP BY ")[1]
        sql = f"SELECT {group}, COUNT(*) FROM pums {tail}"
        counts, _ = exact(conn, sql)
        assert list(counts) == keys, sql
        truth = {tuple(r[:-1]): r[-1] for r in pums_db.execute(sql).fetchall()}
        assert counts == {k: truth.get(k, 0) for k in counts}, sql


def test_inner_join_on_restricts_and_left_join_on_does_not(connect, pums_db):
    conn = connect()
    # a LEFT JOIN NULL-extends the rows its ON rejects: their group, NULL, is a key too
    for join, keys in [("JOIN", [1, 2]), ("LEFT JOIN", [1, 2, 3, 4, 5, 6, None])]:
        sql = (f"SELECT b.race, COUNT(*) FROM pums a {join} pums b ON a.pid = b.pid "
               "AND b.race IN (1, 2) GROUP BY b.race")
        counts, _ = exact(conn, sql)
        assert [k[0] for k in counts] == keys
        truth = dict(pums_db.execute(sql).fetchall())
        assert all(counts[(k,)] == truth.get(k, 0) for k in keys)
    # WHERE on a LEFT JOIN's column: NULL-extended rows fail it, so it restricts
    sql = ("SELECT b.race, COUNT(*) FROM pums a LEFT JOIN pums_dup b ON a.pid = b.pid "
           "WHERE b.race IN (1, 2) GROUP BY b.race")
    counts, _ = exact(conn, sql)
    assert [k[0] for k in counts] == [1, 2]
    # a LEFT JOIN's column can be NULL whatever its catalog entry says: a key computed
    # from it is not enumerated from its domain (else key 1, which holds the rows with
    # no match, would be dropped as unable to satisfy IS NULL)
    sql = ("SELECT COALESCE(b.race, 1) AS r, COUNT(*) FROM pums a LEFT JOIN pums b "
           "ON a.pid = b.pid AND b.sex = 1 WHERE b.race IS NULL GROUP BY r")
    counts, _ = exact(conn, sql)
    truth = dict(pums_db.execute(sql).fetchall())
    assert truth[1] > 0 and counts[(1,)] == truth[1]


def test_release_through_the_result(connect):
    conn = connect()
    res = conn.execute("SELECT race, COUNT(*) AS n FROM pums WHERE race IN (1, 2) "
                       "GROUP BY race", epsilon=1.0)
    assert [r[0] for r in res.rows] == [1, 2]
    assert any("WHERE leaves 2 of the public key combinations" in n for n in res.notes)
    res = conn.execute("SELECT race, COUNT(*) FROM pums WHERE race > 6 GROUP BY race",
                       epsilon=1.0)
    assert res.rows == []
    res = conn.execute("SELECT age, COUNT(*) FROM pums GROUP BY age", epsilon=1.0)
    assert any("whole numbers of its bounds [0, 100]" in n for n in res.notes)


def test_restricted_keys_are_a_function_of_the_query_and_catalog_only():
    """The released keys are the same on D and D′ whatever the added user holds, and
    the statistics move within their sensitivity."""
    world = World(
        catalog={"tables": {"t": {"user_key": "uid", "max_groups": 3, "max_rows": 1,
                                  "columns": {"uid": "int",
                                              "g": {"type": "int", "values": [1, 2, 3, 4]},
                                              "s": {"type": "string", "values": ["a", "b"],
                                                    "nullable": True},
                                              "x": {"type": "int", "lower": 0, "upper": 20}}}}},
        schema=["CREATE TABLE t (uid INTEGER, g INTEGER, s VARCHAR, x INTEGER)"],
        data=["INSERT INTO t VALUES (1, 1, 'a', 3), (2, 2, 'b', 7), (3, 3, NULL, 20)"],
        attacker=["INSERT INTO t VALUES " + ", ".join(
            f"(99, {g}, {s}, {x})" for g in (1, 2, 5) for s in ("'a'", "'c'", "NULL")
            for x in (0, 19, 21))])
    with Neighbours(world) as n:
        for sql in ["SELECT g, COUNT(*) FROM t WHERE g IN (1, 5) GROUP BY g",
                    "SELECT g, s, COUNT(*) FROM t WHERE g < 3 AND s = 'a' OR s IS NULL "
                    "GROUP BY g, s",
                    "SELECT x, COUNT(*) FROM t WHERE x >= 19 GROUP BY x",
                    "SELECT x // 5 AS q, s, SUM(x) FROM t WHERE x > 12 AND s <> 'b' "
                    "GROUP BY q, s",
                    "SELECT g, COUNT(*) FROM t WHERE g NOT IN (2, NULL) GROUP BY g"]:
            out = n.check(sql)
            assert out.answered and not out.violations, (sql, out.violations)


# -- released_groups on its own: what is and is not evaluated -------------------------------

COLS = {
    "race": Column("race", "int", values=(1, 2, 3)),
    "state": Column("state", "string", values=("ca", "ny")),
    "age": Column("age", "int", 0, 100),
    "d": Column("d", "date", __import__("datetime").date(2020, 1, 1),
                __import__("datetime").date(2020, 12, 31)),
    "name": Column("name", "string"),
}


def _groups(keys, where, limits=DEFAULT):
    exprs = [parse_one(k, read="duckdb") for k in keys]
    lookup = lambda c: COLS[c.name]  # noqa: E731
    doms = [domain(e, lookup, limits) for e in exprs]
    return released_groups(list(zip(exprs, doms, strict=True)),
                           [parse_one(where, read="duckdb")], lookup, limits)


@pytest.mark.parametrize(("keys", "where", "expected"), [
    (["state"], "state = 'ca'", [("ca",)]),
    (["state"], "state IN ('ny', 'tx')", [("ny",)]),
    (["MONTH(d)"], "d >= DATE '2020-11-15'", [(11,), (12,)]),
    (["date_trunc('month', d)"], "d < DATE '2020-02-01'",
     [(__import__("datetime").datetime(2020, 1, 1),)]),
    (["race"], "race = 1 OR race = 3", [(1,), (3,)]),
    # text over ASCII, and ordered strings of lower-case letters: one meaning everywhere
    (["state"], "state < 'd'", [("ca",)]),
    (["state"], "UPPER(state) = 'CA'", [("ca",)]),
    (["state"], "state LIKE 'n%'", [("ny",)]),
    (["state"], "state NOT LIKE 'n%'", [("ca",)]),
    (["state"], "state ILIKE 'N_'", [("ny",)]),
    # SQLite's LIKE ignores case: either reading's keys are kept
    (["state"], "state LIKE 'N%'", [("ny",)]),
    (["state"], "state NOT LIKE 'N%'", [("ca",), ("ny",)]),
    (["d"], "d BETWEEN '2020-12-30' AND '2020-12-31'",
     [(__import__("datetime").date(2020, 12, 30),), (__import__("datetime").date(2020, 12, 31),)]),
    # keys 0 and 2 read one column, so they are enumerated together; still in the order
    # of the product of the domains
    (["race", "state", "race * 10"], "race <> 2",
     [(1, "ca", 10), (1, "ny", 10), (3, "ca", 30), (3, "ny", 30)]),
])
def test_evaluated_conditions(keys, where, expected):
    assert list(_groups(keys, where)) == expected


@pytest.mark.parametrize(("keys", "where"), [
    (["state"], "state < 'D'"),  # mixed case: the order depends on the collation
    (["state"], "state < 'c1'"),  # digits: some collations order them differently
    (["state"], "state = 'ca '"),  # CHAR(n) pads with spaces in PostgreSQL
    (["state"], "LOWER(state) = 'é'"),  # case mapping beyond ASCII differs
    (["state"], "state LIKE 'c\\%'"),  # a backslash escapes in PostgreSQL and Spark
    (["state"], "LENGTH(state) = 2"),  # a function outside the evaluated set
    (["d"], "d < '2020-1-5'"),  # a date text that is not strict ISO
    (["race"], "race = '1'"),  # a number compared with a string
    (["race"], "name = 'x'"),  # a column that is no key's input
    (["race"], "race IN (SELECT 1)"),
    (["UPPER(name)"], "name = 'x'"),  # a key from the data
])
def test_conditions_not_evaluated_keep_every_key(keys, where):
    assert _groups(keys, where) is None


def test_evaluation_is_bounded_by_the_owners_limits():
    # 101 input combinations over max_domain_inputs: the keys stay as they were
    assert _groups(["age"], "age > 50", Limits(max_domain_inputs=100)) is None
    assert len(_groups(["age"], "age > 50", Limits(max_domain_inputs=101))) == 50
    assert _groups(["age"], "age > 50", Limits(max_domain_work=1000)) is None


@pytest.mark.parametrize(("ctype", "domain", "inside", "outside", "sqltype"), [
    ("float", [0, 1, 2, 3], "1.0", "0.5", "DOUBLE"),
    ("timestamp", ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"],
     "'2024-01-02 00:00:00'", "'2024-01-02 12:00:00'", "TIMESTAMP"),
])
def test_a_value_between_domain_values_takes_no_max_groups_place(tmp_path, ctype, domain,
                                                                inside, outside, sqltype):
    """Attack review: a run of whole numbers (days) was written BETWEEN whatever the
    column's type, so a float column's 0.5 (a timestamp's noon) passed the domain filter
    and made a group that, never released, took one of its user's max_groups places."""
    import datetime

    from tests.privacy.oracle import fixed_seed
    from tests.support import checked, prepare

    values = [datetime.date.fromisoformat(v) for v in domain] if ctype == "timestamp" \
        else domain
    catalog = {"dataset": "x", "tables": {"b": {
        "user_key": "uid", "max_groups": 1, "max_rows": 5,
        "columns": {"uid": {"type": "int"}, "g": {"type": ctype, "values": values}}}}}
    path = tmp_path / "d.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE b (uid INTEGER, g {sqltype})")
    con.execute("INSERT INTO b VALUES " + ", ".join(
        f"({u}, {outside}), ({u}, {inside})" for u in range(1, 41)))
    con.close()
    conn = dpsql.connect(str(path), catalog=catalog, budget=(1e9, 0.9), ledger=":memory:",
                         plan_cache=False)
    try:
        with fixed_seed():
            plan, expression, backend = prepare(conn, "SELECT g, COUNT(*) FROM b GROUP BY g")
        expression, _ = checked(conn, plan, expression, backend)
        _, rows = backend.execute(expression)
    finally:
        conn.close()
    assert [r[1] for r in rows] == [40], rows  # every user's in-domain row, one group


def test_negative_literals_compared_with_a_public_domain(tmp_path):
    """``-2`` is a literal too (attack review: ``IN (1, -2)`` was an internal error)."""
    path = tmp_path / "n.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (uid INTEGER PRIMARY KEY, n INTEGER)")
    con.execute("INSERT INTO t SELECT i, i % 5 - 2 FROM range(100) r(i)")
    con.close()
    catalog = {"tables": {"t": {"user_key": "uid", "columns": {
        "uid": "int", "n": {"type": "int", "values": [-2, -1, 0, 1, 2]}}}}}
    conn = dpsql.connect(path, catalog=catalog, budget=(100, 1e-3), ledger=":memory:")
    counts, _ = exact(conn, "SELECT n, COUNT(*) FROM t WHERE n IN (1, -2) GROUP BY n")
    assert counts == {(-2,): 20, (1,): 20}
    with pytest.raises(dpsql.AnalysisError, match="not one of its public values"):
        conn.execute("SELECT n, COUNT(*) FROM t WHERE n = -3 GROUP BY n", epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)
    conn.close()
