"""The scratch DuckDBs for post-processing: one fresh database per use, threads, no files."""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa
import pytest

from dpsql.scratch import scratch


def test_threads_see_only_their_own_tables():
    errors, barrier = [], threading.Barrier(8)

    def work(i: int) -> None:
        try:
            barrier.wait()
            for j in range(10):
                with scratch() as con:
                    con.register("__noisy", pa.table({"x": [i * 1000 + j] * 3}))
                    got = con.execute("SELECT DISTINCT x FROM __noisy").fetchall()
                    assert got == [(i * 1000 + j,)]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_no_file_access(tmp_path):
    (tmp_path / "secret.csv").write_text("a\n1\n")
    with scratch() as con, pytest.raises(duckdb.Error, match="disabled"):
        con.execute(f"SELECT * FROM read_csv('{tmp_path / 'secret.csv'}')").fetchall()
    with scratch() as con, pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")


# -- issue 13, class 4: nothing one use of the scratch database does is seen by another --

PERSISTENT = [
    # (statement in one use, probe in the next, what the probe must return there)
    ("CREATE MACRO round(x, y) AS 4242", "SELECT round(2.5::DOUBLE, 0)", [(3.0,)]),
    ("CREATE TEMP MACRO round(x, y) AS 4242", "SELECT round(2.5::DOUBLE, 0)", [(3.0,)]),
    ("CREATE TABLE __noisy AS SELECT 4242 AS x",
     "SELECT COUNT(*) FROM duckdb_tables() WHERE table_name = '__noisy'", [(0,)]),
    ("CREATE VIEW v AS SELECT 1", "SELECT COUNT(*) FROM duckdb_views() WHERE NOT internal",
     [(0,)]),
    ("CREATE TYPE mood AS ENUM ('a')",
     "SELECT COUNT(*) FROM duckdb_types() WHERE type_name = 'mood'", [(0,)]),
    ("CREATE SEQUENCE s", "SELECT COUNT(*) FROM duckdb_sequences()", [(0,)]),
    ("CREATE SCHEMA s2", "SELECT COUNT(*) FROM duckdb_schemas() WHERE schema_name = 's2'",
     [(0,)]),
    ("ATTACH ':memory:' AS m",
     "SELECT COUNT(*) FROM duckdb_databases() WHERE database_name = 'm'", [(0,)]),
    ("SET VARIABLE v = 42", "SELECT getvariable('v')", [(None,)]),
]


@pytest.mark.parametrize(("statement", "probe", "expected"), PERSISTENT,
                         ids=[p[0].split(" AS")[0][:30] for p in PERSISTENT])
def test_one_use_leaves_nothing_for_the_next(statement, probe, expected):
    with scratch() as con:
        con.execute(statement)
    with scratch() as con:
        assert con.execute(probe).fetchall() == expected


@pytest.mark.parametrize("statement", [
    "SET memory_limit = '100GB'", "SET threads = 64", "SET enable_external_access = true",
    "RESET lock_configuration", "PRAGMA disable_optimizer", "SET GLOBAL TimeZone = 'UTC'",
    "SET autoload_known_extensions = true", "SET python_enable_replacements = true",
    "SET temp_directory = '/tmp'",
])
def test_the_configuration_is_locked(statement):
    with scratch() as con, pytest.raises(duckdb.Error):
        con.execute(statement)


def test_python_variables_are_not_scanned():
    secret_rows = pa.table({"x": [42]})  # noqa: F841 - what a replacement scan would read
    with scratch() as con, pytest.raises(duckdb.Error):
        con.execute("SELECT * FROM secret_rows").fetchall()


def test_run_checks_the_sql_before_executing_it():
    import sqlglot
    from sqlglot import exp

    from dpsql.errors import UnsupportedQueryError
    from dpsql.scratch import run

    tree = sqlglot.parse_one("SELECT CAST(1 AS INT) AS x")
    tree.find(exp.DataType).replace(exp.DataType(
        this=exp.DataType.Type.USERDEFINED,
        kind="INT) AS x; CREATE MACRO round(x, y) AS 4242; SELECT CAST(1 AS INT"))
    with scratch() as con:
        with pytest.raises(UnsupportedQueryError, match="output check"):
            run(con, tree)
        # nothing ran: the macro was never created, even in this database
        assert con.execute("SELECT round(2.5::DOUBLE, 0)").fetchall() == [(3.0,)]


