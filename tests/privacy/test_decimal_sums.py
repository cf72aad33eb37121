"""A sum the engine types as a DECIMAL is added as DECIMALs, exactly (dpsql.decimal_sums).

Each test pins a release or a per-user partial against the exact arithmetic of the
clamped values, computed here in Python's own decimals, so a construction that let a row
past its bound, converted it to a float, or read the exact sum as grid units fails.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.decimal_sums import DecimalSum, decide

LOW, HIGH = Decimal("-1.25"), Decimal("2.5")


def _catalog(max_rows: int) -> dict:
    return {"tables": {"t": {"user_key": "pid", "max_rows": max_rows, "columns": {
        "pid": {"type": "int"}, "g": {"type": "int", "values": [0, 1]},
        "x": {"type": "float", "lower": float(LOW), "upper": float(HIGH), "nullable": True}}}}}


def _table(rows: list[tuple], unique: bool, threads: int | None = None):
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {threads}")
    key = "PRIMARY KEY" if unique else ""
    con.execute(f"CREATE TABLE t (pid INTEGER {key}, g INTEGER, x DECIMAL(15,2))")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    return con


def _grid(stat: dict) -> Fraction:
    """The grid step of a statistic's grid mechanism (as tests/privacy/test_float_sums)."""
    return Fraction(2) ** (math.floor(math.log2(stat["scale"])) - 12)


def _clamped(x: str | None) -> Decimal | None:
    return None if x is None else min(max(Decimal(x), LOW), HIGH)


ROWS = [(0, 0, "0.10"), (1, 1, "2.49"), (2, 0, "7.00"), (3, 1, None), (4, 0, "-3.33"),
        (5, 1, "1.11"), (6, 0, "2.50"), (7, 1, "-1.25")]


def test_one_row_per_user_releases_the_exact_clamped_total(no_noise):
    """Where the database keeps the user key unique, the released SUM is the exact total
    of the clamped DECIMALs rounded once to the grid (rows past a bound count as the
    bound, NULL as nothing), and the AVG's centred sum likewise."""
    con = _table(ROWS, unique=True)
    values = [_clamped(x) for _, _, x in ROWS]
    with dpsql.connect(con, catalog=_catalog(1), budget=(100, 0.5), ledger=":memory:") as conn:
        result = conn.execute("SELECT SUM(x) FROM t", epsilon=1.0)
        assert "DECIMAL(15, 2)" in result.sql and "DOUBLE" not in result.sql, result.sql
        g = _grid(conn.explain("SELECT SUM(x) FROM t", epsilon=1.0).statistics[0])
        total = Fraction(sum(v for v in values if v is not None))
        assert Fraction(result.rows[0][0]) == round(total / g) * g

        avg = conn.execute("SELECT AVG(x) FROM t", epsilon=1.0)
        stats = conn.explain("SELECT AVG(x) FROM t", epsilon=1.0).statistics
        g, center = _grid(stats[0]), Fraction(LOW + HIGH) / 2
        present = [Fraction(v) for v in values if v is not None]
        centred = sum(v - center for v in present)
        expected = center + round(centred / g) * g / len(present)
        assert Fraction(avg.rows[0][0]) == expected


def test_one_user_past_the_bound_moves_the_release_by_at_most_the_units_counted(no_noise):
    def released(rows):
        con = _table(rows, unique=True)
        with dpsql.connect(con, catalog=_catalog(1), budget=(100, 0.5),
                           ledger=":memory:") as conn:
            stat = conn.explain("SELECT SUM(x) FROM t", epsilon=1.0).statistics[0]
            return Fraction(conn.execute("SELECT SUM(x) FROM t", epsilon=1.0).rows[0][0]), stat

    before, stat = released(ROWS)
    after, _ = released([*ROWS, (99, 0, "9999999999999.99")])
    g = _grid(stat)
    counted = math.floor(Fraction(stat["linf"]) / g) + 1
    assert after - before == round(Fraction(HIGH) / g) * g  # the bound, exactly
    assert abs(after - before) / g <= counted


