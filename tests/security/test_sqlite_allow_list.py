"""SQLite's allow-list holds for values of every storage class (issue 19).

SQLite binds no types, so each entry of :data:`dpsql.backends.sqlite.TOTAL` claims its
operation cannot fail whatever its operands hold. This test takes every operation class
the list names, evaluates an example of it on dpsql's own connection (its functions,
its text decoding) over every combination of extreme values of each storage class, and
fetches the results: any error is a wrong entry. An operation class added to the list
without an example here fails the test, so a new entry cannot go unmeasured.
"""

from __future__ import annotations

import sqlite3

import pytest
from sqlglot import exp

from dpsql.backends import sqlite_dialect
from dpsql.backends.sqlite import TOTAL, _connect_read_only, _Guard

#: Values of every storage class at their extremes (``a``, ``b``, ``c`` range over them).
VALUES = ["NULL", "(-9223372036854775807 - 1)", "9223372036854775807", "0", "-1",
          "1.7976931348623157e308", "-0.0", "'abc'", "''", "'9223372036854775808'", "x'ff00'",
          "x''", "'2024-02-30'",
          "'-4713-11-24'", "CAST(x'ff61' AS TEXT)", "'%'", "'  1e999 '"]

H, F, U = sqlite_dialect.SQLITE_HASH, sqlite_dialect.SQLITE_FMOD, sqlite_dialect.SQLITE_UTF8
#: One or more examples per operation class of the list.
EXAMPLES = {
    exp.EQ: ["a = b"], exp.NEQ: ["a <> b"], exp.GT: ["a > b"], exp.GTE: ["a >= b"],
    exp.LT: ["a < b"], exp.LTE: ["a <= b"], exp.NullSafeEQ: ["a IS b"],
    exp.NullSafeNEQ: ["a IS NOT b"], exp.Between: ["a BETWEEN b AND c"],
    exp.In: ["a IN (b, c)", "a IN (SELECT b)"], exp.Is: ["a IS NULL"],
    exp.And: ["a AND b"], exp.Or: ["a OR b"], exp.Not: ["NOT a"],
    exp.Xor: ["(a OR b) AND NOT (a AND b)"],
    exp.Case: ["CASE WHEN a THEN b ELSE c END", "CASE a WHEN b THEN c END"],
    exp.Coalesce: ["COALESCE(a, b, c)"], exp.Nullif: ["NULLIF(a, b)"],
    exp.If: ["IIF(a, b, c)"], exp.Max: ["MAX(a, b, c)"], exp.Min: ["MIN(a, b)"],
    exp.Add: ["a + b"], exp.Sub: ["a - b"], exp.Mul: ["a * b"], exp.Div: ["a / b"],
    exp.Mod: ["a % b"], exp.Neg: ["-a", "-(-a)"],
    exp.Cast: [f"CAST(a AS {t})" for t in ("INTEGER", "REAL", "TEXT", "BLOB", "NUMERIC")],
    exp.TryCast: ["CAST(a AS BIGINT)"],
    exp.Ceil: ["CEIL(a)"], exp.Round: ["ROUND(a, b)", "ROUND(a)"], exp.Sqrt: ["SQRT(a)"],
    exp.Ln: ["LN(a)"], exp.Exp: ["EXP(a)"], exp.Pow: ["POW(a, b)"], exp.Sign: ["SIGN(a)"],
    exp.DPipe: ["a || b || c"], exp.Length: ["LENGTH(a)"], exp.Lower: ["LOWER(a)"],
    exp.Upper: ["UPPER(a)"], exp.Trim: ["TRIM(a)", "TRIM(a, b)"],
    exp.Substring: ["SUBSTR(a, b, c)", "SUBSTR(a, b)"], exp.StrPosition: ["INSTR(a, b)"],
    exp.Replace: ["REPLACE(a, 'ab', 'c')", "REPLACE(a, 'a', '')"],
    exp.Like: ["a LIKE 'a%_'"], exp.ILike: ["LOWER(a) LIKE LOWER('A%')"],
    exp.Count: ["COUNT(a)", "COUNT(DISTINCT a)"], exp.Avg: ["AVG(a)", "AVG(DISTINCT a)"],
    exp.RowNumber: ["(SELECT ROW_NUMBER() OVER (ORDER BY a))"],
    exp.Typeof: ["TYPEOF(a)"],
    exp.Anonymous: ["TOTAL(a)", "TOTAL(DISTINCT a)", "STRFTIME('%Y', a)", "DATE(a, '+1 days')",
                    "DATETIME(a)", f"{H}('s', CAST(a AS BLOB), CAST(b AS BLOB))",
                    f"{F}(CAST(a AS REAL), CAST(b AS REAL))", f"{U}(CAST(a AS BLOB))"],
}


def _listed() -> set[type]:
    return {op for entry in TOTAL.entries for op in entry.ops}


def test_every_listed_operation_has_an_example():
    missing = sorted(op.__name__ for op in _listed() if op not in EXAMPLES)
    assert not missing, f"add examples for {missing} (every SQLite entry is measured here)"


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    path = tmp_path_factory.mktemp("sqlite-list") / "v.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE v (x)")
    for value in VALUES:
        raw.execute(f"INSERT INTO v SELECT {value}")
    raw.commit()
    raw.close()
    c = _connect_read_only(path, _Guard())
    yield c
    c.close()


#: Aggregates: evaluated over all rows, and per group of ``b``.
AGGREGATES = {"COUNT", "AVG", "TOTAL"}


@pytest.mark.parametrize("example", sorted({e for es in EXAMPLES.values() for e in es}))
def test_listed_operation_cannot_fail_on_any_storage_class(con, example):
    rows_of = "FROM (SELECT x.x AS a, y.x AS b, z.x AS c FROM v AS x, v AS y, v AS z)"
    if example.split("(")[0] in AGGREGATES:
        assert len(con.execute(f"SELECT {example} {rows_of}").fetchall()) == 1
        # ... and over the values that overflow an integer sum together
        rows = con.execute(f"SELECT b, {example} {rows_of} GROUP BY b").fetchall()
        assert len(rows) > 1
        return
    rows = con.execute(f"SELECT {example} {rows_of}").fetchall()  # the fetch decodes text
    assert len(rows) == len(VALUES) ** 3


def test_the_values_reach_the_edges():
    """The examples would catch the failures SQLite does have (so the values do reach
    them): ABS and SUM of the smallest integer overflow, a Python function given text
    that is not UTF-8 fails."""
    path_free = sqlite3.connect(":memory:")
    path_free.execute("CREATE TABLE v (x)")
    for value in VALUES:
        path_free.execute(f"INSERT INTO v SELECT {value}")
    for sql in ("SELECT ABS(x) FROM v", "SELECT SUM(x) FROM (SELECT x FROM v UNION ALL "
                "SELECT x FROM v) WHERE x > 0 AND typeof(x) = 'integer'"):
        with pytest.raises(sqlite3.OperationalError, match="overflow"):
            path_free.execute(sql).fetchall()
    path_free.create_function("py", 1, lambda v: v)
    with pytest.raises(sqlite3.OperationalError):
        path_free.execute("SELECT py(x) FROM v").fetchall()
