"""Spark SQL: values one person stores cannot fail or merge groups after the charge.

Three gaps of the last review round, each needing only a value in the data:

* a date around year ±5,000,000 (Spark stores them) made date differences, DATE to
  TIMESTAMP conversions (even under ``TRY_CAST``) and ``DATE_TRUNC`` raise "long
  overflow" while the query ran, after the charge;
* a string that is not UTF-8 came back from the driver as ``'\\ufffd'``, the same key
  as the real text ``'\\ufffd'``: one person's group overwrote another's statistics;
* in a session time zone with daylight saving, the two instants of the repeated autumn
  hour came back as one local text, one key for two groups.

And what the review of those fixes found: the analyst can build an extreme date from a
literal or a person's text (a cast), and sums of date differences overflowed as
intervals.

Each test runs a query on D and on D′ = D plus one person and asserts what the analyst
sees. The tables are built with Spark SQL itself (Python cannot hold such dates).
"""

from __future__ import annotations

import pytest

import dpsql
from dpsql.errors import DpsqlError
from tests.support import needs_spark

pytestmark = [pytest.mark.slow, needs_spark]

CATALOG = {
    "dataset": "spark_values",
    "tables": {
        "people": {"user_key": "pid", "max_groups": 1, "max_rows": 1, "columns": {
            "pid": {"type": "int"},
            "name": {"type": "string", "nullable": True},
            "d": {"type": "date", "nullable": True},
            "ts": {"type": "timestamp", "nullable": True},
        }},
    },
}

#: 120 ordinary people; 100 of them are named U+FFFD (the text, valid UTF-8).
BASE = ("SELECT CAST(id AS INT) AS pid, "
        "CASE WHEN id <= 100 THEN '\\uFFFD' ELSE 'n' END AS name, "
        "date_add(DATE '2000-01-01', CAST(id AS INT)) AS d, "
        "CAST(TIMESTAMP_NTZ '2000-01-01 00:00:00' AS TIMESTAMP) AS ts FROM range(1, 121)")


@pytest.fixture
def spark(spark_session):
    """The process's one Spark session (``tests/conftest.py``)."""
    return spark_session


def _people(spark, extra: str | None):
    """Registers ``people`` = BASE (D) or BASE plus the row ``extra`` (D′)."""
    sql = BASE if extra is None else f"{BASE} UNION ALL {extra}"
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW people AS {sql}")


def _answer(spark, sql, epsilon=1e4):
    conn = dpsql.connect(spark, catalog=CATALOG, budget=(1e9, 0.5), ledger=":memory:")
    try:
        result = conn.execute(sql, epsilon=epsilon, delta=1e-6)
        return "result", result, conn.budget.spent
    except DpsqlError as exc:
        return "refused" if not getattr(exc, "charged", False) else "charged-failure", \
            exc, conn.budget.spent
    finally:
        conn.close()


#: An attacker row with a date near Spark's limit (and a timestamp near its own).
EXTREME = ("SELECT 999 AS pid, 'n' AS name, make_date(5000000, 1, 1) AS d, "
           "CAST(TIMESTAMP_NTZ '2000-01-01 00:00:00' AS TIMESTAMP) + "
           "make_interval(200000) AS ts")
#: ... and one whose date is ordinary: the queries that build dates themselves need no
#: more (the last day of year 9999 is for the sums of date differences).
ORDINARY = ("SELECT 999 AS pid, 'n' AS name, DATE '9999-12-30' AS d, "
            "CAST(TIMESTAMP_NTZ '2000-01-01 00:00:00' AS TIMESTAMP) AS ts")


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM people WHERE CAST(d AS TIMESTAMP) > TIMESTAMP '2000-03-01 00:00:00'",
    "SELECT COUNT(*) FROM people WHERE TRY_CAST(d AS TIMESTAMP) IS NULL",
    "SELECT DATE_TRUNC('month', ts) AS m, COUNT(*) FROM people GROUP BY m",
    "SELECT DATE_TRUNC('month', d) AS m, COUNT(*) FROM people GROUP BY m",
    "SELECT COUNT(*) FROM people WHERE d - DATE '2000-01-01' > 30",
    "SELECT COUNT(*) FROM people WHERE d > DATE '2000-03-01'",
    "SELECT YEAR(d) AS y, COUNT(*) FROM people GROUP BY y",
    "SELECT d, COUNT(*) FROM people GROUP BY d",
    "SELECT ts, COUNT(*) FROM people GROUP BY ts",
    # dates built by the query: from a literal that only one person's row reaches, or
    # from a person's text
    "SELECT COUNT(*) FROM people WHERE CASE WHEN pid = 999 THEN DATE '5000000-01-01' "
    "ELSE d END - DATE '2000-01-01' > 30",
    "SELECT COUNT(*) FROM people WHERE CAST(CASE WHEN pid = 999 THEN '5000000-01-01' END "
    "AS DATE) > ts",
    "SELECT DATE_TRUNC('year', CAST(CASE WHEN pid = 999 THEN '-290308-12-21 19:59:05.224192'"
    " END AS TIMESTAMP)) AS y, COUNT(*) FROM people GROUP BY y",
    "SELECT DATE_TRUNC('year', CASE WHEN pid <= 100 THEN TIMESTAMP '20000-06-01 00:00:00' "
    "ELSE ts END) AS y, COUNT(*) FROM people GROUP BY y",
    # sums of date differences: days (an integer), not intervals that overflow
    "SELECT COUNT(*) FROM people WHERE " + "+".join(["(d - DATE '0001-01-01')"] * 32)
    + " > 1",
    "SELECT COUNT(*) FROM people WHERE " + "+".join(
        ["(CASE WHEN pid = 999 THEN DATE '9999-12-30' ELSE d END - DATE '0001-01-01')"] * 32)
    + " > 1",
], ids=["cast-ts", "try-cast-ts", "trunc-ts", "trunc-d", "date-diff", "compare", "year",
        "date-key", "ts-key", "literal-date", "text-date", "text-ts", "literal-ts",
        "diff-sum", "literal-diff-sum"])
