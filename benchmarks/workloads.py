"""Workloads: a data set at several sizes, its catalog, its privacy unit and queries.

A workload's *size* is what its generator takes: people for PUMS, the scale factor for
TPC-H. The runner (:mod:`benchmarks.run`) knows nothing else about a workload than
what :class:`Workload` declares; the sizes each configuration runs are in
:mod:`benchmarks.config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks import data
from benchmarks.queries import PUMS, Query
from benchmarks.tpch_queries import TPCH


@dataclass
class Workload:
    """A data set and its queries.

    Attributes:
        name: key of the workload in the results and in :class:`benchmarks.config.Config`.
        title: name for the report.
        unit: the privacy unit, for the report.
        queries: the queries, in the report's order.
        tables: tables the benchmark reads once before timing (so that no timed run pays
            for I/O).
        size_unit: what a size counts ("people", "scale factor").
        skip_reason: why the workload is not run (None: it runs).
    """

    name: str
    title: str
    unit: str
    queries: tuple[Query, ...]
    tables: tuple[str, ...]
    size_unit: str
    skip_reason: str | None = None

    def database(self, size: float, seed: int = 0) -> Path:
        """Path of a DuckDB file holding the data set at ``size`` (built if absent)."""
        raise NotImplementedError

    def catalog(self, size: float) -> dict:
        """The catalog as a dict, without its budget (the benchmark sets its own)."""
        raise NotImplementedError

    def counts(self, database: Path) -> tuple[int, int]:
        """(users, rows) of a generated database: privacy units and rows of its main table."""
        raise NotImplementedError

    def size_label(self, size: float) -> str:
        """A size for people to read: ``1,000,000 people``, ``sf 0.1``."""
        return f"{size:,} {self.size_unit}"

    def describe(self) -> str:
        """One markdown paragraph on the data, catalog and privacy unit."""
        raise NotImplementedError


def size_key(size: float) -> str:
    """A size as results key it: ``1000000``, ``0.1``, ``1``."""
    return str(int(size)) if float(size).is_integer() else f"{size:g}"


class Pums(Workload):
    def __init__(self):
        super().__init__("pums_dup", "PUMS, resampled", "person (pid), 1–4 rows each", PUMS,
                         (data.TABLE,), "people")

    def database(self, size: float, seed: int = 0) -> Path:
        return data.pums_dup_database(int(size), seed)

    def catalog(self, size: float) -> dict:
        return data.catalog(f"bench_pums_dup_{size_key(size)}")

    def counts(self, database: Path) -> tuple[int, int]:
        return data.people_and_rows(database)

    def size_label(self, size: float) -> str:
        return f"{int(size):,} people"

    def describe(self) -> str:
        return ("**PUMS, resampled** (`pums_dup`, catalog `catalog/pums_dup.yaml`: `max_rows` "
                "3, `max_groups` 1): each new person copies one of the 1,000 bundled PUMS rows, "
                "1–4 times as in `pums_dup.csv`; generated in DuckDB by `benchmarks/data.py` and "
                f"cached under `benchmarks/data/`. Privacy unit: {self.unit}.")


class Tpch(Workload):
    def __init__(self):
        super().__init__("tpch", "TPC-H", "customer (c_custkey)", TPCH, data.TPCH_TABLES,
                         "scale factor", skip_reason=data.tpchgen_missing())

    def database(self, size: float, seed: int = 0) -> Path:
        return data.tpch_database(size)

    def catalog(self, size: float) -> dict:
        return data.tpch_catalog(f"bench_tpch_sf{size_key(size)}")

    def counts(self, database: Path) -> tuple[int, int]:
        return data.tpch_counts(database)

    def size_label(self, size: float) -> str:
        return f"sf {size:g}"

    def describe(self) -> str:
        return ("**TPC-H** (catalog `catalog/tpch.yaml`), generated offline by `tpchgen-cli` "
                "(`dpsql.datasets.load_tpch`: parquet loaded into DuckDB with every table's "
                "PRIMARY KEY) and cached under `benchmarks/data/`. Privacy unit: "
                f"{self.unit}; `orders` holds the user key (`o_custkey`; `max_rows` 10, "
                "`max_groups` 4), `lineitem` reaches it through `orders` (foreign-key path; "
                "`max_rows` 40, `max_groups` 4); nation, region, part, supplier and partsupp "
                "are public. *Users* below are customers, *rows* those of `lineitem`.")


WORKLOADS: tuple[Workload, ...] = (Pums(), Tpch())


def get(name: str) -> Workload:
    """The workload called ``name``."""
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")
