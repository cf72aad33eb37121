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


#: Spark: operations off its allow-list, each on a value the world holds where Spark
#: raises even with ANSI mode off. (query, what the final SQL must hold, or None: refused
#: before the charge.)
SPARK_OFF_LIST = (
    # -x of DECIMAL(38,10) 9999999999999999999999999999.9999999999 raises
    # NUMERIC_VALUE_OUT_OF_RANGE: guarded as TRY_SUBTRACT(0, x)
    ("SELECT SUM(CASE WHEN pid > 1000 THEN -dec ELSE 0 END) AS a0 FROM people",
     "TRY_SUBTRACT(0, "),
    # a far timestamp minus another is an interval that overflows: TRY_SUBTRACT (TryEval)
    ("SELECT COUNT(*) AS a0 FROM people WHERE ts - TIMESTAMP '2000-01-01 00:00:00' "
     "> INTERVAL 1 DAY", "TRY_SUBTRACT(ts, "),
    # a DATE meeting a TIMESTAMP is converted per row ("long overflow" for a far date)
    ("SELECT COUNT(*) AS a0 FROM people WHERE d = ts", "TRY_CAST(d AS TIMESTAMP)"),
    # DATE_TRUNC raises near year -290308: a CASE keeps it to years 1..9999
    ("SELECT COUNT(*) AS a0 FROM people WHERE date_trunc('week', ts) > ts",
     "BETWEEN TRY_CAST('0001-01-01 00:00:00' AS TIMESTAMP)"),
    # a LIKE pattern read from a row is compiled per row; one ending in the escape
    # character raises: no Spark form guards it, so it is refused
    ("SELECT COUNT(*) AS a0 FROM people WHERE s LIKE CONCAT(s, '\\\\')", None),
)


@pytest.mark.parametrize(("query", "form"), SPARK_OFF_LIST,
                         ids=[f"spark-off-list-{i}" for i in range(len(SPARK_OFF_LIST))])
def test_spark_off_list_is_guarded_or_refused(query, form, worlds):
    """What is not on Spark's list is written in a Spark form that is (and then runs on
    the extreme rows without an error after the charge), or refused before the charge.
    Widen an entry (e.g. list the negation of a DECIMAL) and the first case fails after
    the charge."""
    world = worlds("spark")
    conn = tz.connect(world)
    try:
        if form is not None:
            assert form in conn.explain(query, epsilon=1.0, delta=1e-6).sql
        with tz.Watch() as watch:
            out = tz.run_one(conn, query, {"epsilon": 1.0, "delta": 1e-6}, watch)
    finally:
        conn.close()
    assert out.kind == ("answered" if form is not None else "refused"), out.error
