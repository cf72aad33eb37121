"""The bundled PUMS sample, the TPC-H loader, and their catalogs.

The data are the US Census PUMS sample published with SmartNoise SQL's test data
(see ``dpsql/data/pums/README.md``).

>>> sorted(load_catalog(catalog_path("pums")).tables)
['pums']
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import duckdb

from dpsql.catalog import Catalog, load_catalog
from dpsql.errors import BackendError

_TYPES = {"int": "BIGINT", "float": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN",
          "date": "DATE", "timestamp": "TIMESTAMP"}

#: Bundled tables: name → (CSV file, catalog name).
PUMS_TABLES = {"pums": "pums.csv", "pums_dup": "pums_dup.csv"}


def catalog_path(name: str) -> Path:
    """Path of a bundled catalog (``pums`` or ``pums_dup``)."""
    here = Path(__file__).resolve().parent
    source_tree = here.parent / "catalog" / f"{name}.yaml"
    if source_tree.exists():
        return source_tree
    return Path(str(resources.files("dpsql._catalogs").joinpath(f"{name}.yaml")))


def pums_catalog() -> Catalog:
    """Both bundled PUMS tables in one catalog."""
    tables = {}
    for name in PUMS_TABLES:
        cat = load_catalog(catalog_path(name))
        tables.update(cat.tables)
    return Catalog(tables, dataset=cat.dataset, budget=cat.budget)


def data_path(filename: str) -> Path:
    return Path(str(resources.files("dpsql.data").joinpath("pums", filename)))


def load_pums(database: str | Path | duckdb.DuckDBPyConnection) -> None:
    """Creates (or replaces) the tables ``pums`` and ``pums_dup`` in a DuckDB database.

    Column types come from the bundled catalogs, so the database matches them. Re-run
    (a notebook cell run again) while a dpsql connection or SQLAlchemy engine reads the
    file, it does nothing if the file already holds exactly the bundled tables, and
    otherwise says what to close: DuckDB lets no writer open a file that is being read.

    Raises:
        BackendError: the file is open elsewhere and does not hold the bundled tables.
    """
    if isinstance(database, duckdb.DuckDBPyConnection):
        _load_pums(database)
        return
    try:
        con = duckdb.connect(str(database))
    except duckdb.Error:
        con = None
    if con is None:
        if _holds_pums(database):
            return
        raise BackendError(
            f"cannot write {str(database)!r}: it is open in this Python process (a "
            "dpsql connection or SQLAlchemy engine over it, or a duckdb.connect(...)) or "
            "in another process; close it first (conn.close(), engine.dispose(), "
            "con.close()) and run load_pums again")
    try:
        _load_pums(con)
    finally:
        con.close()


def _load_pums(con: duckdb.DuckDBPyConnection) -> None:
    for table, filename in PUMS_TABLES.items():
        cat = load_catalog(catalog_path(table)).table(table)
        types = {c.name: _TYPES[c.type] for c in cat.columns.values()}
        con.execute(
            f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_csv(?, header=true, "
            f"types={types!r})",
            [str(data_path(filename))],
        )
    # one row per person in pums: declared, so dpsql can skip the per-user aggregate
    con.execute("ALTER TABLE pums ADD PRIMARY KEY (pid)")


def _holds_pums(database: str | Path) -> bool:
    """Whether the file already holds the bundled tables, row for row (read-only)."""
    try:
        con = duckdb.connect(str(database), read_only=True)
    except duckdb.Error:
        return False
    try:
        for table, filename in PUMS_TABLES.items():
            cat = load_catalog(catalog_path(table)).table(table)
            types = {c.name: _TYPES[c.type] for c in cat.columns.values()}
            bundled = (f"SELECT * FROM read_csv(?, header=true, types={types!r})")
            diff = con.execute(
                f"SELECT (SELECT count(*) FROM (SELECT * FROM {table} EXCEPT ALL {bundled})) "
                f"+ (SELECT count(*) FROM ({bundled} EXCEPT ALL SELECT * FROM {table}))",
                [str(data_path(filename))] * 2).fetchone()[0]
            if diff != 0:
                return False
        return True
    except duckdb.Error:
        return False
    finally:
        con.close()


#: TPC-H tables and their primary keys (declared in DuckDB: joins along foreign keys
#: need the referenced keys to be unique in the database).
TPCH_KEYS = {"customer": ["c_custkey"], "orders": ["o_orderkey"],
             "lineitem": ["l_orderkey", "l_linenumber"], "nation": ["n_nationkey"],
             "region": ["r_regionkey"], "part": ["p_partkey"], "supplier": ["s_suppkey"],
             "partsupp": ["ps_partkey", "ps_suppkey"]}


def tpchgen() -> str:
    """Path of the ``tpchgen-cli`` executable (PyPI package ``tpchgen-cli``)."""
    import shutil
    import sys

    here = Path(sys.executable).parent / "tpchgen-cli"
    found = str(here) if here.exists() else shutil.which("tpchgen-cli")
    if not found:
        raise FileNotFoundError("tpchgen-cli is not installed: pip install tpchgen-cli")
    return found


def load_tpch(database: str | Path, scale: float = 0.01, workdir: str | Path | None = None,
              ) -> None:
    """Generates TPC-H at ``scale`` offline (tpchgen-cli) and loads it into DuckDB.

    Tables get their primary keys, so dpsql can verify the foreign-key joins to the
    user (customer).
    """
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(workdir) if workdir else Path(tmp)
        subprocess.run([tpchgen(), "parquet", "-s", str(scale), f"--output-dir={out}"],
                       check=True, capture_output=True)
        con = duckdb.connect(str(database))
        try:
            for table, key in TPCH_KEYS.items():
                con.execute(f"CREATE OR REPLACE TABLE {table} AS "
                            f"SELECT * FROM read_parquet(?)", [str(out / f"{table}.parquet")])
                con.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({', '.join(key)})")
        finally:
            con.close()
