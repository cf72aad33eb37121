"""Queries that cannot match or cannot release: refused before the charge, for free.

Issue #22, item 4, on a two-table data set as a new analyst met it (300 people, their
visits with public ``department`` values, a bounded ``visit_date``, ``max_groups: 4``,
``max_rows: 10``) and on the bundled PUMS:

* a literal outside a ``values`` list (``department = 'Cardiology'`` when the public
  values are lower-case) is refused naming the nearest public values;
* a text column against a number, in either direction (``sex = 1``; ``department > 1``
  was "could not plan"), names the column and both types;
* a text that is no date (``visit_date < '2024-02-30'``, answered 0 and charged before);
* ``GROUP BY`` the user key (charged, never a row) is refused;
* a bounded DATE column is a public domain at day grain (``GROUP BY visit_date``
  released nothing before), and LIKE, ``starts_with``, ``lower()``, string order and
  date texts over public-domain keys release only the keys that can match.

Every refusal is asserted through its text and through the ledger: nothing was spent.
Every refusal is also the same on D, on D′ (one more user whose rows match it) and on an
empty database: it reads the query and the catalog, never the rows.
"""

from __future__ import annotations

import datetime
import random

import duckdb
import pandas as pd
import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy.dialects import registry

import dpsql
from dpsql.errors import DpsqlError
from tests.privacy.oracle import Neighbours, World, fixed_seed, noise_off
from tests.support import checked, prepare

DEPARTMENTS = ["cardiology", "emergency", "neurology", "oncology"]
FIRST, LAST = datetime.date(2024, 1, 1), datetime.date(2024, 3, 31)

CATALOG = {"dataset": "clinic", "tables": {
    "people": {"user_key": "pid", "columns": {
        "pid": {"type": "int"},
        "age": {"type": "int", "lower": 0, "upper": 100},
        "sex": {"type": "string", "values": ["f", "m"]}}},
    "visits": {"user_key": "pid", "max_groups": 4, "max_rows": 10, "columns": {
        "pid": {"type": "int"},
        "department": {"type": "string", "values": DEPARTMENTS},
        "code": {"type": "string"},
        "visit_date": {"type": "date", "lower": str(FIRST), "upper": str(LAST)},
        "cost": {"type": "float", "lower": 0, "upper": 1000}}}}}

SCHEMA = ["CREATE TABLE people (pid INTEGER, age INTEGER, sex VARCHAR)",
          "CREATE TABLE visits (pid INTEGER, department VARCHAR, code VARCHAR, "
          "visit_date DATE, cost DOUBLE)"]


def _rows(people: int = 300, seed: int = 22) -> tuple[list, list]:
    rng = random.Random(seed)
    persons = [(i, rng.randint(0, 90), rng.choice("fm")) for i in range(people)]
    visits = []
    for i in range(people):
        for _ in range(rng.randint(1, 12)):
            day = FIRST + datetime.timedelta(days=rng.randint(0, (LAST - FIRST).days))
            visits.append((i, rng.choice(DEPARTMENTS), rng.choice(["1", "a7", "x"]), day,
                           round(rng.uniform(0, 1000), 2)))
    return persons, visits


@pytest.fixture(scope="module")
def clinic_file(tmp_path_factory):
    """The two-table data set in a DuckDB file."""
    path = tmp_path_factory.mktemp("clinic") / "clinic.duckdb"
    con = duckdb.connect(str(path))
    for statement in SCHEMA:
        con.execute(statement)
    persons, visits = _rows()
    con.executemany("INSERT INTO people VALUES (?, ?, ?)", persons)
    con.executemany("INSERT INTO visits VALUES (?, ?, ?, ?, ?)", visits)
    con.close()
    return path


@pytest.fixture
def clinic(clinic_file, tmp_path):
    conn = dpsql.connect(clinic_file, catalog=CATALOG, budget=(100.0, 1e-3),
                         ledger=str(tmp_path / "ledger.sqlite"))
    yield conn
    conn.close()


