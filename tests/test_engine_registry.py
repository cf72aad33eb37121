"""dpsql.backends.ENGINES: each engine is found by its URL scheme or connection object."""

import importlib

import duckdb
import pytest

from dpsql.backends import ENGINES, DuckDBBackend, ledger_home, open_backend
from dpsql.errors import BackendError


def test_every_engine_module_has_what_the_registry_calls():
    for engine in ENGINES:
        module = importlib.import_module(engine.module)
        if engine.schemes:
            assert callable(module.from_url), engine.module
        if engine.objects:
            assert callable(module.from_object), engine.module
        assert engine.schemes or engine.objects, engine.module


def test_schemes_are_unique():
    schemes = [s for e in ENGINES for s in e.schemes]
    assert len(schemes) == len(set(schemes))


def test_objects_and_urls_reach_their_engine(tmp_path):
    assert isinstance(open_backend(":memory:"), DuckDBBackend)
    assert isinstance(open_backend(duckdb.connect()), DuckDBBackend)
    duckdb.connect(str(tmp_path / "x.duckdb")).close()
    assert isinstance(open_backend(f"duckdb:///{tmp_path / 'x.duckdb'}"), DuckDBBackend)
    with pytest.raises(BackendError, match="scheme 'mysql' is not supported; supported: "
                                           "sqlite:///, postgresql\\+psycopg://, duckdb:///"):
        open_backend("mysql://host/db")
    with pytest.raises(BackendError, match="cannot use int as a database; give a DuckDB "
                                           "file path, ':memory:', a duckdb connection, a URL "
                                           "\\(sqlite:///file.db, postgresql"):
        open_backend(3)


def test_ledger_home_only_for_file_engines(tmp_path):
    assert ledger_home(f"sqlite:///{tmp_path}/a.db") == tmp_path / "a.db"
    assert ledger_home(f"duckdb:///{tmp_path}/a.duckdb") == tmp_path / "a.duckdb"
    assert ledger_home("postgresql+psycopg://u@h/db") is None
    assert ledger_home("duckdb:///:memory:") is None


def _engine_classes():
    from dpsql.backends.base import Backend

    for engine in ENGINES:
        importlib.import_module(engine.module)
    found, todo = [], [Backend]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__ in {e.module for e in ENGINES}:
            found.append(cls)
    return found


def test_output_check_lists_exactly_the_functions_the_engines_write():
    """The output check accepts the functions some engine's transforms write, and no
    other (``hash`` is the rewrite's own L0 order, in DuckDB's words)."""
    from dpsql.output_check import FUNCTIONS

    classes = _engine_classes()
    assert {c.__name__ for c in classes} >= {"DuckDBBackend", "SQLiteBackend",
                                             "PostgresBackend", "SparkBackend"}
    written = {"hash"}.union(*(c.functions for c in classes))
    assert written == FUNCTIONS
