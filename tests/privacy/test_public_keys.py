"""A key of a public table all of whose rows lie in the key's domain needs no domain
filter (dpsql.public_keys): left out exactly where leaving it out changes nothing.

The catalog: ``orders`` (private, the user ``o_custkey``, one group per user) joined to a
public ``nation`` whose ``n_name`` has a three-name domain. Each user has one order in
CHINA and one in a fourth nation outside the domain, so the L0 step keeps the CHINA one
only if the filter dropped the other first: leaving the filter out where the table holds
a name outside the domain halves CHINA's count (the test breaks then).
"""

from __future__ import annotations

import duckdb
import pytest

import dpsql
from dpsql import public_keys

USERS = 40
DOMAIN = ["CHINA", "FRANCE", "PERU"]
SQL = ("SELECT n_name, COUNT(*) AS n FROM orders JOIN nation ON o_nationkey = n_nationkey "
       "GROUP BY n_name")


def _catalog() -> dict:
    return {"dataset": "pk", "tables": {
        "orders": {"user_key": "o_custkey", "max_groups": 1, "max_rows": 2, "columns": {
            "o_orderkey": {"type": "int"}, "o_custkey": {"type": "int"},
            "o_nationkey": {"type": "int"}}},
        "nation": {"public": True, "columns": {
            "n_nationkey": {"type": "int"},
            "n_name": {"type": "string", "values": DOMAIN}}}}}


def _file(tmp_path, names: list[str | None]):
    path = tmp_path / "pk.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE nation (n_nationkey INTEGER PRIMARY KEY, n_name VARCHAR)")
    con.executemany("INSERT INTO nation VALUES (?, ?)", list(enumerate(names)))
    con.execute("CREATE TABLE orders (o_orderkey INTEGER, o_custkey INTEGER, "
                "o_nationkey INTEGER)")
    other = len(names) - 1  # the last nation: outside the domain in the "extra" case
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)",
                    [(2 * u + i, u, n) for u in range(USERS) for i, n in enumerate([0, other])])
    con.close()
    return path


def _answer(database, catalog=None, sql=SQL):
    conn = dpsql.connect(database, catalog=catalog or _catalog(), budget=(100, 1e-5),
                         ledger=":memory:")
    result = conn.execute(sql, epsilon=10.0)
    conn.close()
    return dict(zip([r[0] for r in result.rows], [r[1] for r in result.rows], strict=True)), \
        result.sql


def test_a_table_inside_the_domain_needs_no_filter(tmp_path, no_noise):
    # every nation is in the domain: the filter would keep every row, so it is left out
    # and the answer is the one the filter gives
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    counts, sql = _answer(path)
    assert "n_name IN (" not in sql and "n_name =" not in sql
    # each user's orders are in CHINA and PERU: one group each, whichever the L0 keeps
    assert counts["FRANCE"] == 0 and counts["CHINA"] + counts["PERU"] == USERS
    assert counts["CHINA"] > 0 and counts["PERU"] > 0


@pytest.mark.parametrize("extra", ["ATLANTIS", None, "china", "CHINA "])
def test_a_name_outside_the_domain_keeps_the_filter(tmp_path, no_noise, extra):
    # a fourth nation outside the domain (NULL, another case, a trailing space): each
    # user's order there must not take the user's one L0 place from CHINA
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU", extra])
    counts, sql = _answer(path)  # NULL too: the catalog does not declare it nullable
    assert "n_name IN (" in sql
    assert counts == {"CHINA": USERS, "FRANCE": 0, "PERU": 0}


def test_a_null_supplied_public_table_keeps_the_filter(tmp_path, no_noise):
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    sql = SQL.replace("JOIN nation", "LEFT JOIN nation")
    _, text = _answer(path, sql=sql)
    assert "n_name IN (" in text


def test_a_narrowed_domain_keeps_the_filter(tmp_path, no_noise):
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    sql = SQL.replace("GROUP BY", "WHERE n_name <> 'PERU' GROUP BY")
    counts, text = _answer(path, sql=sql)
    assert "n_name IN (" in text or "n_name =" in text or "n_name <>" in text
    assert set(counts) == {"CHINA", "FRANCE"}


def test_a_callers_connection_keeps_the_filter(tmp_path, no_noise):
    # the caller holds the connection and may write to nation between two queries
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    con = duckdb.connect(str(path), read_only=True)
    _, text = _answer(con)
    assert "n_name IN (" in text
    con.close()


def test_a_failing_count_keeps_the_filter(tmp_path, no_noise, monkeypatch):
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])

    def fails(self, expression):
        raise RuntimeError("no")

    from dpsql.backends.duckdb import DuckDBBackend
    monkeypatch.setattr(DuckDBBackend, "frozen_row", fails)
    _, text = _answer(path)
    assert "n_name IN (" in text
    assert public_keys  # the module under test