@pytest.mark.parametrize("sql", [
    "SELECT g, SUM(x) FROM t GROUP BY g",
    "SELECT g, AVG(x) FROM t GROUP BY g",
])
def test_every_users_decimal_partial_is_exact_in_any_order(sql):
    """The per-user step's partials, read straight from the checked SQL's ``__per_user``
    step, are the exact sums of the user's clamped DECIMALs as the nearest double (each
    user has at most ``max_rows`` rows here, so no rescale), bit for bit the same with the
    rows stored forwards and backwards (one thread: storage order is the order of
    addition)."""
    from tests.support import checked, prepare

    rng = np.random.default_rng(7)
    rows = [(u, u % 2, f"{x:.2f}") for u in range(300)
            for x in rng.uniform(-2, 3, size=rng.integers(1, 4))]
    answers = []
    for stored in (rows, rows[::-1]):
        con = _table(stored, unique=False, threads=1)
        with dpsql.connect(con, catalog=_catalog(3), budget=(10, 0.5),
                           ledger=":memory:") as conn:
            plan, expression, backend = prepare(conn, sql, 1.0)
            expression, _ = checked(conn, plan, expression, backend)
            stat = plan.stats[0]
            assert stat.decimal is not None and not stat.decimal.top, stat
            assert stat.grid is not None  # the partials' total is gridded as before
            per_user = expression.args["with_"].expressions[0]
            assert per_user.alias == "__per_user", per_user.sql()
            query = per_user.this.sql(dialect="duckdb")
            got = {(r[0], r[1]): r[2] for r in con.execute(query).fetchall()}
            answers.append(got)
            center = Decimal(str(stat.center))
            for (user, _g), partial in got.items():
                exact = sum(_clamped(x) - center for u, _, x in rows if u == user)
                if stat.center:  # times min(n, R) / n = 1 in DOUBLE: within an ulp
                    assert math.isclose(partial, exact, rel_tol=2**-50), (user, partial)
                else:  # the exact sum, then the nearest double
                    assert partial == float(exact), (user, partial, exact)
    assert answers[0] == answers[1]


def test_decide_takes_the_engines_decimal_and_refuses_what_does_not_fit():
    def stat(low, high, center=0.0, linf=None):
        linf = max(abs(low - center), abs(high - center)) if linf is None else linf
        return SimpleNamespace(interval=SimpleNamespace(lower=low, upper=high),
                               center=center, linf=linf)

    # the catalog's 0.3 is the float 0.29999999999999998890: kept as written, not 0.2
    assert decide(stat(0.0, 0.3), "DECIMAL(15,1)", top=False, fine=-30).upper == Decimal("0.3")
    # with one row per user, a row then moves the exact total by 0.3 > L∞ (the float):
    # the binary grid instead
    assert decide(stat(0.0, 0.3), "DECIMAL(15,1)", top=True, fine=-30) is None
    # a bound with more places than the column widens the sum's scale: rounded inwards to
    # the column's, a bound of 0.5 on whole numbers clamped every 0 to 1 (attack review)
    d = decide(stat(0.005, 0.125, linf=0.125), "DECIMAL(15,2)", top=True, fine=-30)
    assert (d.lower, d.upper, d.scale) == (Decimal("0.005"), Decimal("0.125"), 3)
    d = decide(stat(0.5, 3.5), "DECIMAL(4,0)", top=True, fine=-30)
    assert (d.lower, d.upper, d.scale, d.precision) == (Decimal("0.5"), Decimal("3.5"), 1, 5)
    # ... as far as the binary fine grid would resolve it; beyond, rounded outwards: the
    # interval of 3·x for x >= 0.1 starts at 0.30000000000000004, and rounded inwards
    # to 0.31 it clamped every row at 0.30 up (attack review)
    d = decide(stat(0.30000000000000004, 30.0), "DECIMAL(11,2)", top=False, fine=-30)
    assert (d.lower, d.scale) == (Decimal("0.3000000000"), 10)
    # the centre's places widen the type: 0.625 needs three
    assert decide(stat(-1.25, 2.5, 0.625), "DECIMAL(15,2)", top=True, fine=-30) == DecimalSum(
        16, 3, Decimal("-1.25"), Decimal("2.5"), Decimal("0.625"), True)
    # too wide to sum 2^48 rows inside DECIMAL(38), a float, an integer: the binary grid
    assert decide(stat(0.0, 1.0), "DECIMAL(38,10)", top=False, fine=-30) is None
    assert decide(stat(0.0, 1.0), "DOUBLE", top=False, fine=-30) is None
    assert decide(stat(0.0, 1.0), "BIGINT", top=False, fine=-30) is None
    # a bound past the type's range: no clamp on that side (no value reaches it)
    d = decide(stat(-1e30, 1.0, linf=1e30), "DECIMAL(4,2)", top=True, fine=-30)
    assert (d.lower, d.upper) == (None, Decimal("1"))


