"""The backend remembers a final text by the text of the tree it came from
(dpsql.backends.base.Backend._total_sql): per schema version, only where the schema
cannot change behind dpsql, only after every check passed, and never in place of the
output check's walk of the tree that asks."""

from __future__ import annotations

import duckdb
import pytest
from sqlglot import exp, parse_one

from dpsql.backends import total
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import BackendError, UnsupportedQueryError

SQL = "SELECT SUM(CAST(v AS DOUBLE) / 2) AS __s0, COUNT(*) AS __s1 FROM t"


@pytest.fixture()
def data_file(tmp_path):
    path = tmp_path / "finals.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (v INTEGER)")
    con.close()
    return path


def _tree():
    return parse_one(SQL, read="duckdb")


def _typings(monkeypatch, backend):
    """Counts the trees the backend types (the work the memo saves)."""
    calls = []
    typed = backend.engine_types
    monkeypatch.setattr(backend, "engine_types", lambda e: calls.append(e) or typed(e))
    return calls


@pytest.fixture()
def backend(data_file):
    backend = DuckDBBackend(data_file)
    backend.catalog_tables = frozenset({"t"})
    backend.schema_version()  # read once, as the engine does before any check
    yield backend
    backend.close()


def test_a_tree_of_a_known_text_is_not_typed_again(backend, monkeypatch):
    calls = _typings(monkeypatch, backend)
    first = backend.to_sql(_tree())
    second = backend.to_sql(_tree())  # another tree, the same text
    assert second == first
    assert len(calls) == 1
    assert backend.check(_tree()) == [("__s0", "DOUBLE"), ("__s1", "BIGINT")]


def test_the_remembered_text_is_what_typing_would_give(backend, data_file):
    known = backend.to_sql(_tree())
    fresh = DuckDBBackend(data_file)
    fresh.catalog_tables = frozenset({"t"})
    fresh.schema_version()
    assert fresh.to_sql(_tree()) == known
    fresh.close()


def test_the_tree_is_walked_even_when_its_text_is_known(backend):
    backend.to_sql(_tree())
    bad = _tree()
    # a raw type name, written as the known tree's DOUBLE: the walk refuses it
    bad.find(exp.DataType).replace(exp.DataType(this=exp.DataType.Type.USERDEFINED,
                                                kind="DOUBLE"))
    assert bad.sql(dialect="duckdb") == _tree().sql(dialect="duckdb")
    with pytest.raises(UnsupportedQueryError, match="type USERDEFINED"):
        backend.to_sql(bad)


def test_a_refusal_is_not_remembered(backend, monkeypatch):
    calls = _typings(monkeypatch, backend)
    proved = total.check_total

    def refuse_once(*args):
        if len(calls) == 1:
            raise BackendError("refused, for the test")
        return proved(*args)

    monkeypatch.setattr(total, "check_total", refuse_once)
    with pytest.raises(BackendError):
        backend.to_sql(_tree())
    backend.to_sql(_tree())
    assert len(calls) == 2


def test_another_schema_version_types_again(backend, monkeypatch):
    calls = _typings(monkeypatch, backend)
    backend.to_sql(_tree())
    backend._schema_version = "another"
    backend.to_sql(_tree())
    assert len(calls) == 2


def test_other_catalog_tables_type_again(backend, monkeypatch):
    calls = _typings(monkeypatch, backend)
    backend.to_sql(_tree())
    backend.catalog_tables = frozenset({"t", "u"})
    backend.to_sql(_tree())
    assert len(calls) == 2


def test_a_callers_connection_is_typed_every_time(monkeypatch):
    # the caller holds the connection and may change the schema between two queries
    con = duckdb.connect()
    con.execute("CREATE TABLE t (v INTEGER)")
    backend = DuckDBBackend(con)
    calls = _typings(monkeypatch, backend)
    for _ in range(2):
        backend.schema_version()
        backend.to_sql(_tree())
    assert len(calls) == 2
    con.execute("DROP TABLE t")


def test_the_memo_is_bounded_in_characters(backend, monkeypatch):
    """Attack review: 512 entries of 95 KB queries held about 100 MB; the memo now also
    keeps at most _FINALS_CHARS characters of texts."""
    from dpsql.backends import base

    monkeypatch.setattr(base, "_FINALS_CHARS", 2000)
    for i in range(40):
        backend.to_sql(parse_one(f"SELECT COUNT(*) AS __s0 FROM t WHERE v > {10**20 + i}",
                                 read="duckdb"))
    finals = backend.__dict__["_finals"]
    held = sum(len(key[0]) + len(final) for key, final in finals.items())
    assert 0 < len(finals) < 40 and held <= 2000
    assert held == backend.__dict__["_finals_chars"]
