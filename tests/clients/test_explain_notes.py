"""What an analyst sees of partition selection through the DB-API and in a notebook.

The README's DB-API example, ``... OPTIONS (epsilon = 0.25, delta = 1e-6) <key>,
COUNT(*) ... GROUP BY <key>``, run over keys that come from the data and are too small
for the threshold: the cursor's result says why there are no rows, and the notebook
display of both the answer and ``explain`` shows the threshold.
"""

from __future__ import annotations

import re

import duckdb

import dpsql
import dpsql.dbapi

CATALOG = {"dataset": "shops", "tables": {"shops": {
    "user_key": "uid", "max_groups": 1, "max_rows": 1, "columns": {
        "uid": {"type": "int"}, "town": {"type": "string"}}}}}

SQL = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25, delta = 1e-6) "
       "town, COUNT(*) AS n FROM shops GROUP BY town")


def _database(tmp_path):
    path = tmp_path / "shops.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE shops AS SELECT i AS uid, 'town' || (i % 7) AS town "
                "FROM range(70) r(i)")   # seven towns of ten users each
    con.close()
    return path


def test_dbapi_empty_answer_says_why(tmp_path):
    con = dpsql.dbapi.connect(_database(tmp_path), catalog=CATALOG, budget=(1.0, 1e-5),
                              ledger=":memory:")
    cur = con.cursor()
    cur.execute(SQL)
    assert cur.fetchall() == [] and cur.cost == (0.25, 1e-6)
    note = cur.result.notes[0]
    # ε/2 each for COUNT(*) and the selection: scale 8, threshold 107 users
    assert "no group key of town cleared the threshold" in note
    assert re.search(r"reaches 107 ", note) and "raise epsilon" in note
    con.close()


def test_notebook_shows_the_threshold(tmp_path):
    conn = dpsql.connect(_database(tmp_path), catalog=CATALOG, budget=(1.0, 1e-5),
                         ledger=":memory:")
    page = conn.execute(SQL)._repr_html_()
    assert "no group key of town cleared the threshold" in page and "107" in page
    explained = conn.explain(SQL)._repr_html_()
    assert "a key needs a noisy user count &gt;= 107" in explained
    assert "Output columns" in explained and "±24 in every group" in explained
    assert conn.budget.spent == (0.25, 1e-6)  # the explain spent nothing
    conn.close()
