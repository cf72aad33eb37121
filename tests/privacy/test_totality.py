"""CI slice and regressions of the extreme-value totality fuzzer (issue 19, item 2).

DESIGN.md invariant 5: nothing between the charge and the release may fail. The slice
runs :mod:`tests.privacy.totality` with fixed seeds on every backend present here
(:data:`~tests.privacy.totality.CI_SLICE`: DuckDB and SQLite always; PostgreSQL when
``DPSQL_TEST_POSTGRES_URL`` and ``DPSQL_TEST_POSTGRES_ADMIN_URL`` are set; Spark when
pyspark and Java are installed, with a small slice because Spark starts slowly) and
fails on any error after the charge, any exception that is not a ``DpsqlError`` and any
two group keys read back as one. It prints how many queries it ran, answered and
refused per backend, so a grammar that stops reaching the answer path shows.

Every finding of a longer run (``python -m tests.privacy.totality --minutes N
--corpus``) is kept in ``totality_corpus.json`` as (backend, query, parameters) and
replayed here on the same world: it must be answered or refused before the charge.
"""

from __future__ import annotations

import pytest

from tests.privacy import totality as tz

#: fuzzing and its corpus: left out by pytest -m "not slow"
pytestmark = pytest.mark.slow

_SLICE = {backend: (seed, n) for backend, seed, n in tz.CI_SLICE}


@pytest.fixture(scope="module")
def worlds():
    """One world per backend, built on first use; Unavailable remembered as a skip."""
    built: dict[str, object] = {}

    def get(backend: str):
        if backend not in built:
            try:
                built[backend] = tz.build_world(backend)
            except tz.Unavailable as exc:
                built[backend] = exc
        world = built[backend]
        if isinstance(world, tz.Unavailable):
            pytest.skip(str(world))
        return world

    yield get
    for world in built.values():
        if isinstance(world, tz.World) and world.close:
            world.close()


@pytest.mark.parametrize("backend", tz.BACKENDS)
def test_totality_slice(backend, worlds, capsys):
    seed, queries = _SLICE[backend]
    world = worlds(backend)
    stats, findings = tz.fuzz(backend, seed, queries=queries, reduce_seconds=5.0,
                              world=world)
    with capsys.disabled():
        print(f"\ntotality slice (seed {seed}) {stats.line()}")
    # the grammar must keep reaching the answer path, or the slice proves little
    assert stats.answered >= 0.1 * stats.queries, stats.line()
    if findings:
        pytest.fail(
            f"{len(findings)} failure classes after the charge on {backend} "
            f"({stats.line()}); reproduce with python -m tests.privacy.totality "
            f"--backend {backend} --seed {seed} --queries {queries}\n\n"
            + "\n".join(f"[query {f.number}] {f.signature} {tz.known_classes(f)}\n"
                        f"  error: {f.error[:300]}\n  query: {f.reduced}" for f in findings))


def _corpus_cases():
    return [pytest.param(e["backend"], e["query"], e["params"],
                         id=f"{e['backend']}-{i}") for i, e in enumerate(tz.load_corpus())]


@pytest.mark.parametrize(("backend", "query", "params"), _corpus_cases())
def test_totality_regression(backend, query, params, worlds):
    world = worlds(backend)
    conn = tz.connect(world)
    try:
        with tz.Watch() as watch:
            out = tz.run_one(conn, query, params, watch)
    finally:
        conn.close()
    assert out.kind in ("answered", "refused"), f"{out.error}\nquery: {query}"