#: (query, fragments the refusal must contain)
REFUSALS = [
    ("SELECT COUNT(*) FROM visits WHERE department = 'Cardiology'",
     ["department = 'Cardiology'", "not one of its public values",
      "nearest public value: 'cardiology'", "nothing was charged"]),
    ("SELECT COUNT(*) FROM visits WHERE department IN ('Oncology', 'ER')",
     ["'Oncology'", "nearest public value: 'oncology'"]),
    ("SELECT department, COUNT(*) FROM visits WHERE 'neurologie' = department "
     "GROUP BY department", ["'neurologie'", "'neurology'"]),
    ("SELECT COUNT(*) FROM people WHERE sex = 1",
     ["column 'sex' (string)", "the number 1", "sex = '1'", "nothing was charged"]),
    ("SELECT COUNT(*) FROM people WHERE 1 = sex", ["column 'sex' (string)", "the number 1"]),
    # DuckDB refused to plan these ("could not plan"); a column without values too
    ("SELECT COUNT(*) FROM visits WHERE department > 1",
     ["column 'department' (string)", "the number 1"]),
    ("SELECT COUNT(*) FROM visits WHERE code BETWEEN 1 AND 2",
     ["column 'code' (string)", "the number 1", "code = '1'"]),
    ("SELECT COUNT(*) FROM visits WHERE visit_date < '2024-02-30'",
     ["visit_date < '2024-02-30'", "column 'visit_date' (date)", "not a valid date",
      "nothing was charged"]),
    ("SELECT COUNT(*) FROM visits WHERE visit_date = '20240105'", ["not a valid date"]),
    ("SELECT COUNT(*) FROM visits WHERE visit_date >= DATE '2024-13-01'",
     ["'2024-13-01'", "not a valid date"]),
    ("SELECT pid, COUNT(*) FROM visits GROUP BY pid",
     ["GROUP BY pid", "user key of table 'visits'", "nothing was charged",
      "SELECT n, COUNT(*) AS users FROM (SELECT pid, COUNT(*) AS n FROM visits GROUP BY "
      "pid) AS per_user GROUP BY n"]),
    ("SELECT p.pid, v.department, COUNT(*) FROM people p JOIN visits v ON p.pid = v.pid "
     "GROUP BY p.pid, v.department", ["GROUP BY p.pid", "user key of table 'people'"]),
    ("SELECT pid, n, COUNT(*) FROM (SELECT pid, COUNT(*) AS n FROM visits GROUP BY pid) "
     "AS per_user GROUP BY pid, n", ["user key of derived table 'per_user'"]),
]


