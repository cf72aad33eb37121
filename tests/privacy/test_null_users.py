"""Rows whose user key is NULL belong to no user and are left out.

Grouped together they were one pseudo-user of several people: D holds person A without
a key in group ``a``; D′ adds person B without a key in group ``b``; with ``max_groups =
1`` the pseudo-user keeps one of its two groups, so adding B could move A's row from
``a`` to ``b`` — a change of two units where the noise covers one. On SQLite a key of
the wrong storage class (text in an INTEGER user key) is read as NULL and was merged
the same way. Each test answers at a huge epsilon and checks the exact counts: only
keyed people count.
"""

from __future__ import annotations

import sqlite3

import duckdb
import pytest

import dpsql

CATALOG = {"dataset": "null_users", "tables": {"acct": {
    "user_key": "uid", "max_groups": 1, "max_rows": 1, "columns": {
        "uid": {"type": "int", "nullable": True},
        "g": {"type": "string", "values": ["a", "b"]}}}}}

KEYED = [(i, "a" if i < 50 else "b") for i in range(100)]


def _counts(database) -> dict:
    conn = dpsql.connect(database, catalog=CATALOG, budget=(1e9, 0.5), ledger=":memory:")
    try:
        result = conn.execute("SELECT g, COUNT(*) AS n FROM acct GROUP BY g", epsilon=1e5)
    finally:
        conn.close()
    return {g: round(n) for g, n in result.rows}


@pytest.mark.parametrize("unkeyed", [[(None, "a")], [(None, "a"), (None, "b")]],
                         ids=["D", "D-prime"])
def test_null_user_keys_are_left_out_duckdb(unkeyed):
    con = duckdb.connect()
    con.execute("CREATE TABLE acct (uid INTEGER, g VARCHAR)")
    con.executemany("INSERT INTO acct VALUES (?, ?)", KEYED + unkeyed)
    assert _counts(con) == {"a": 50, "b": 50}


@pytest.mark.parametrize("unkeyed", [[("x", "a")], [("x", "a"), ("y", "b")]],
                         ids=["D", "D-prime"])
def test_off_type_user_keys_are_left_out_sqlite(tmp_path, unkeyed):
    # SQLite keeps the text 'x' in an INTEGER column; dpsql reads it as NULL
    path = tmp_path / "acct.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE acct (uid INTEGER, g TEXT)")
    raw.executemany("INSERT INTO acct VALUES (?, ?)", KEYED + unkeyed)
    raw.commit()
    raw.close()
    assert _counts(f"sqlite:///{path}") == {"a": 50, "b": 50}


def test_null_user_values_are_left_out_of_distinct_counts():
    # a COUNT(DISTINCT col) reads its own per-user table of values
    # (dpsql.rewrite.per_user_aggregate._distinct_values), with the same exclusion:
    # the value only a keyless row holds must not be counted
    con = duckdb.connect()
    con.execute("CREATE TABLE acct (uid INTEGER, g VARCHAR)")
    con.executemany("INSERT INTO acct VALUES (?, ?)", KEYED + [(None, "c"), (None, "d")])
    conn = dpsql.connect(con, catalog=CATALOG, budget=(1e9, 0.5), ledger=":memory:")
    try:
        result = conn.execute("SELECT COUNT(DISTINCT g) AS n FROM acct", epsilon=1e5)
    finally:
        conn.close()
    assert [round(v) for v in result.rows[0]] == [2]
