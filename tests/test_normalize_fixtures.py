"""Golden fixtures of the normalisation passes (:mod:`dpsql.normalize`), text and meaning.

``tests/fixtures/normalize/<pass>.sql`` holds cases: an analyst query, then the query
after all passes (which must be exactly what the pass produces). Each case is then run
on DuckDB over the exact PUMS data, once as the analyst wrote it and once as normalised,
and both must return the same rows: the pass must not change what the query means.
Where the analyst's spelling is not DuckDB's (``VAR``, ``STD``), a ``# reference:``
line before the case gives the same statistic in DuckDB's own words, run instead. The
PUMS tables are also visible as ``pums.pums`` there, as in a SmartNoise database.

Regenerate after an intended change with ``DPSQL_REGEN_FIXTURES=1 pytest
tests/test_normalize_fixtures.py`` and review the diff.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import duckdb
import pytest

from dpsql.datasets import pums_catalog
from dpsql.normalize import PASSES, normalize
from dpsql.parse import parse
from dpsql.validate import validate
from tests.support import read_cases, write_cases

FIXTURES = Path(__file__).parent / "fixtures" / "normalize"
REGEN = os.environ.get("DPSQL_REGEN_FIXTURES") == "1"
#: ``# reference: SQL`` before a case: the same statistic in DuckDB's own words.
OPTIONS = {"reference": str}


def all_cases():
    for path in sorted(FIXTURES.glob("*.sql")):
        for i, case in enumerate(read_cases(path, OPTIONS)[1]):
            yield pytest.param(path, i, case, id=f"{path.stem}-{i}")


@pytest.fixture(scope="module")
def exact(pums_file):
    """The PUMS data in a scratch DuckDB, as ``pums`` and as ``pums.pums``."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{pums_file}' AS src (READ_ONLY)")
    con.execute("CREATE SCHEMA pums")
    for table in ("pums", "pums_dup"):
        con.execute(f"CREATE TABLE main.{table} AS SELECT * FROM src.{table}")
        con.execute(f"CREATE TABLE pums.{table} AS SELECT * FROM src.{table}")
    con.execute("DETACH src")
    yield con
    con.close()


def _rows(con, sql: str):
    cur = con.execute(sql)
    return sorted(cur.fetchall(), key=repr)


def _same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for r, s in zip(a, b, strict=True):
        for x, y in zip(r, s, strict=True):
            if isinstance(x, int | float) and isinstance(y, int | float):
                if not math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True


@pytest.mark.parametrize(("path", "index", "case"), list(all_cases()))
def test_fixture(path, index, case, exact):
    catalog = pums_catalog()
    got = validate(normalize(parse(case["sql"]), catalog)).sql(dialect="duckdb")
    if REGEN:
        header, cases = read_cases(path, OPTIONS)
        cases[index]["expected"] = got
        write_cases(path, header, cases)
    else:
        assert case["expected"] not in (None, "TODO"), f"{path.name}: case {index} unfilled"
        assert got == case["expected"]
    original = _rows(exact, case["options"].get("reference") or case["sql"])
    assert _same(original, _rows(exact, got)), (original, _rows(exact, got))


def test_every_pass_has_fixtures():
    assert {p.stem for p in FIXTURES.glob("*.sql")} == {p.__name__ for p in PASSES}