@pytest.mark.parametrize(("sql", "fragments"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refused_before_the_charge(clinic, sql, fragments):
    with pytest.raises(DpsqlError) as info:
        clinic.execute(sql, epsilon=1.0, delta=1e-6)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert clinic.budget.spent == (0.0, 0.0)
    with pytest.raises(DpsqlError):  # explain refuses it the same way, for free
        clinic.explain(sql, epsilon=1.0, delta=1e-6)


def test_refusals_read_no_rows(tmp_path):
    """The same refusal, word for word, on D, on D′ (one more user whose rows match
    the query: 'Cardiology', the text '1', a visit per pid) and on an empty database."""
    persons, visits = _rows(people=40)
    values = lambda rows: ", ".join(  # noqa: E731
        "(" + ", ".join(f"'{v}'" if isinstance(v, str | datetime.date) else str(v)
                        for v in r) + ")" for r in rows)
    attacker = ["INSERT INTO people VALUES (999, 30, '1')",
                "INSERT INTO visits VALUES (999, 'Cardiology', '1', DATE '2024-02-28', 5), "
                "(999, 'oncology', '1', DATE '2024-02-29', 5)"]
    world = World(catalog=CATALOG, schema=SCHEMA,
                  data=[f"INSERT INTO people VALUES {values(persons)}",
                        f"INSERT INTO visits VALUES {values(visits)}"], attacker=attacker)
    empty = tmp_path / "empty.duckdb"
    con = duckdb.connect(str(empty))
    for statement in SCHEMA:
        con.execute(statement)
    con.close()
    bare = dpsql.connect(empty, catalog=CATALOG, budget=(10.0, 1e-3), ledger=":memory:")
    with Neighbours(world) as pair:
        for sql, _ in REFUSALS:
            out = pair.check(sql)
            assert not out.answered and not out.violations, (sql, out.violations)
            with pytest.raises(DpsqlError) as info:
                bare.execute(sql, epsilon=1.0, delta=1e-6)
            # the oracle keeps the type and the first 200 characters of D's refusal
            assert out.refusal == (f"{type(info.value).__name__}: "
                                   f"{str(info.value).splitlines()[0][:200]}"), sql
    assert bare.budget.spent == (0.0, 0.0)
    bare.close()


@pytest.mark.parametrize("sql", [
    # one value of the IN list is public: it can match
    "SELECT COUNT(*) FROM visits WHERE department IN ('cardiology', 'Cardiology')",
    # matches every declared value: answered, as written
    "SELECT COUNT(*) FROM visits WHERE department <> 'Cardiology'",
    "SELECT COUNT(*) FROM visits WHERE NOT department IN ('Cardiology')",
    "SELECT COUNT(*) FROM visits WHERE code = '1'",  # no values list: any text
    "SELECT COUNT(*) FROM people WHERE age = '30'",  # a number written as a text
    "SELECT COUNT(*) FROM visits WHERE visit_date < '2024-2-5'",  # DuckDB reads it
    "SELECT COUNT(*) FROM visits WHERE visit_date < '2024-02-29 12:00:00'",
    "SELECT pid % 10 AS d, COUNT(*) FROM visits GROUP BY d",  # not the user key itself
])
def test_what_can_match_is_answered(clinic, sql):
    clinic.execute(sql, epsilon=0.5, delta=1e-6)
    assert clinic.budget.spent[0] == pytest.approx(0.5)


def test_pums_literal_outside_values_names_the_nearest(connect):
    conn = connect()
    with pytest.raises(DpsqlError, match=r"race = 7 .*public values: 1, 2, 3, 4, 5, 6\).*"
                                         r"nothing was charged.*nearest public values: 6, 5"):
        conn.execute("SELECT COUNT(*) FROM pums WHERE race = 7", epsilon=1.0)
    assert conn.budget.spent == (0.0, 0.0)


def test_pandas_sees_the_refusal_and_nothing_is_spent(clinic_file, tmp_path):
    registry.register("dpsql.duckdb", "dpsql.sqlalchemy_dialect", "DpsqlDuckDBDialect")
    catalog = tmp_path / "clinic.yaml"
    catalog.write_text(yaml.safe_dump({**CATALOG, "budget": {"epsilon": 10, "delta": 1e-3}}))
    ledger = tmp_path / "ledger.sqlite"
    url = sa.engine.URL.create("dpsql+duckdb", database=str(clinic_file), query={
        "catalog": str(catalog), "ledger": str(ledger), "epsilon": "0.5", "delta": "1e-6"})
    engine = sa.create_engine(url)
    try:
        with pytest.raises(Exception, match="nearest public value: 'cardiology'"):
            pd.read_sql("SELECT COUNT(*) AS n FROM visits WHERE department = 'Cardiology'",
                        engine)
        with pytest.raises(Exception, match="user key of table 'visits'"):
            pd.read_sql("SELECT pid, COUNT(*) AS n FROM visits GROUP BY pid", engine)
        df = pd.read_sql("SELECT department, COUNT(*) AS n FROM visits "
                         "WHERE department LIKE 'c%' GROUP BY department", engine)
        assert list(df["department"]) == ["cardiology"]
    finally:
        engine.dispose()
    conn = dpsql.connect(clinic_file, catalog=str(catalog), ledger=str(ledger))
    assert conn.budget.spent == (pytest.approx(0.5), 0.0)  # only the LIKE query
    conn.close()


# -- public domains: a bounded date column, and text predicates over public keys ---------

def _exact(conn, sql, epsilon=1.0, delta=1e-6):
    """The released keys and their exact first statistic (the noise off), and the plan."""
    from dpsql.noise import add_noise

    with fixed_seed():
        plan, expression, backend = prepare(conn, sql, epsilon, delta)
        expression, _ = checked(conn, plan, expression, backend)
    columns, rows = backend.execute(expression)
    with noise_off(plan):
        groups = add_noise(plan, columns, rows)
    first = plan.stats[0].name
    return dict(zip(groups.keys, groups.stats[first], strict=True)), plan


def test_group_by_bounded_date_is_a_public_domain(clinic):
    res = clinic.execute("SELECT visit_date, COUNT(*) AS n FROM visits GROUP BY visit_date",
                         epsilon=1.0, delta=1e-6)
    days = (LAST - FIRST).days + 1
    assert [r[0] for r in res.rows] == [FIRST + datetime.timedelta(days=i)
                                        for i in range(days)]
    assert res.cost == (1.0, 0.0)  # no partition selection, no delta
    assert any("days of its bounds [2024-01-01, 2024-03-31]" in n for n in res.notes)
    assert not any("values:" in n for n in res.notes)
    # the same keys as date_trunc('day', visit_date), which was public already
    ex = clinic.explain("SELECT visit_date, COUNT(*) FROM visits GROUP BY visit_date",
                        epsilon=1.0)
    assert "BETWEEN" in ex.sql and "IN (" not in ex.sql.split("GROUP BY")[0]


def test_group_by_bounded_date_on_sqlite(clinic_file, tmp_path):
    """The day domain's bounds are ISO dates on SQLite too (``DATE('...')``, listed there;
    a CAST to DATE would be refused, and read '2024-01-05' as 2024)."""
    from dpsql.backends.loaders import copy_tables

    path = tmp_path / "clinic.db"
    con = duckdb.connect(str(clinic_file), read_only=True)
    copy_tables(con, f"sqlite:///{path}", ["people", "visits"])
    con.close()
    conn = dpsql.connect(f"sqlite:///{path}", catalog=CATALOG, budget=(100.0, 1e-3),
                         ledger=":memory:")
    res = conn.execute("SELECT visit_date, COUNT(*) AS n FROM visits GROUP BY visit_date",
                       epsilon=1.0, delta=1e-6)
    assert len(res.rows) == (LAST - FIRST).days + 1 and res.cost == (1.0, 0.0)
    assert "DATE('2024-01-01')" in res.sql


PREDICATES = [
    ("department LIKE 'c%'", "department", ["cardiology"]),
    ("starts_with(department, 'c')", "department", ["cardiology"]),
    ("department ^@ 'ne'", "department", ["neurology"]),
    ("department NOT LIKE '%ology'", "department", ["emergency"]),
    ("department ILIKE 'E%'", "department", ["emergency"]),
    ("lower(department) = 'oncology'", "department", ["oncology"]),
    ("upper(department) IN ('ONCOLOGY', 'EMERGENCY')", "department",
     ["emergency", "oncology"]),
    ("department < 'e'", "department", ["cardiology"]),
    ("department BETWEEN 'd' AND 'o'", "department", ["emergency", "neurology"]),
    ("department IN ('oncology', 'neurology')", "department", ["neurology", "oncology"]),
    ("visit_date >= '2024-03-30'", "visit_date", [datetime.date(2024, 3, 30), LAST]),
    ("visit_date BETWEEN DATE '2024-02-28' AND '2024-03-01'", "visit_date",
     [datetime.date(2024, 2, 28), datetime.date(2024, 2, 29), datetime.date(2024, 3, 1)]),
]


@pytest.mark.parametrize(("where", "key", "released"), PREDICATES,
                         ids=[p[0] for p in PREDICATES])
def test_predicates_are_evaluated_on_the_public_domain(clinic, clinic_file, where, key,
                                                       released):
    sql = f"SELECT {key}, COUNT(*) AS n FROM visits WHERE {where} GROUP BY {key}"
    counts, plan = _exact(clinic, sql)
    assert [k[0] for k in counts] == released
    assert plan.selection is None
    con = duckdb.connect(str(clinic_file), read_only=True)
    truth = dict(con.execute(sql.replace("starts_with", "starts_with")).fetchall())
    con.close()
    # no key that holds data is dropped; each released count is the bounded exact one
    assert set(truth) <= {k[0] for k in counts}
    assert all(counts[(k,)] <= truth.get(k, 0) for k in released)
    assert clinic.budget.spent == (0.0, 0.0)


def test_text_predicates_change_no_key_on_a_neighbour():
    """D′ adds a user with departments and dates outside the domains: the released keys
    stay those of the domains, and every statistic moves within its sensitivity."""
    persons, visits = _rows(people=30)
    world = World(
        catalog=CATALOG, schema=SCHEMA,
        data=["INSERT INTO visits VALUES " + ", ".join(
            f"({p}, '{d}', '{c}', DATE '{day}', {x})" for p, d, c, day, x in visits)],
        attacker=["INSERT INTO visits VALUES " + ", ".join(
            f"(999, '{d}', 'x', DATE '{day}', 999)"
            for d in ("cardiology", "Cardiology", "c", "zz", "oncology")
            for day in ("2023-12-31", "2024-01-01", "2024-03-31", "2024-04-01"))])
    with Neighbours(world) as pair:
        for where, key, _ in PREDICATES:
            out = pair.check(f"SELECT {key}, COUNT(*), SUM(cost) FROM visits WHERE {where} "
                             f"GROUP BY {key}")
            assert out.answered and not out.violations, (where, out.violations)
        out = pair.check("SELECT visit_date, department, COUNT(*) FROM visits "
                         "GROUP BY visit_date, department")
        assert out.answered and not out.violations, out.violations
