"""What a new user meets first: one DuckDB file shared with dpsql in a notebook, URLs,
ledgers of missing databases, writes through pandas, DuckDB's progress bar, and the
``dpsql catalog validate -d`` and ``budget show`` commands."""

from __future__ import annotations

import shutil

import duckdb
import pytest

import dpsql
from dpsql.datasets import catalog_path, load_pums


@pytest.fixture
def pums_copy(pums_file, tmp_path):
    """A private copy of the PUMS file (these tests open it for writing)."""
    path = tmp_path / "pums.duckdb"
    shutil.copy(pums_file, path)
    return path


# -- item 7: one DuckDB file, two connections in one process -----------------------------


def test_owner_connection_opened_after_dpsql(pums_copy):
    conn = dpsql.connect(pums_copy, catalog=catalog_path("pums"), budget=(1, 0),
                         ledger=":memory:")
    own = duckdb.connect(str(pums_copy), read_only=True)  # the owner's own, default config
    assert own.execute("SELECT count(*) FROM pums").fetchone() == (1000,)
    assert len(conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.1).rows) == 1
    own.close()
    conn.close()


def test_dpsql_opened_after_the_owner_connection(pums_copy):
    own = duckdb.connect(str(pums_copy), read_only=True)
    conn = dpsql.connect(pums_copy, catalog=catalog_path("pums"), budget=(1, 0),
                         ledger=":memory:")
    assert len(conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.1).rows) == 1
    assert own.execute("SELECT count(*) FROM pums").fetchone() == (1000,)
    conn.close()
    own.close()


def test_dpsql_connection_stays_locked_down_beside_the_owner(pums_copy):
    """Sharing the file never shares dpsql's instance: its settings stay locked, the
    file read-only, files and extensions refused, and no progress bar."""
    own = duckdb.connect(str(pums_copy), read_only=True)
    conn = dpsql.connect(pums_copy, catalog=catalog_path("pums"), budget=(1, 0),
                         ledger=":memory:")
    con = conn._backend._con
    settings = dict(con.execute(
        "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', "
        "'lock_configuration', 'python_enable_replacements', 'enable_progress_bar', "
        "'autoload_known_extensions', 'autoinstall_known_extensions')").fetchall())
    assert settings == {"enable_external_access": "false", "lock_configuration": "true",
                        "python_enable_replacements": "false", "enable_progress_bar": "false",
                        "autoload_known_extensions": "false",
                        "autoinstall_known_extensions": "false"}
    assert con.execute("SELECT database_name, readonly FROM duckdb_databases() "
                       "WHERE NOT internal").fetchall() == [("pums", True)]
    for sql in ("CREATE TABLE x (a INT)", "SELECT * FROM read_csv('/etc/hostname')",
                "SET enable_external_access = true", "SET enable_progress_bar = true",
                f"ATTACH '{pums_copy}' AS again", "LOAD httpfs", "DETACH pums"):
        with pytest.raises(duckdb.Error):
            con.execute(sql)
    # and the owner's connection keeps its own (default) settings
    assert own.execute("SELECT current_setting('enable_external_access')").fetchone() == (True,)
    conn.close()
    own.close()


def test_load_pums_rerun_while_dpsql_reads_the_file(pums_copy):
    conn = dpsql.connect(pums_copy, catalog=catalog_path("pums"), budget=(1, 0),
                         ledger=":memory:")
    load_pums(pums_copy)  # a notebook cell run again: the file already holds the data
    assert len(conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.1).rows) == 1
    conn.close()


def test_load_pums_says_what_to_close_when_it_must_write(pums_copy):
    con = duckdb.connect(str(pums_copy))
    con.execute("DROP TABLE pums_dup")
    con.close()
    conn = dpsql.connect(pums_copy, catalog=catalog_path("pums"), budget=(1, 0),
                         ledger=":memory:")
    with pytest.raises(dpsql.BackendError, match=r"close it first \(conn.close\(\), "
                                                 r"engine.dispose\(\)"):
        load_pums(pums_copy)
    conn.close()
    load_pums(pums_copy)  # closed: now it writes
    with duckdb.connect(str(pums_copy), read_only=True) as check:
        assert check.execute("SELECT count(*) FROM pums_dup").fetchone()[0] > 1000


def test_dpsql_says_what_to_close_when_the_owner_writes(pums_copy):
    writer = duckdb.connect(str(pums_copy))
    with pytest.raises(dpsql.BackendError, match="open for writing in this Python process"):
        dpsql.connect(pums_copy, catalog=catalog_path("pums"), budget=(1, 0),
                      ledger=":memory:")
    writer.close()


def test_sqlalchemy_engine_and_owner_connection_coexist(pums_copy):
    sa = pytest.importorskip("sqlalchemy")
    pd = pytest.importorskip("pandas")
    engine = sa.create_engine(f"dpsql+duckdb:///{pums_copy}?catalog={catalog_path('pums')}"
                              f"&epsilon=0.5&ledger={pums_copy.parent / 'l.sqlite'}"
                              "&budget_epsilon=5")
    df = pd.read_sql("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", engine)
    assert list(df["sex"]) == [0, 1]
    own = duckdb.connect(str(pums_copy), read_only=True)  # the engine's pool holds dpsql's
    assert own.execute("SELECT count(*) FROM pums").fetchone() == (1000,)
    load_pums(pums_copy)
    own.close()
    engine.dispose()
