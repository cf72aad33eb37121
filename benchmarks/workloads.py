"""Workloads: a data set at several sizes, its catalog, its privacy unit and queries.

``PUMS`` runs today. ``TPCH`` (customer as the privacy unit, data from ``tpchgen-cli``)
is declared but skipped until dpsql answers joins (issue 5): when it does, fill in
:meth:`Tpch.database` (``tpchgen-cli -s SF --format parquet`` into ``benchmarks/data``,
loaded into DuckDB), its catalog (``lineitem → orders → customer`` foreign-key paths)
and its queries, and drop :attr:`Tpch.skip_reason`; the runner needs no other change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks import data
from benchmarks.queries import QUERIES, Query


@dataclass
class Workload:
    name: str
    unit: str
    queries: tuple[Query, ...]
    #: Why the workload is not run (None: it runs).
    skip_reason: str | None = None

    def database(self, size: int, seed: int = 0) -> Path:
        raise NotImplementedError

    def catalog(self, size: int) -> dict:
        raise NotImplementedError

    def rows(self, database: Path) -> int:
        raise NotImplementedError


class Pums(Workload):
    def __init__(self):
        super().__init__("pums_dup", "person (pid), 1–4 rows each", QUERIES)

    def database(self, size: int, seed: int = 0) -> Path:
        return data.pums_dup_database(size, seed)

    def catalog(self, size: int) -> dict:
        return data.catalog(f"bench_pums_dup_{size}")

    def rows(self, database: Path) -> int:
        return data.people_and_rows(database)[1]


class Tpch(Workload):
    def __init__(self):
        super().__init__("tpch", "customer (c_custkey)", (),
                         skip_reason="waiting for joins, issue 5")


WORKLOADS = (Pums(), Tpch())
