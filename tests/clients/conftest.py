"""Fixtures of the client tests: jupysql's magics in IPython, connected to dpsql."""

from __future__ import annotations

import sys

import pytest

from dpsql.datasets import catalog_path


def import_jupysql(monkeypatch):
    """Imports jupysql's magics. jupysql imports ``pyspark.sql.connect``, which raises
    (not ModuleNotFoundError) when pyspark is installed without grpcio: hide that one
    module while jupysql loads, so it falls back to "no Spark"."""
    import importlib.util

    if importlib.util.find_spec("sql") is None:
        pytest.skip("jupysql is not installed")
    try:
        import sql.magic  # noqa: F401
    except ImportError as exc:  # pyspark's PySparkImportError is an ImportError
        if "pyspark" not in repr(exc).lower() and "grpc" not in repr(exc).lower():
            raise
        for name in [m for m in sys.modules if m == "sql" or m.startswith("sql.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "pyspark.sql.connect", None)
        import sql.magic  # noqa: F401
        monkeypatch.delitem(sys.modules, "pyspark.sql.connect")


@pytest.fixture
def ipython(pums_file, tmp_path, monkeypatch):
    """An IPython shell with jupysql's ``%sql`` connected to dpsql over the PUMS file
    (epsilon 0.5 a query, a budget of 50 in a ledger of its own): yields (shell, the
    connection URL, the ledger's path)."""
    pytest.importorskip("IPython")
    import_jupysql(monkeypatch)
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "sql")
    ledger = tmp_path / "ledger.sqlite"
    url = (f"dpsql+duckdb:///{pums_file}?catalog={catalog_path('pums')}&epsilon=0.5"
           f"&ledger={ledger}&budget_epsilon=50")
    ip.run_line_magic("sql", f"{url} --alias dpsql")
    yield ip, url, ledger
    from sql.connection import ConnectionManager

    ConnectionManager.close_all()  # nothing left for jupysql's atexit hook
