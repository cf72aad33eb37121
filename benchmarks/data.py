"""Benchmark data sets, generated offline and cached under ``benchmarks/data/``.

TPC-H at any scale factor: ``tpchgen-cli`` (PyPI) writes parquet, which
:func:`dpsql.datasets.load_tpch` loads into DuckDB with every table's PRIMARY KEY.

PUMS resampled to any number of people: every new person (``pid`` 1..N) copies one of
the 1,000 bundled PUMS rows and repeats it 1–4 times, with the distribution of repeats
in the bundled ``pums_dup.csv`` (41.8 % once, 30.9 % twice, 18.0 % three times, 9.3 %
four times: 1.948 rows per person). The columns and types are those of
``catalog/pums_dup.yaml`` and the table is called ``pums_dup``. The choice of row and
the number of repeats come from DuckDB's ``hash`` of the person's id and a seed, so the
same (people, seed) always gives the same table; the rows are stored in a hashed order,
not clustered by person.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import duckdb
import yaml

from dpsql.datasets import TPCH_KEYS, catalog_path, data_path, load_tpch, tpchgen

DATA_DIR = Path(__file__).resolve().parent / "data"
#: Bump when the generator changes, so stale cached files are not reused.
GENERATOR_VERSION = 1
TABLE = "pums_dup"
_TYPES = {"int": "BIGINT", "float": "DOUBLE"}

#: TPC-H tables (the benchmark reads them all once before timing).
TPCH_TABLES = tuple(TPCH_KEYS)
#: Bump when the TPC-H loading changes, so stale cached files are not reused.
TPCH_VERSION = 1

#: Cumulative repeat distribution of the bundled pums_dup.csv, in thousandths.
_REPEATS = ((418, 1), (727, 2), (907, 3), (1000, 4))


def catalog(dataset: str) -> dict:
    """The bundled ``pums_dup`` catalog as a dict, without its budget.

    The benchmark runs many queries; it gives each connection its own large budget in
    an in-memory ledger, which the catalog's ``budget:`` would otherwise cap.
    """
    with open(catalog_path("pums_dup")) as f:
        cat = yaml.safe_load(f)
    cat.pop("budget", None)
    cat["dataset"] = dataset
    return cat


def generator_sql(people: int, seed: int) -> list[str]:
    """The statements that build ``pums_dup`` with ``people`` people (for reading)."""
    cols = catalog("x")["tables"][TABLE]["columns"]
    types = {name: _TYPES[c["type"]] for name, c in cols.items()}
    repeats = " ".join(f"WHEN u < {t} THEN {r}" for t, r in _REPEATS[:-1])
    source = str(data_path("pums.csv")).replace("'", "''")
    return [
        f"CREATE TEMP TABLE source AS SELECT row_number() OVER (ORDER BY pid) - 1 AS rid, "
        f"* EXCLUDE (pid) FROM read_csv('{source}', header = true, types = {types!r})",
        f"""CREATE TABLE {TABLE} AS
WITH people AS (
    SELECT range + 1 AS pid,
           hash(range, {seed}, 'row') % (SELECT count(*) FROM source) AS rid,
           hash(range, {seed}, 'repeats') % 1000 AS u
    FROM range({people})),
repeated AS (
    SELECT pid, rid, CASE {repeats} ELSE {_REPEATS[-1][1]} END AS repeats FROM people)
SELECT s.age, s.sex, s.educ, s.race, s.income, s.married, p.pid
FROM repeated AS p
JOIN source AS s USING (rid)
JOIN range(4) AS r(i) ON r.i < p.repeats
ORDER BY hash(p.pid, r.i, {seed})""",
    ]


def pums_dup_database(people: int, seed: int = 0, data_dir: Path = DATA_DIR) -> Path:
    """Path of a DuckDB file holding ``pums_dup`` with ``people`` people (built if absent)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"pums_dup_{people}_s{seed}_v{GENERATOR_VERSION}.duckdb"
    if path.exists():
        return path
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        for statement in generator_sql(people, seed):
            con.execute(statement)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    tmp.rename(path)
    return path


def sqlite_copy(database: Path) -> Path:
    """An SQLite copy of ``pums_dup`` (for peers that cannot read DuckDB), cached."""
    path = database.with_suffix(".sqlite")
    if path.exists():
        return path
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    src = duckdb.connect(str(database), read_only=True)
    dst = sqlite3.connect(str(tmp))
    try:
        types = {r[0]: r[1] for r in src.execute(f"DESCRIBE {TABLE}").fetchall()}
        cols = list(types)
        decl = ", ".join(f"{c} {'REAL' if types[c] == 'DOUBLE' else 'INTEGER'}" for c in cols)
        dst.execute(f"CREATE TABLE {TABLE} ({decl})")
        cur = src.execute(f"SELECT {', '.join(cols)} FROM {TABLE}")
        insert = f"INSERT INTO {TABLE} VALUES ({', '.join('?' * len(cols))})"
        while rows := cur.fetchmany(100_000):
            dst.executemany(insert, rows)
        dst.commit()
    finally:
        src.close()
        dst.close()
    tmp.rename(path)
    return path


def people_and_rows(database: Path) -> tuple[int, int]:
    """(people, rows) of a generated database."""
    con = duckdb.connect(str(database), read_only=True)
    try:
        return con.execute(f"SELECT count(DISTINCT pid), count(*) FROM {TABLE}").fetchone()
    finally:
        con.close()


# -- TPC-H ---------------------------------------------------------------------------


def tpchgen_missing() -> str | None:
    """Why TPC-H cannot be generated here (None: ``tpchgen-cli`` is installed)."""
    try:
        tpchgen()
    except FileNotFoundError:
        return "tpchgen-cli is not installed (pip install tpchgen-cli)"
    return None


def tpch_database(scale: float, data_dir: Path = DATA_DIR) -> Path:
    """Path of a DuckDB file holding TPC-H at scale factor ``scale`` (built if absent)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    label = str(int(scale)) if float(scale).is_integer() else f"{scale:g}"
    path = data_dir / f"tpch_sf{label}_v{TPCH_VERSION}.duckdb"
    if path.exists():
        return path
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    for stale in (tmp, tmp.with_name(f"{tmp.name}.wal")):
        stale.unlink(missing_ok=True)
    load_tpch(tmp, scale=scale)
    con = duckdb.connect(str(tmp))
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()
    tmp.rename(path)
    return path


def tpch_catalog(dataset: str) -> dict:
    """The bundled ``tpch`` catalog as a dict, without its budget (see :func:`catalog`)."""
    with open(catalog_path("tpch")) as f:
        cat = yaml.safe_load(f)
    cat.pop("budget", None)
    cat["dataset"] = dataset
    return cat


def tpch_counts(database: Path) -> tuple[int, int]:
    """(customers, lineitem rows) of a TPC-H database."""
    con = duckdb.connect(str(database), read_only=True)
    try:
        return con.execute("SELECT (SELECT count(*) FROM customer), "
                           "(SELECT count(*) FROM lineitem)").fetchone()
    finally:
        con.close()
