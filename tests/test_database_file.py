"""What a new user meets first: one DuckDB file shared with dpsql in a notebook, URLs,
ledgers of missing databases, writes through pandas, DuckDB's progress bar, and the
``dpsql catalog validate -d`` and ``budget show`` commands."""

from __future__ import annotations

import shutil

import duckdb
import pytest

import dpsql
from dpsql import dbapi
from dpsql.datasets import catalog_path, load_pums
from tests.support import duckdb_of


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
    con = duckdb_of(conn)
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


# -- item 8: smaller things a new user meets ------------------------------------------------


def test_two_slash_url_is_refused_not_an_empty_database(pums_copy, tmp_path):
    sa = pytest.importorskip("sqlalchemy")
    with pytest.raises(sa.exc.ArgumentError, match=r"names a host \('pums.duckdb'\), not a "
                                                   r"file.*dpsql\+duckdb:///pums.duckdb"):
        sa.create_engine(f"dpsql+duckdb://pums.duckdb?catalog={catalog_path('pums')}"
                         "&epsilon=0.5&budget_epsilon=1")
    with pytest.raises(dpsql.BackendError, match="names a host, not a file.*duckdb:///"):
        dpsql.connect("duckdb://pums.duckdb", catalog=catalog_path("pums"), budget=(1, 0),
                      ledger=str(tmp_path / "l.sqlite"))
    assert not (tmp_path / "l.sqlite").exists()


@pytest.mark.parametrize("kind", ["path", "duckdb url", "sqlite url", "dbapi"])
def test_missing_database_creates_no_ledger(tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    database = {"path": "missing.duckdb", "duckdb url": "duckdb:///missing.duckdb",
                "sqlite url": "sqlite:///missing.duckdb", "dbapi": "missing.duckdb"}[kind]
    with pytest.raises(dpsql.BackendError, match="'missing.duckdb' does not exist"):
        if kind == "dbapi":
            dbapi.connect(database, catalog_path("pums"), budget=(1, 0))
        else:
            dpsql.connect(database, catalog=catalog_path("pums"), budget=(1, 0))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_engine_without_ledger_keeps_the_budget_beside_the_file(pums_copy):
    """What the README says: an engine without ledger= writes the ledger beside the
    database, so its budget outlives the engine (and the process)."""
    sa = pytest.importorskip("sqlalchemy")
    url = (f"dpsql+duckdb:///{pums_copy}?catalog={catalog_path('pums')}&epsilon=0.5"
           "&budget_epsilon=1")
    for _ in range(2):
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT COUNT(*) FROM pums").fetchall()
        engine.dispose()
    ledger = pums_copy.with_name(pums_copy.name + ".ledger.sqlite")
    assert ledger.exists()
    assert dpsql.Ledger(ledger).spent("pums").basic == (1.0, 0.0)
    engine = sa.create_engine(url)  # a third engine (as in a new process) sees the spend
    raw = engine.raw_connection()
    assert raw.dbapi_connection.budget.spent == (1.0, 0.0)
    raw.close()
    engine.dispose()


@pytest.mark.parametrize("name, options", [
    ("pums", {"if_exists": "append", "method": "multi"}),
    ("pums", {"if_exists": "append"}),
    ("pums", {"if_exists": "replace"}),
    ("fresh", {"method": "multi"}),
    ("fresh", {}),
])
@pytest.mark.parametrize("epsilon", ["", "&epsilon=0.5"])
def test_pandas_to_sql_is_refused_as_a_write(pums_copy, name, options, epsilon):
    sa = pytest.importorskip("sqlalchemy")
    pd = pytest.importorskip("pandas")
    ledger = pums_copy.parent / "w.sqlite"
    engine = sa.create_engine(f"dpsql+duckdb:///{pums_copy}?catalog={catalog_path('pums')}"
                              f"&ledger={ledger}&budget_epsilon=5{epsilon}")
    frame = pd.DataFrame({"pid": [1, 2, 3], "age": [30, 40, 50]})
    with pytest.raises(Exception, match="writes are not allowed") as info:
        frame.to_sql(name, engine, index=False, **options)
    assert "budget" not in str(info.value) and "epsilon" not in str(info.value)
    engine.dispose()
    led = dpsql.Ledger(ledger)
    assert led.log() == [] and led.spent("pums").basic == (0.0, 0.0)  # nothing sent
    with duckdb.connect(str(pums_copy), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM pums").fetchone() == (1000,)
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = "
                           "'fresh'").fetchone() == (0,)


def test_catalog_validate_against_a_database(pums_copy, tmp_path):
    from click.testing import CliRunner

    from dpsql.cli import main

    ok = CliRunner().invoke(main, ["catalog", "validate", str(catalog_path("pums")), "-d",
                                   str(pums_copy)])
    assert ok.exit_code == 0, ok.output
    assert "OK (every table, column, type and user key matches the catalog)" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: pums\ntables:\n  pums:\n    user_key: pid\n    columns:\n"
                   "      pid: {type: int}\n      age: {type: string}\n"
                   "  ghost:\n    row_privacy: true\n    columns:\n      a: {type: int}\n"
                   "  pums_dup:\n    user_key: who\n    columns:\n      who: {type: int}\n")
    out = CliRunner().invoke(main, ["catalog", "validate", str(bad), "--database",
                                    str(pums_copy)])
    assert out.exit_code == 1
    assert "table 'pums', column 'age': the catalog says string but the database column " \
           "is BIGINT" in out.output
    assert "table 'ghost' is in the catalog but not in the database" in out.output
    assert "table 'pums_dup', column 'who': in the catalog but not in the database" \
        in out.output  # the user key
    assert "3 problem(s)" in out.output
    assert not pums_copy.with_name(pums_copy.name + ".ledger.sqlite").exists()


def test_budget_show_explains_the_zcdp_line(tmp_path, pums_copy):
    from click.testing import CliRunner

    from dpsql.cli import main

    ledger = tmp_path / "b.sqlite"
    # the zCDP line belongs to a data set whose one accountant is zCDP (issue 24)
    dpsql.Ledger(ledger).set_budget("pums", (10, 1e-5), accountant="zcdp")
    with dpsql.connect(pums_copy, catalog=catalog_path("pums"), budget=(10, 1e-5),
                       ledger=str(ledger)) as conn:
        conn.execute("SELECT COUNT(*) FROM pums", epsilon=0.5, delta=1e-7,
                     mechanism="gaussian")
    out = CliRunner().invoke(main, ["budget", "show", "--ledger", str(ledger)])
    assert out.exit_code == 0, out.output
    assert "zCDP epsilon=" in out.output and "(*)" in out.output
    assert "(zcdp composition" in out.output
    assert "(*) zCDP: this data set admits queries by zero-concentrated DP" in out.output