@pytest.mark.parametrize("column, bounds, rows, sql, exact", [
    # every 0 clamped up to 0.5: rounded to the column's whole numbers, the bound was 0,
    # and inwards 1 (attack review)
    ("DECIMAL(4,0)", (0.5, 3.5), ["0"] * 1000, "SELECT SUM(x) FROM t", Fraction(500)),
    # 3 · 0.10 is at the expression's lower bound, the float 0.30000000000000004: it
    # stays 0.30 (rounded inwards to the column's places, the bound clamped it to 0.31)
    ("DECIMAL(10,2)", (0.1, 10.0), ["0.10"] * 1000, "SELECT SUM(x * 3) FROM t",
     Fraction(300)),
])
def test_a_bound_is_clamped_to_as_written(no_noise, column, bounds, rows, sql, exact):
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (pid INTEGER PRIMARY KEY, x {column})")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(rows)))
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": bounds[0], "upper": bounds[1]}}}}}
    with dpsql.connect(con, catalog=catalog, budget=(10, 0.5), ledger=":memory:") as conn:
        result = conn.execute(sql, epsilon=1.0)
        assert "DECIMAL" in result.sql and "DOUBLE" not in result.sql, result.sql
        g = _grid(conn.explain(sql, epsilon=1.0).statistics[0])
        assert abs(Fraction(result.rows[0][0]) - exact) <= g


def test_the_applications_decimal_context_changes_nothing(no_noise):
    """A trapped FloatOperation made the noise stage raise on an exact DECIMAL sum after
    the charge, and only when a row matched: ``WHERE pid = 42`` failed exactly when that
    person was in the data (attack review). A small precision rounded the bounds and the
    centre :func:`decide` writes, and its test of one row's reach against L∞."""
    import decimal

    con = _table(ROWS, unique=True)
    sql = "SELECT AVG(x), SUM(x) FROM t WHERE pid = 1"
    with dpsql.connect(con, catalog=_catalog(1), budget=(100, 0.5), ledger=":memory:") as conn:
        plain = conn.execute(sql, epsilon=1.0).rows
        with decimal.localcontext() as ctx:
            ctx.traps[decimal.FloatOperation] = True
            ctx.traps[decimal.Inexact] = True
            ctx.prec = 4
            assert conn.execute(sql, epsilon=1.0).rows == plain
    stat = SimpleNamespace(interval=SimpleNamespace(lower=2.5, upper=2030.6), center=1016.55,
                           linf=1014.05)
    expected = decide(stat, "DECIMAL(15,2)", top=False, fine=-30)
    with decimal.localcontext() as ctx:
        ctx.prec = 4
        ctx.traps[decimal.FloatOperation] = True
        assert decide(stat, "DECIMAL(15,2)", top=False, fine=-30) == expected
    assert expected.center == Decimal("1016.55")


@pytest.mark.parametrize("column, bounds", [("DECIMAL(23,0)", (0.5, 1000.0)),
                                            ("DECIMAL(20,0)", (1 / 3, 1000.0))])