def test_a_public_view_keeps_the_filter(tmp_path, no_noise):
    # attack review: a view is computed afresh by each statement (here a name outside the
    # domain one statement in two), so what the count saw need not be what the query reads
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE nation RENAME TO nation_rows")
    con.execute("CREATE VIEW nation AS SELECT n_nationkey, CASE WHEN n_nationkey = 2 AND "
                "(SELECT random()) < 0.5 THEN 'ATLANTIS' ELSE n_name END AS n_name "
                "FROM nation_rows")
    con.close()
    for _ in range(4):
        counts, sql = _answer(path)
        assert "n_name IN (" in sql
        assert counts["CHINA"] + counts["PERU"] <= USERS and counts["FRANCE"] == 0


def _counts_of_nation(monkeypatch) -> list[str]:
    """The frozen counts that read ``nation``, as they run (a spy on the backend)."""
    from dpsql.backends.duckdb import DuckDBBackend

    seen: list[str] = []
    real = DuckDBBackend.frozen_row

    def spy(self, expression):
        text = expression.sql(dialect="duckdb")
        if '"nation"' in text:
            seen.append(text)
        return real(self, expression)

    monkeypatch.setattr(DuckDBBackend, "frozen_row", spy)
    return seen


def test_a_domain_is_counted_once_per_connection(tmp_path, no_noise, monkeypatch):
    # the count is remembered per backend (dpsql.frozen_facts.every_row): a new plan of
    # the same key and domain (another text, the plan cache off) does not count again
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    seen = _counts_of_nation(monkeypatch)
    conn = dpsql.connect(path, catalog=_catalog(), budget=(100, 1e-5), ledger=":memory:",
                         plan_cache=False)
    for sql in (SQL, SQL.replace("COUNT(*) AS n", "COUNT(*) AS m"), SQL):
        assert "n_name IN (" not in conn.execute(sql, epsilon=1.0).sql
    conn.close()
    assert len(seen) == 1, seen


def test_a_narrowed_domain_is_no_news_to_the_owner(tmp_path, no_noise, monkeypatch,
                                                   caplog):
    # the analyst's WHERE narrows the public key's domain to two names: PERU's row is
    # outside it, so the filter stays; that is the query's choice, not a false
    # declaration, and the owner's log stays quiet
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    seen = _counts_of_nation(monkeypatch)
    sql = SQL.replace("GROUP BY", "WHERE n_name IN ('CHINA', 'FRANCE') GROUP BY")
    with caplog.at_level("WARNING", logger="dpsql.owner"):
        counts, text = _answer(path, sql=sql)
    assert seen, "the narrowed domain was not counted"
    assert "n_name IN (" in text
    assert counts == {"CHINA": USERS, "FRANCE": 0}
    assert not [r for r in caplog.records if r.name == "dpsql.owner"], caplog.text


def test_the_remembered_domains_are_bounded(tmp_path, no_noise, monkeypatch):
    # attack review: each narrowed domain is a fact of its own, and explain() is free,
    # so the analyst could make the memory grow without end; it keeps the most recent
    from dpsql import frozen_facts

    monkeypatch.setattr(frozen_facts, "KEPT", 3)
    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    conn = dpsql.connect(path, catalog=_catalog(), budget=(100, 1e-5), ledger=":memory:",
                         plan_cache=False)
    seen = _counts_of_nation(monkeypatch)
    for names in (["CHINA"], ["FRANCE"], ["PERU"], ["CHINA", "PERU"], ["CHINA"]):
        listed = ", ".join(f"'{n}'" for n in names)
        conn.explain(SQL.replace("GROUP BY", f"WHERE n_name IN ({listed}) GROUP BY"),
                     epsilon=1.0)
    memo = frozen_facts._known[conn._backend]
    assert len(memo) == 3
    assert len(seen) == 5  # CHINA alone was forgotten, and counted again
    conn.explain(SQL.replace("GROUP BY", "WHERE n_name IN ('CHINA', 'PERU') GROUP BY"),
                 epsilon=1.0)
    assert len(seen) == 5  # still remembered
    assert conn.budget.spent == (0.0, 0.0)
    conn.close()


def test_a_backend_that_cannot_count_remembers_nothing(tmp_path, no_noise):
    # a caller's connection can change under dpsql: never counted, nothing kept
    from dpsql import frozen_facts

    path = _file(tmp_path, ["CHINA", "FRANCE", "PERU"])
    con = duckdb.connect(str(path), read_only=True)
    conn = dpsql.connect(con, catalog=_catalog(), budget=(100, 1e-5), ledger=":memory:")
    assert "n_name IN (" in conn.execute(SQL, epsilon=1.0).sql
    assert not frozen_facts._known.get(conn._backend)
    conn.close()
    con.close()
