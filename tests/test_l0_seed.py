"""The L0 step's seed (dpsql.asking.l0_seed): the same for one connection and one query
text, another for another text or another connection, and never a function of the data."""

from __future__ import annotations

import re

import duckdb
import pytest

import dpsql
from dpsql.asking import l0_seed
from dpsql.datasets import catalog_path, load_pums

#: pums_dup has several rows per person, so grouping by educ needs the L0 step.
GROUPED = "SELECT educ, COUNT(*) AS n FROM pums_dup GROUP BY educ"
#: The L0 order as the final DuckDB SQL writes it: HASH(uid, keys..., seed).
_HASH = re.compile(r"HASH\((?:[^()]|\([^()]*\))*?, (\d+)\)")


def _seeds(sql: str) -> set[int]:
    return {int(s) for s in _HASH.findall(sql)}


def _conn(db, **kwargs):
    return dpsql.connect(db, catalog=catalog_path("pums_dup"), budget=(1000.0, 1e-3),
                         ledger=":memory:", plan_cache=False, **kwargs)


def _final_sql(conn, sql: str) -> str:
    conn.execute(sql, epsilon=1.0, delta=1e-6)
    return conn._backend._last_sql[1]  # the text the backend ran (the L0 step's seed)


@pytest.fixture()
def db():
    con = duckdb.connect()
    load_pums(con)
    yield con
    con.close()


def test_one_connection_one_text_one_seed_without_the_plan_cache(db):
    conn = _conn(db)
    first = _final_sql(conn, GROUPED)
    seeds = _seeds(first)
    assert len(seeds) == 1  # the query has an L0 step, and one seed
    assert _final_sql(conn, GROUPED) == first  # analysed again: the same text
    other = _final_sql(conn, GROUPED.replace("COUNT(*) AS n", "COUNT(*) AS m"))
    assert _seeds(other) and _seeds(other) != seeds  # another text, another seed


def test_another_connection_draws_another_seed(db):
    # the per-connection secret: with a constant one every session would keep the
    # same groups of every user forever (fails when _seed_secret is made constant)
    seeds = {frozenset(_seeds(_final_sql(_conn(db), GROUPED))) for _ in range(3)}
    assert len(seeds) == 3


def test_the_seed_does_not_depend_on_the_data(db):
    # neighbouring databases (one person's rows removed), one secret: the same seed, so
    # the L0 choice of every other person is the same in both (the sensitivity argument
    # of dpsql.rewrite.bound_groups holds for any seed the data did not choose)
    other = duckdb.connect()
    load_pums(other)
    other.execute("DELETE FROM pums_dup WHERE pid = (SELECT min(pid) FROM pums_dup)")
    a, b = _conn(db), _conn(other)
    b._seed_secret = a._seed_secret
    assert _seeds(_final_sql(a, GROUPED)) == _seeds(_final_sql(b, GROUPED))
    other.close()


def test_a_query_that_is_not_cached_gets_a_fresh_seed():
    assert l0_seed(b"k" * 32, None) is None  # the analysis draws a random one
    seed = l0_seed(b"k" * 32, "SELECT 1")
    assert 0 <= seed < 2**31 and seed == l0_seed(b"k" * 32, "SELECT 1")
    assert seed != l0_seed(b"j" * 32, "SELECT 1")


def test_explain_shows_the_seed_execute_runs(db):
    """Attack review: explain drew its own random seed, so the SQL it showed as what the
    backend runs was not what execute ran."""
    conn = _conn(db)
    shown = conn.explain(GROUPED, epsilon=1.0, delta=1e-6).sql
    ran = conn.execute(GROUPED, epsilon=1.0, delta=1e-6).sql
    assert _seeds(shown) and _seeds(shown) == _seeds(ran)
