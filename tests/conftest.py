"""Shared fixtures: the bundled PUMS sample in DuckDB and connections to it, the optional
PostgreSQL server and the one Spark session (helpers that are not fixtures, such as the
backend matrix, are in :mod:`tests.support`).

Tests marked ``slow`` (statistical, fuzzing, corpus, Spark and server-load tests) are
left out by ``pytest -m "not slow"``; the plain ``pytest`` runs everything.
"""

from __future__ import annotations

import dataclasses
import shutil
import types

import duckdb
import pytest

import dpsql
from dpsql.backends import open_backend
from dpsql.backends.duckdb import _LOCKED as DUCKDB_CONFIG  # same config as dpsql's
from dpsql.backends.loaders import copy_tables, load_tpch_into
from dpsql.datasets import load_pums, load_tpch, pums_catalog
from tests import support


@pytest.fixture
def no_noise(monkeypatch):
    """Noise off: every discrete Laplace draw is 0 (exact answers, for tests that pin
    them)."""
    from dpsql.mechanisms.laplace import DiscreteLaplace

    monkeypatch.setattr(DiscreteLaplace, "draws", lambda self, n: [0] * n)


@pytest.fixture
def ran(monkeypatch):
    """The SQL texts the DuckDB backend ran, in order."""
    from dpsql.backends.duckdb import DuckDBBackend

    texts: list[str] = []
    execute = DuckDBBackend.execute

    def spy(self, expression):
        texts.append(self.to_sql(expression))
        return execute(self, expression)

    monkeypatch.setattr(DuckDBBackend, "execute", spy)
    return texts


@pytest.fixture(scope="session")
def pums_file(tmp_path_factory):
    """A DuckDB file holding the bundled tables ``pums`` and ``pums_dup``."""
    path = tmp_path_factory.mktemp("db") / "pums.duckdb"
    load_pums(path)
    return path


@pytest.fixture(scope="session")
def tpch_db(tmp_path_factory):
    """A read-only DuckDB connection to TPC-H at scale 0.01 (rewrite fixtures over the
    ``tpch`` catalog)."""
    path = tmp_path_factory.mktemp("tpch_db") / "tpch.duckdb"
    load_tpch(path, scale=0.01)
    con = duckdb.connect(str(path), read_only=True, config=dict(DUCKDB_CONFIG))
    yield con
    con.close()


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


@pytest.fixture
def conn(connect):
    """A dpsql connection to the PUMS file: both tables, budget (100, 1e-3), a ledger in
    memory (``connect(...)`` for another budget or catalog)."""
    return connect()


@pytest.fixture(scope="session")
def postgres_url():
    """The test PostgreSQL server: ``.url`` (dpsql's read-only role) and ``.admin_url``
    (the owner, who loads data); skips the test when no server is configured."""
    if not support.HAVE_POSTGRES:
        pytest.skip(support.NO_POSTGRES)
    return types.SimpleNamespace(url=support.PG_URL, admin_url=support.PG_ADMIN_URL)


@pytest.fixture(scope="session")
def spark_session():
    """The process's one local SparkSession, stopped once at the end of the session;
    skips the test when pyspark or Java is missing."""
    try:
        session = support.spark_session()
    except support.Unavailable as exc:
        pytest.skip(str(exc))
    yield session
    support.stop_spark()


# -- the backend matrix ------------------------------------------------------------------

@pytest.fixture(scope="session")
def backend_source(tmp_path_factory):
    """DuckDB files the backends are loaded from: ``(pums, tpch)``; ``pums`` holds
    ``pums``, ``pums_dup`` and ``edge`` (:data:`tests.support.EDGE_ROWS`), ``tpch`` a
    TPC-H at scale 0.01, or None without ``tpchgen-cli``."""
    pums = tmp_path_factory.mktemp("backends") / "source.duckdb"
    con = duckdb.connect(str(pums))
    load_pums(con)
    con.execute("CREATE TABLE edge (uid BIGINT, i BIGINT, f DOUBLE, s VARCHAR, d DATE)")
    con.executemany("INSERT INTO edge VALUES (?, ?, ?, ?, ?)", support.EDGE_ROWS)
    con.close()
    tpch = None
    if support.HAVE_TPCH:
        tpch = tmp_path_factory.mktemp("backends") / "tpch.duckdb"
        load_tpch(tpch, scale=0.01)
    return pums, tpch


def _load(pums, tpch, target):
    con = duckdb.connect(str(pums), read_only=True)
    try:
        copy_tables(con, target, ["pums", "pums_dup", "edge"])
    finally:
        con.close()
    if tpch is not None:
        load_tpch_into(tpch, target)


@pytest.fixture(scope="session")
def backends(backend_source, tmp_path_factory, request):
    """Factory: ``backends(kind)`` is ``(backend over pums, backend over TPC-H or
    None)`` for a kind of :data:`tests.support.BACKEND_MATRIX`, each built once per
    session (:func:`tests.support.database_for` gives what ``dpsql.connect`` takes)."""
    pums, tpch = backend_source
    opened: dict = {}

    def get(kind):
        if kind in opened:
            return opened[kind]
        if kind == "duckdb":  # on copies: the sources stay open for the other loaders
            copies = tmp_path_factory.mktemp("duckdb")
            shutil.copy(pums, copies / "pums.duckdb")
            if tpch:
                shutil.copy(tpch, copies / "tpch.duckdb")
            made = (open_backend(copies / "pums.duckdb"),
                    open_backend(copies / "tpch.duckdb") if tpch else None)
        elif kind == "sqlite":
            path = tmp_path_factory.mktemp("sqlite") / "data.db"
            _load(pums, tpch, f"sqlite:///{path}")
            backend = open_backend(f"sqlite:///{path}")
            made = (backend, backend)
        elif kind == "postgres":
            url = request.getfixturevalue("postgres_url")
            _load(pums, tpch, url.admin_url)
            backend = open_backend(url.url)
            made = (backend, backend)
        else:
            spark = request.getfixturevalue("spark_session")
            _load(pums, tpch, spark)
            backend = open_backend(spark)
            made = (backend, backend)
        opened[kind] = made
        return made

    yield get
    for pums_backend, tpch_backend in opened.values():
        pums_backend.close()
        if tpch_backend is not None and tpch_backend is not pums_backend:
            tpch_backend.close()