def test_a_bound_the_scale_cannot_hold_is_not_moved(no_noise, column, bounds):
    """A wide column leaves the scale no room for a bound's places (23 digits at most):
    rounded outwards to whole numbers, the bound 0.5 let every 0 through unclamped
    (attack review). Such a sum keeps the binary grid, which clamps to the bound."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (pid INTEGER PRIMARY KEY, x {column})")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, "0") for i in range(1000)])
    catalog = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
        "pid": {"type": "int"}, "x": {"type": "float", "lower": bounds[0], "upper": bounds[1]}}}}}
    with dpsql.connect(con, catalog=catalog, budget=(100, 0.5), ledger=":memory:") as conn:
        result = conn.execute("SELECT SUM(x) FROM t", epsilon=10.0)
        g = _grid(conn.explain("SELECT SUM(x) FROM t", epsilon=10.0).statistics[0])
    assert abs(Fraction(result.rows[0][0]) - 1000 * Fraction(bounds[0])) <= g


def test_dpsql_imports_and_answers_under_a_trapping_default_context():
    """The application's default context (new threads copy it: dpsql's query thread)
    traps FloatOperation and Inexact at two digits: dpsql still imports (a constant built
    from a float had raised at import) and answers."""
    import subprocess
    import sys

    script = """
import decimal
decimal.DefaultContext.traps[decimal.FloatOperation] = True
decimal.DefaultContext.traps[decimal.Inexact] = True
decimal.DefaultContext.prec = 2
decimal.setcontext(decimal.Context(prec=2, traps=[decimal.FloatOperation, decimal.Inexact]))
import duckdb, dpsql
con = duckdb.connect()
con.execute("CREATE TABLE t (pid INTEGER PRIMARY KEY, x DECIMAL(15,2))")
con.execute("INSERT INTO t VALUES (1, 1.37), (2, 2.74)")
cat = {"tables": {"t": {"user_key": "pid", "max_rows": 1, "columns": {
    "pid": {"type": "int"}, "x": {"type": "float", "lower": 0, "upper": 100}}}}}
with dpsql.connect(con, catalog=cat, budget=(10, 0.5), ledger=":memory:") as conn:
    print(len(conn.execute("SELECT SUM(x), AVG(x) FROM t WHERE pid = 1", epsilon=1.0).rows))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr[-2000:]


@pytest.mark.parametrize("engine, sql", [
    ("duckdb", "SELECT PERCENTILE_CONT(0.123456) WITHIN GROUP (ORDER BY x DESC) FROM t"),
    ("sqlite", "SELECT SUM(x * (0.1234 + 0.0001)) FROM t"),
])
def test_planning_ignores_the_applications_decimal_context(no_noise, engine, sql, tmp_path):
    """A quantile's fraction and SQLite's folded literals were computed in the
    application's context: at three digits, 1 - 0.123456 and 0.1234 + 0.0001 were
    rounded, and the plan cache kept the rounded SQL for later asks (attack review)."""
    import decimal
    import sqlite3

    rows = [(i, i % 2, f"{(i * 7.3) % 100:.2f}") for i in range(200)]
    if engine == "duckdb":
        database = _table(rows, unique=True)
    else:
        path = tmp_path / "t.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (pid INTEGER PRIMARY KEY, g INTEGER, x REAL)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(p, g, float(x)) for p, g, x in rows])
        con.commit()
        con.close()
        database = f"sqlite:///{path}"
    catalog = _catalog(1)
    catalog["tables"]["t"]["columns"]["x"].update(lower=0.0, upper=100.0)
    answers = []
    for prec in (28, 3):
        with dpsql.connect(database, catalog=catalog, budget=(100, 0.5),
                           ledger=":memory:") as conn, decimal.localcontext() as ctx:
            ctx.prec = prec
            ctx.traps[decimal.FloatOperation] = True
            answers.append(conn.execute(sql, epsilon=5.0).rows)
    assert answers[0] == answers[1]
