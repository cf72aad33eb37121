"""DuckDB's pre-charge check remembers what it learnt of a text (its columns, that it
binds and plans) per schema version, only where the schema cannot change behind dpsql,
and only for texts that passed (dpsql.backends.duckdb.DuckDBBackend.check)."""

from __future__ import annotations

import duckdb
import pytest
from sqlglot import exp

from dpsql.backends import _boundary
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import BackendError

TREE = exp.select(exp.alias_(exp.Literal.number(1), "y"))
SQL = "SELECT v AS y FROM t"


@pytest.fixture()
def data_file(tmp_path):
    path = tmp_path / "memo.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (v INTEGER)")
    con.close()
    return path


def _counting(monkeypatch, backend, sql):
    """Sends ``sql`` for TREE and counts the times DuckDB is asked to split it."""
    monkeypatch.setattr(backend, "to_sql", lambda expression: sql)
    calls = []
    split = backend._one_select

    def counted(text, stage):
        calls.append(stage)
        return split(text, stage)

    monkeypatch.setattr(backend, "_one_select", counted)
    return calls


def test_a_text_that_passed_is_not_bound_again(data_file, monkeypatch):
    backend = DuckDBBackend(data_file)
    backend.schema_version()  # read once, as the engine does before any check
    calls = _counting(monkeypatch, backend, SQL)
    first = backend.check(TREE)
    assert first == [("y", "INTEGER")]
    first.append(("changed", "by the caller"))  # a copy: the memo stays as it was
    assert backend.check(TREE) == [("y", "INTEGER")]
    assert calls == ["check"]
    assert backend.execute(TREE) == (["y"], [])  # the statement split by check runs
    assert calls == ["check"]
    backend.close()


def test_a_refused_text_is_refused_every_time(data_file, monkeypatch):
    backend = DuckDBBackend(data_file)
    backend.schema_version()
    calls = _counting(monkeypatch, backend, "SELECT lower(v) = 'a' AS y FROM t")
    for _ in range(2):
        with pytest.raises(BackendError) as info:
            backend.check(TREE)
        assert _boundary.PLAN_FAILED in str(info.value)
    assert calls == ["check", "check"]
    backend.close()


def test_a_callers_connection_is_checked_every_time(monkeypatch):
    # the caller holds the connection and may change what binds between two queries
    # in ways the schema version may not show: nothing is remembered (fails when the
    # memo is applied to such connections)
    con = duckdb.connect()
    con.execute("CREATE TABLE t (v INTEGER)")
    backend = DuckDBBackend(con)
    calls = _counting(monkeypatch, backend, SQL)
    for _ in range(2):
        backend.schema_version()
        assert backend.check(TREE) == [("y", "INTEGER")]
    assert calls == ["check", "check"]
    con.execute("DROP TABLE t")
    con.execute("CREATE TABLE t (v VARCHAR)")
    backend.schema_version()
    assert backend.check(TREE) == [("y", "VARCHAR")]
    con.close()