@pytest.mark.parametrize("attacker", [EXTREME, ORDINARY], ids=["extreme", "ordinary"])
def test_extreme_dates_never_fail_after_the_charge(spark, sql, attacker):
    outcomes = []
    for extra in (None, attacker):
        _people(spark, extra)
        outcomes.append(_answer(spark, sql))
    (kind_d, out_d, _), (kind_d2, out_d2, spent) = outcomes
    for kind, out in ((kind_d, out_d), (kind_d2, out_d2)):
        assert kind != "charged-failure", f"{sql}: failed after the charge: {out!r}"
    assert kind_d == kind_d2, (sql, out_d, out_d2)
    if kind_d == "refused":
        assert spent == (0.0, 0.0)


@pytest.mark.parametrize("sql", [
    "SELECT name, COUNT(*) AS n FROM people GROUP BY name",
    # keys whose type the dialect layer's inference does not know as text
    "SELECT TRIM(name) AS k, COUNT(*) AS n FROM people GROUP BY TRIM(name)",
    "SELECT REPLACE(name, 'x', 'y') AS k, COUNT(*) AS n FROM people "
    "GROUP BY REPLACE(name, 'x', 'y')",
    "SELECT nm AS k, COUNT(*) AS n FROM (SELECT pid, name AS nm, COUNT(*) AS c "
    "FROM people GROUP BY pid, name) AS t GROUP BY nm",
], ids=["column", "trim", "replace", "renamed"])
def test_invalid_utf8_never_joins_a_real_group(spark, sql):
    # D′: one person whose name is the single byte 0xFF (not UTF-8). Spark groups it
    # apart from the 100 people named U+FFFD; the driver used to decode it as U+FFFD,
    # and the two groups came back as one key (one overwrote the other)
    results = {}
    for label, extra in (("D", None),
                         ("D2", "SELECT 999, CAST(unhex('FF') AS STRING), "
                                "DATE '2000-01-01', "
                                "CAST(TIMESTAMP_NTZ '2000-01-01 00:00:00' AS TIMESTAMP)")):
        _people(spark, extra)
        kind, result, _ = _answer(spark, sql)
        assert kind == "result", result
        keys = [row[0] for row in result.rows]
        assert len(keys) == len(set(keys)), keys
        results[label] = dict(result.rows)
    # at ε = 10⁴ the counts are exact to well within 1: the group of 100 is still 100
    assert round(results["D"]["\ufffd"]) == 100
    assert round(results["D2"]["\ufffd"]) == 100


def test_daylight_saving_hour_is_two_keys(spark):
    # two instants one hour apart that New York writes as the same local time
    # (2021-11-07 01:30 EDT and EST); each has its own group, whatever the session zone
    rows = " UNION ALL ".join(
        f"SELECT {pid} AS pid, 'n' AS name, DATE '2000-01-01' AS d, "
        f"CAST(TIMESTAMP_NTZ '{ts}' AS TIMESTAMP) AS ts"
        for pid, ts in [(i, "2021-11-07 05:30:00" if i <= 60 else "2021-11-07 06:30:00")
                        for i in range(1, 121)])
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW people AS {rows}")
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        kind, result, _ = _answer(spark, "SELECT ts, COUNT(*) AS n FROM people GROUP BY ts")
        # the owner's setting is restored after dpsql's query
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    assert kind == "result", result
    assert len(result.rows) == 2, result.rows
    assert sorted(round(n) for _, n in result.rows) == [60, 60]


def test_invalid_utf8_user_keys_stay_separate_users(spark):
    # two people whose user keys are different invalid byte strings, in different
    # groups: each is its own user (reading such text as NULL made them one
    # pseudo-user, whose max_groups choice moved one person's row into another's group)
    catalog = {"dataset": "spark_uids", "tables": {"acct": {
        "user_key": "uid", "max_groups": 1, "max_rows": 1, "columns": {
            "uid": {"type": "string"}, "g": {"type": "string", "values": ["a", "b"]}}}}}
    rows = " UNION ALL ".join(
        [f"SELECT CAST(unhex('{h}') AS STRING) AS uid, '{g}' AS g"
         for h, g in (("FF01", "a"), ("FF02", "b"))]
        + [f"SELECT 'u{i}' AS uid, '{'a' if i < 50 else 'b'}' AS g" for i in range(100)])
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW acct AS {rows}")
    conn = dpsql.connect(spark, catalog=catalog, budget=(1e9, 0.5), ledger=":memory:")
    try:
        result = conn.execute("SELECT g, COUNT(*) AS n FROM acct GROUP BY g", epsilon=1e4)
    finally:
        conn.close()
    assert {g: round(n) for g, n in result.rows} == {"a": 51, "b": 51}

