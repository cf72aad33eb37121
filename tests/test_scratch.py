"""The shared in-memory DuckDB for post-processing: isolated uses, threads, no files."""

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
            for j in range(30):
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
