"""Shared fixtures: the bundled PUMS sample in DuckDB, and connections to it."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest

import dpsql
from dpsql.backends.duckdb import _LOCKED as DUCKDB_CONFIG  # same config as dpsql's
from dpsql.datasets import load_pums, pums_catalog


@pytest.fixture(scope="session")
def pums_file(tmp_path_factory):
    """A DuckDB file holding the bundled tables ``pums`` and ``pums_dup``."""
    path = tmp_path_factory.mktemp("db") / "pums.duckdb"
    load_pums(path)
    return path


@pytest.fixture(scope="session")
def pums_db(pums_file):
    """A read-only DuckDB connection to the PUMS file, for exact reference answers."""
    con = duckdb.connect(str(pums_file), read_only=True, config=dict(DUCKDB_CONFIG))
    yield con
    con.close()


@pytest.fixture
def connect(pums_file):
    """Factory of dpsql connections to the PUMS file (both tables in the catalog)."""
    opened = []

    def make(budget=(100.0, 1e-3), catalog=None, database=None, ledger=":memory:", **kwargs):
        # without the catalog's own budget, the test's budget becomes the total
        catalog = catalog or dataclasses.replace(pums_catalog(), budget=None)
        conn = dpsql.connect(database or pums_file, catalog=catalog,
                             budget=budget, ledger=ledger, **kwargs)
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()