def test_a_poisoned_scratch_use_cannot_change_another_analysts_answer(tmp_path, monkeypatch):
    """The issue's attack: a macro defined in one use changed ROUND(COUNT(*), 0) elsewhere."""
    import dataclasses

    import dpsql
    import dpsql.postprocess
    from dpsql.datasets import load_pums, pums_catalog

    path = tmp_path / "pums.duckdb"
    load_pums(path)
    catalog = dataclasses.replace(pums_catalog(), budget=None)
    conn = dpsql.connect(path, catalog=catalog, budget=(100.0, 1e-3), ledger=":memory:")
    try:
        # the attacker's route: anything run in one post-processing database
        with scratch() as con:
            con.execute("CREATE MACRO round(x, y) AS 4242")
            con.execute("CREATE TABLE __noisy AS SELECT 4242 AS n, 0 AS __rid")
        dpsql.postprocess._bind.cache_clear()
        for sql in ("SELECT ROUND(COUNT(*), 0) AS n FROM pums",
                    "SELECT sex, ROUND(COUNT(*), 0) AS n FROM pums GROUP BY sex ORDER BY n"):
            res = conn.execute(sql, epsilon=1.0)
            assert all(300 < row[-1] < 1300 for row in res.rows), res.rows  # not 4242
    finally:
        conn.close()


# -- issue 23: databases opened ahead of use, each still used once ---------------------


def test_a_database_is_handed_out_once_even_from_the_spares():
    from dpsql import scratch as module

    seen = []
    for _ in range(12):
        with scratch() as con:
            seen.append(con)  # kept alive so that no id is reused
            # a handed-out database has run nothing: no table, no macro, no variable
            assert con.execute("SELECT COUNT(*) FROM duckdb_tables()").fetchall() == [(0,)]
            con.execute("CREATE TABLE left_behind AS SELECT 1 AS x")
        module.settle()
    assert len({id(c) for c in seen}) == len(seen)


def test_spares_are_opened_in_the_background():
    from dpsql import scratch as module

    with scratch():
        pass
    assert module.settle(10.0)
    assert len(module._SPARES.ready) == module._spares_wanted() > 0


def test_no_spares_when_turned_off(monkeypatch):
    from dpsql import scratch as module

    monkeypatch.setenv(module.SPARES_ENV, "0")
    pool = module._Spares()
    assert pool.take() is None and pool.thread is None


def test_the_process_exits_cleanly_with_an_opening_under_way():
    """A daemon thread stopped inside DuckDB's C++ at exit aborts the process."""
    import subprocess
    import sys

    code = ("from dpsql.scratch import scratch\n"
            "for _ in range(3):\n"
            "    with scratch() as con: con.execute('SELECT 1').fetchall()\n")
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr


def test_a_forked_child_never_takes_its_parents_spares():
    import os

    from dpsql import scratch as module

    with scratch():
        pass
    module.settle()
    parents = {id(c) for c in module._SPARES.ready}
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its pool starts empty
        try:
            ok = not module._SPARES.ready and module._SPARES.thread is None
            with scratch() as con:
                ok = ok and id(con) not in parents
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)


def test_used_databases_waiting_to_be_closed_stay_few():
    """Many uses at once outpace the thread that closes used databases (about 4 ms
    each): past a small backlog each use closes its own (attack review: 16 threads took
    the process past 15 GB)."""
    from dpsql import scratch as module

    most, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            most[0] = max(most[0], len(module._SPARES.used))

    def work() -> None:
        for _ in range(25):
            with scratch() as con:
                con.execute("SELECT 1").fetchall()

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert most[0] <= module._BACKLOG


def test_a_thread_that_cannot_start_leaves_nothing_parked(monkeypatch):
    """Attack review: a failed start kept a dead thread on record, and every used
    database was then parked for it, open, forever."""
    from dpsql import scratch as module

    pool = module._Spares()
    real = threading.Thread.start

    def refuse(self):
        if self.name == "dpsql-scratch":
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    for _ in range(5):
        con = pool.take() or module._open()
        con.execute("SELECT 1").fetchall()
        pool.discard(con)
    assert pool.used == [] and pool.ready == []
    monkeypatch.setattr(threading.Thread, "start", real)
    assert pool.take() is None  # this use wakes a thread that now starts
    assert pool.settle(10.0) and len(pool.ready) == module._spares_wanted()
    pool.close()
