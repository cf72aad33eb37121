"""The answer cache: the same query asked again returns the answer already released,
free; any difference is a miss, answered afresh and charged (dpsql.answer_cache)."""

from __future__ import annotations

import datetime
import math
import os
import sqlite3
import time
from decimal import Decimal

import pytest
import yaml
from click.testing import CliRunner

import dpsql
from dpsql.answer_cache import CACHED_NOTE, clear, decode_result, encode_result
from dpsql.answer_derive import DERIVED_NOTE
from dpsql.datasets import catalog_path, load_pums
from dpsql.ledger import Ledger
from dpsql.result import Result
from tests.support import backend_of, ledger_of

QUERY = "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex"


@pytest.fixture()
def pums_file(tmp_path):
    path = tmp_path / "pums.duckdb"
    load_pums(path)
    return path


def _catalog(tmp_path, **extra):
    with open(catalog_path("pums")) as f:
        doc = yaml.safe_load(f)
    doc.pop("budget", None)
    doc.update(extra)
    return doc


def _conn(path, tmp_path, ledger=None, catalog=None, **kwargs):
    kwargs.setdefault("budget", (100.0, 1e-3))
    return dpsql.connect(path, catalog=catalog or _catalog(tmp_path),
                         ledger=str(ledger or tmp_path / "ledger.sqlite"),
                         answer_cache=kwargs.pop("answer_cache", True), **kwargs)


def _bits(rows):
    """Rows with every float as its bit pattern (so 0.0 and -0.0, NaNs, differ)."""
    return [tuple(v.hex() if isinstance(v, float) else (type(v), v) for v in row)
            for row in rows]


def _ledger_state(conn):
    led = ledger_of(conn)
    return (conn.budget.spent, led.log(limit=1000), led.verify()["entries"])


def test_a_hit_releases_nothing_new(pums_file, tmp_path):
    conn = _conn(pums_file, tmp_path)
    first = conn.execute(QUERY, epsilon=0.5)
    before = _ledger_state(conn)
    raw = (tmp_path / "ledger.sqlite").read_bytes()
    again = conn.execute(QUERY, epsilon=0.5)
    # bitwise the same answer, error bars and SQL; nothing written to the ledger
    assert _bits(again.rows) == _bits(first.rows)
    assert again.accuracy == first.accuracy and again.intervals == first.intervals
    assert again.columns == first.columns and again.sql == first.sql
    assert again.cost == (0.0, 0.0) and CACHED_NOTE in again.notes
    assert _ledger_state(conn) == before
    assert (tmp_path / "ledger.sqlite").read_bytes() == raw
    assert conn.budget.spent == (0.5, 0.0)


def test_the_cache_outlives_the_connection(pums_file, tmp_path):
    with _conn(pums_file, tmp_path) as conn:
        first = conn.execute(QUERY, epsilon=0.5)
    with _conn(pums_file, tmp_path) as conn:
        again = conn.execute(QUERY, epsilon=0.5)
        assert _bits(again.rows) == _bits(first.rows)
        assert conn.budget.spent == (0.5, 0.0)


@pytest.mark.parametrize("change", [
    {"epsilon": 0.25}, {"epsilon": 1}, {"delta": 1e-6}, {"max_rows": 2}, {"max_groups": 2},
    {"alpha": 0.1}, {"mechanism": "gaussian", "delta": 1e-6}, {"sql": QUERY + " "},
    {"sql": "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5) "
            + QUERY[len("SELECT "):]},
])
def test_any_key_difference_is_charged(pums_file, tmp_path, change):
    conn = _conn(pums_file, tmp_path)
    conn.execute(QUERY, epsilon=0.5)
    args = {"epsilon": 0.5, **change}
    sql = args.pop("sql", QUERY)
    res = conn.execute(sql, **args)
    assert CACHED_NOTE not in res.notes and res.cost[0] > 0
    assert conn.budget.spent[0] == pytest.approx(0.5 + res.cost[0])


def test_data_version_and_bounds_are_part_of_the_key(pums_file, tmp_path):
    with _conn(pums_file, tmp_path, catalog=_catalog(tmp_path, data_version=1)) as conn:
        conn.execute(QUERY, epsilon=0.5)
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.0, 0.0)
    with _conn(pums_file, tmp_path, catalog=_catalog(tmp_path, data_version=2)) as conn:
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)
    wider = _catalog(tmp_path, data_version=2)
    wider["tables"]["pums"]["columns"]["income"]["upper"] = 600_000
    with _conn(pums_file, tmp_path, catalog=wider) as conn:
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)
        assert conn.budget.spent == (1.5, 0.0)


def test_answers_are_per_analyst(pums_file, tmp_path):
    with _conn(pums_file, tmp_path, analyst="alice") as conn:
        conn.execute(QUERY, epsilon=0.5)
    with _conn(pums_file, tmp_path, analyst="bob") as conn:
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)


def test_off_by_default_and_when_asked(pums_file, tmp_path):
    with _conn(pums_file, tmp_path, answer_cache=None) as conn:
        conn.execute(QUERY, epsilon=0.5)
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)
    cat = _catalog(tmp_path, answer_cache=True)
    with _conn(pums_file, tmp_path, catalog=cat, answer_cache=None) as conn:
        conn.execute(QUERY, epsilon=0.5)
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.0, 0.0)
    with _conn(pums_file, tmp_path, catalog=cat, answer_cache=False) as conn:
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)


def test_a_failed_query_is_not_cached(pums_file, tmp_path, monkeypatch):
    import dpsql.answer_flow as engine

    conn = _conn(pums_file, tmp_path)
    real = engine.add_noise

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "add_noise", broken)
    with pytest.raises(dpsql.DpsqlError):
        conn.execute(QUERY, epsilon=0.5)
    monkeypatch.setattr(engine, "add_noise", real)
    assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)
    assert conn.budget.spent == (1.0, 0.0)


def test_clear(pums_file, tmp_path):
    conn = _conn(pums_file, tmp_path)
    conn.execute(QUERY, epsilon=0.5)
    assert clear(ledger_of(conn), dataset="nope") == 0
    assert clear(ledger_of(conn)) == 1
    assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)
    conn.close()
    from dpsql.cli import main

    out = CliRunner().invoke(main, ["cache", "clear", "--ledger",
                                    str(tmp_path / "ledger.sqlite")])
    assert out.exit_code == 0, out.output
    assert "cleared 1 cached answer" in out.output


def test_a_tampered_entry_is_refused(pums_file, tmp_path):
    conn = _conn(pums_file, tmp_path)
    conn.execute(QUERY, epsilon=0.5)
    ledger_of(conn).settle()  # its outcome and answer are written (dpsql.ledger.outcomes)
    raw = sqlite3.connect(tmp_path / "ledger.sqlite")
    raw.execute("UPDATE answers SET answer = replace(answer, '\"sex\"', '\"sex \"')")
    raw.commit()
    raw.close()
    with pytest.raises(dpsql.LedgerError, match="cached answer"):
        conn.execute(QUERY, epsilon=0.5)


def test_an_old_ledger_gets_the_table_on_first_use(pums_file, tmp_path):
    path = tmp_path / "old.sqlite"
    Ledger(str(path)).close()  # a version-3 ledger as an earlier dpsql wrote it
    raw = sqlite3.connect(path)
    assert "answers" not in {r[0] for r in raw.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    raw.close()
    with _conn(pums_file, tmp_path, ledger=path) as conn:
        conn.execute(QUERY, epsilon=0.5)
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.0, 0.0)
    led = Ledger(str(path), readonly=True)
    assert led.verify()["charges"] == 1  # the ledger's own checks still pass
    led.close()


def test_encoding_keeps_types_and_float_bits():
    rows = [(0.0, -0.0, math.inf, -math.inf, 1 / 3, 10**30, True, 0, None, "x'\"\n"),
            (datetime.date(2020, 2, 29), datetime.datetime(2020, 1, 1, 12, 30, 1, 5),
             datetime.time(1, 2), datetime.timedelta(days=-1, seconds=5), Decimal("1.10"),
             [1, 2], (1, (2,)), {"a": 1.5})]
    res = Result(columns=["a", "b"], rows=rows, accuracy=[(None, 0.1)], cost=(0.5, 1e-9),
                 sql="SELECT 1", split=[{"name": "__s0", "scale": 2.0}], notes=("n",),
                 intervals=[(None, (0.0, 1.0))], noisy=(False, True))
    back = decode_result(encode_result(res))
    assert back == res
    for a, b in zip(back.rows, res.rows, strict=True):
        assert [type(x) for x in a] == [type(x) for x in b]
    assert math.copysign(1, back.rows[0][1]) == -1
    nan = Result(columns=["a"], rows=[(math.nan,)], accuracy=[], cost=(0, 0), sql="")
    assert math.isnan(decode_result(encode_result(nan)).rows[0][0])
    with pytest.raises(TypeError):
        encode_result(Result(columns=["a"], rows=[(object(),)], accuracy=[], cost=(0, 0),
                             sql=""))


@pytest.mark.skipif(not os.environ.get("DPSQL_TEST_POSTGRES_ADMIN_URL"),
                    reason="no PostgreSQL test server (DPSQL_TEST_POSTGRES_ADMIN_URL)")
def test_postgres_ledger(pums_file, tmp_path):
    import secrets

    url = os.environ["DPSQL_TEST_POSTGRES_ADMIN_URL"]
    sep = "&" if "?" in url else "?"
    ledger = f"{url}{sep}schema=answers_{secrets.token_hex(4)}"
    with _conn(pums_file, tmp_path, ledger=ledger) as conn:
        first = conn.execute(QUERY, epsilon=0.5)
    with _conn(pums_file, tmp_path, ledger=ledger) as conn:
        again = conn.execute(QUERY, epsilon=0.5)
        assert _bits(again.rows) == _bits(first.rows) and again.cost == (0.0, 0.0)
        assert conn.budget.spent == (0.5, 0.0)
        # an AVG from the pointer and the core entry of a SUM and COUNT
        assert conn.execute(SUMS, epsilon=0.5).cost == (0.5, 0.0)
        assert conn.execute(AVGS, epsilon=0.5).cost == (0.0, 0.0)
        assert clear(ledger_of(conn)) == 2
        assert conn.execute(QUERY, epsilon=0.5).cost == (0.5, 0.0)


# -- answers derived from a cached one (dpsql.answer_derive) ----------------------------

def _no_backend(conn, monkeypatch):
    """Any read of the data from now on fails the test."""
    def refuse(*_a, **_k):
        raise AssertionError("the backend was asked")

    monkeypatch.setattr(backend_of(conn), "execute", refuse)


@pytest.mark.parametrize("post", [
    "HAVING n > 0 ORDER BY n DESC LIMIT 1",
    "ORDER BY 3",
    "HAVING COUNT(*) > 0 AND AVG(income) > -1e12 ORDER BY sex DESC",
    "ORDER BY avg_income LIMIT 5 OFFSET 1",
    "HAVING sex = {last}",
])
def test_post_processing_of_a_cached_answer_is_free(pums_file, tmp_path, monkeypatch, post):
    conn = _conn(pums_file, tmp_path)
    first = conn.execute(QUERY, epsilon=0.5)
    before = _ledger_state(conn)
    _no_backend(conn, monkeypatch)
    last = first.rows[-1][0]
    post = post.format(last=f"'{last}'" if isinstance(last, str) else last)
    derived = conn.execute(f"{QUERY} {post}", epsilon=0.5)
    assert derived.cost == (0.0, 0.0) and DERIVED_NOTE in derived.notes
    assert _ledger_state(conn) == before  # no charge, no entry
    # nothing new: each row (values and error bars) is one of the released rows
    released = dict(zip(_bits(first.rows), first.accuracy, strict=True))
    for row, acc in zip(_bits(derived.rows), derived.accuracy, strict=True):
        assert released[row] == acc
    assert len(derived.rows) <= len(first.rows)
    if "LIMIT 1" in post:
        assert derived.rows == [max(first.rows, key=lambda r: r[1])]
    if "HAVING sex" in post:
        assert [r[0] for r in derived.rows] == [last]
    if post == "ORDER BY 3":
        assert derived.rows == sorted(first.rows, key=lambda r: r[2])


@pytest.mark.parametrize(("first_sql", "then"), [
    # HAVING over an aggregate that was not released: needs the data
    (QUERY, f"{QUERY} HAVING SUM(income) > 0"),
    # a column that was not released
    (QUERY, f"{QUERY} ORDER BY MAX(age)"),
    # the first answer kept only one row: not every group is there to choose from
    (f"{QUERY} LIMIT 1", f"{QUERY} ORDER BY n"),
    (f"{QUERY} HAVING n > 0", f"{QUERY} ORDER BY n"),
])
def test_what_is_not_post_processing_of_a_released_answer_is_charged(pums_file, tmp_path,
                                                                     first_sql, then):
    conn = _conn(pums_file, tmp_path)
    conn.execute(first_sql, epsilon=0.5)
    again = conn.execute(then, epsilon=0.5)
    assert again.cost == (0.5, 0.0) and DERIVED_NOTE not in again.notes


def test_derivation_needs_the_same_epsilon_and_options(pums_file, tmp_path):
    conn = _conn(pums_file, tmp_path)
    conn.execute(QUERY, epsilon=0.5)
    assert conn.execute(f"{QUERY} ORDER BY n", epsilon=0.25).cost == (0.25, 0.0)
    assert conn.execute(f"{QUERY} ORDER BY n", epsilon=0.5, alpha=0.1).cost == (0.5, 0.0)
    opts = f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (intervals = 1) {QUERY[7:]} ORDER BY n"
    assert conn.execute(opts, epsilon=0.5).cost == (0.5, 0.0)
    assert conn.execute(f"{QUERY} ORDER BY n", epsilon=0.5).cost == (0.0, 0.0)


def test_core_entries_are_not_counted_as_answers(pums_file, tmp_path):
    conn = _conn(pums_file, tmp_path)
    conn.execute(f"{QUERY} LIMIT 1", epsilon=0.5)  # not stored as the core's answer
    conn.execute(QUERY, epsilon=0.5)  # charged; stored as itself and as the core's
    assert clear(ledger_of(conn)) == 2
    assert conn.execute(f"{QUERY} ORDER BY n", epsilon=0.5).cost == (0.5, 0.0)


# -- attacks on derivation: a free query may run only what a charged one may ------------

@pytest.mark.parametrize(("post", "refusal"), [
    # a function the fresh path refuses (validate's allow-list): with a large count it
    # built gigabytes in the server's memory, free
    ("HAVING length(repeat(CAST(n AS VARCHAR), 3)) > 0", "repeat"),
    # a REPLACE chain over the limit on computed values (max_value_length)
    ("HAVING length(replace(replace(CAST(n AS VARCHAR), '1', '{x}'), '1', '{x}')) > 0",
     "max_value_length"),
    # a CAST to a type validate refuses
    ("ORDER BY CAST(n AS BLOB)", "type"),
    # FETCH, PERCENT and WITH TIES were dropped: another query answered (16 rows for 1)
    ("ORDER BY n FETCH FIRST 1 ROWS ONLY", "FETCH"),
    ("LIMIT 10 PERCENT", "LIMITOPTIONS"),
    ("ORDER BY n LIMIT 1 WITH TIES", "LIMITOPTIONS"),
    # c0, c1, ... are derivation's own names for the columns, not the analyst's
    ("HAVING c1 > 0", "c1"),
])
def test_derivation_refuses_what_the_fresh_path_refuses(pums_file, tmp_path, post,
                                                         refusal):
    conn = _conn(pums_file, tmp_path)
    conn.execute(QUERY, epsilon=0.5)
    before = _ledger_state(conn)
    with pytest.raises(dpsql.DpsqlError, match=refusal) as info:
        conn.execute(f"{QUERY} {post.format(x='1' * 900)}", epsilon=0.5)
    assert not getattr(info.value, "charged", False)
    assert conn.budget.spent == before[0] == (0.5, 0.0)


def test_a_derived_answer_says_derived_not_repeated(pums_file, tmp_path):
    conn = _conn(pums_file, tmp_path)
    conn.execute(QUERY, epsilon=0.5)
    derived = conn.execute(f"{QUERY} ORDER BY n", epsilon=0.5)
    assert DERIVED_NOTE in derived.notes and CACHED_NOTE not in derived.notes


def test_long_released_keys_bound_derived_lengths(pums_file, tmp_path, monkeypatch):
    """The length bound of a released column is its longest released text."""
    from dpsql.answer_derive import derive, split

    base = Result(columns=["k", "n"], rows=[("x" * 5000, 1.0), ("y", 2.0)],
                  accuracy=[(None, 1.0)] * 2, cost=(0.5, 0.0), sql="")
    q = "SELECT k, COUNT(*) AS n FROM pums GROUP BY k"
    assert derive(base, split(f"{q} HAVING length(k || k) > 1")) is not None
    assert derive(base, split(f"{q} HAVING length(k || k || k) > 1")) is None


# -- AVG from a cached SUM and COUNT (dpsql.answer_avg) ----------------------------------

SUMS = "SELECT sex, SUM(income) AS s, COUNT(income) AS n FROM pums GROUP BY sex"
AVGS = "SELECT sex, AVG(income) AS a FROM pums GROUP BY sex"


def _avg_of(first, total=1, count=2, lower=0.0, upper=500000.0):
    """Per released row the AVG a derivation must give: clamp(S / max(N, 1))."""
    return [min(max(r[total] / max(r[count], 1), lower), upper) for r in first.rows]


@pytest.mark.parametrize(("first_sql", "then", "where"), [
    (SUMS, AVGS, (1, 2)),
    # COUNT(*) counts what COUNT(income) does: income is NOT NULL in the catalog
    ("SELECT sex, COUNT(*) AS n, SUM(income) FROM pums GROUP BY sex", AVGS, (2, 1)),
    # ORDER BY in the first answer: still every released group
    (f"{SUMS} ORDER BY n", AVGS, (1, 2)),
    # the items in another order, without the key column
    (SUMS, "SELECT AVG(income) FROM pums GROUP BY sex", (1, 2)),
])
def test_avg_from_a_cached_sum_and_count_is_free(pums_file, tmp_path, monkeypatch,
                                                  first_sql, then, where):
    from dpsql.answer_avg import AVG_NOTE

    conn = _conn(pums_file, tmp_path)
    first = conn.execute(first_sql, epsilon=0.5)
    before = _ledger_state(conn)
    _no_backend(conn, monkeypatch)
    derived = conn.execute(then, epsilon=0.5)
    assert derived.cost == (0.0, 0.0) and AVG_NOTE in derived.notes
    assert CACHED_NOTE not in derived.notes and DERIVED_NOTE not in derived.notes
    assert _ledger_state(conn) == before  # no charge, no entry
    col = derived.columns.index("a") if "a" in derived.columns else 0
    assert [r[col] for r in derived.rows] == _avg_of(first, *where)
    if "sex" in derived.columns:
        assert [r[0] for r in derived.rows] == [r[0] for r in first.rows]
    total, count = where
    for row, acc, ivs, released in zip(derived.rows, derived.accuracy, derived.intervals,
                                       first.intervals, strict=True):
        low, high = ivs[col]
        assert 0 <= low <= row[col] <= high <= 500000
        assert acc[col] == max(row[col] - low, high - row[col])
        # wider than the same arithmetic on the released 1 - alpha intervals: each
        # statistic is taken at alpha/2 (the union bound over the two)
        (s_lo, s_hi), (n_lo, n_hi) = released[total], released[count]
        corners = [s / max(n, 1) for s in (s_lo, s_hi) for n in (n_lo, n_hi)]
        assert low <= min(corners) and high > max(corners)  # low may be cut at 0
    assert derived.noisy_columns[col]


def test_avg_with_other_released_columns_and_post_processing(pums_file, tmp_path,
                                                             monkeypatch):
    conn = _conn(pums_file, tmp_path)
    first = conn.execute("SELECT sex, COUNT(*) AS n, SUM(income) AS s, SUM(age) "
                         "FROM pums GROUP BY sex", epsilon=0.5)
    _no_backend(conn, monkeypatch)
    derived = conn.execute("SELECT sex, AVG(age), COUNT(*) AS n, AVG(income) AS m FROM pums "
                           "GROUP BY sex HAVING m > -1 ORDER BY AVG(age) DESC LIMIT 1",
                           epsilon=0.5)
    assert derived.cost == (0.0, 0.0)
    assert derived.columns == ["sex", "AVG(age)", "n", "m"]
    ages = _avg_of(first, 3, 1, 0, 100)
    best = max(range(len(first.rows)), key=lambda i: ages[i])
    row = first.rows[best]
    assert derived.rows == [(row[0], ages[best], row[1], _avg_of(first, 2, 1)[best])]
    # the copied count keeps its released error bar
    assert derived.accuracy[0][2] == first.accuracy[best][1]
    assert derived.intervals[0][2] == first.intervals[best][1]


@pytest.mark.parametrize(("first_sql", "then", "kwargs"), [
    # another WHERE, another GROUP BY: other rows were summed
    (SUMS, "SELECT sex, AVG(income) FROM pums WHERE age > 30 GROUP BY sex", {}),
    (SUMS.replace("sex", "race"), "SELECT race, AVG(income) FROM pums GROUP BY race, sex",
     {}),
    ("SELECT sex, SUM(income) AS s, COUNT(*) FROM pums WHERE age > 30 GROUP BY sex", AVGS,
     {}),
    # the SUM or the COUNT of something else
    ("SELECT sex, SUM(age), COUNT(*) FROM pums GROUP BY sex", AVGS, {}),
    ("SELECT sex, SUM(income), COUNT(age) FROM pums GROUP BY sex",
     "SELECT sex, AVG(income) FROM pums GROUP BY sex", {"nullable": "age"}),
    ("SELECT sex, SUM(income) FROM pums GROUP BY sex", AVGS, {}),
    ("SELECT sex, SUM(income * 2), COUNT(*) FROM pums GROUP BY sex", AVGS, {}),
    # COUNT(*) counts rows whose income is NULL: not AVG's denominator
    ("SELECT sex, SUM(income), COUNT(*) FROM pums GROUP BY sex", AVGS,
     {"nullable": "income"}),
    # another epsilon, contribution bound, confidence
    (SUMS, AVGS, {"epsilon": 0.25}),
    (SUMS, AVGS, {"max_rows": 2}),
    (SUMS, AVGS, {"alpha": 0.1}),
    # the first answer kept only some groups
    (f"{SUMS} LIMIT 1", AVGS, {}),
    (f"{SUMS} HAVING n > 0", AVGS, {}),
    # an item that was not released; AVG(DISTINCT)
    (SUMS, "SELECT sex, AVG(income), MAX(age) FROM pums GROUP BY sex", {}),
    (SUMS, "SELECT sex, AVG(DISTINCT income) FROM pums GROUP BY sex", {}),
    # attack review: groupings whose meaning comes from the select list share the
    # frame's text (the relation is compared on the analysed plans)
    ("SELECT sex, race, SUM(income) AS s, COUNT(income) AS n FROM pums GROUP BY ALL",
     "SELECT sex, AVG(income) AS a FROM pums GROUP BY ALL", {}),
    ("SELECT race, sex, SUM(income), COUNT(income) FROM pums GROUP BY 1, 2",
     "SELECT sex, sex, AVG(income) AS a FROM pums GROUP BY 1, 2", {}),
    ("SELECT sex, race AS g, SUM(income) AS s, COUNT(income) AS n FROM pums "
     "GROUP BY sex, g", "SELECT sex AS g, AVG(income) AS a FROM pums GROUP BY sex, g", {}),
])
def test_avg_from_another_frame_or_key_is_charged(pums_file, tmp_path, first_sql, then,
                                                  kwargs):
    from dpsql.answer_avg import AVG_NOTE

    kwargs = dict(kwargs)
    catalog = _catalog(tmp_path)
    nullable = kwargs.pop("nullable", None)
    if nullable:
        catalog["tables"]["pums"]["columns"][nullable]["nullable"] = True
    conn = _conn(pums_file, tmp_path, catalog=catalog)
    conn.execute(first_sql, epsilon=0.5)
    eps = kwargs.pop("epsilon", 0.5)
    spent = conn.budget.spent[0]
    if "DISTINCT" in then:  # refused afresh, uncharged: not derived either
        with pytest.raises(dpsql.DpsqlError, match="DISTINCT"):
            conn.execute(then, epsilon=eps, **kwargs)
        assert conn.budget.spent[0] == spent
        return
    again = conn.execute(then, epsilon=eps, **kwargs)
    assert again.cost[0] == eps and AVG_NOTE not in again.notes


def test_avg_needs_one_row_per_user(pums_file, tmp_path):
    """pums_dup has 1-4 rows per person: SUM adds all of a person's clamped rows where
    COUNT keeps max_rows of them, so SUM / COUNT is not the AVG dpsql answers."""
    from dpsql.answer_avg import AVG_NOTE

    with open(catalog_path("pums_dup")) as f:
        catalog = yaml.safe_load(f)
    catalog.pop("budget", None)
    conn = _conn(pums_file, tmp_path, catalog=catalog)
    conn.execute(SUMS.replace("pums", "pums_dup"), epsilon=0.5)
    again = conn.execute(AVGS.replace("pums", "pums_dup"), epsilon=0.5)
    assert again.cost == (0.5, 0.0) and AVG_NOTE not in again.notes


def test_avg_is_per_analyst(pums_file, tmp_path):
    with _conn(pums_file, tmp_path, analyst="alice") as conn:
        conn.execute(SUMS, epsilon=0.5)
    with _conn(pums_file, tmp_path, analyst="bob") as conn:
        assert conn.execute(AVGS, epsilon=0.5).cost == (0.5, 0.0)


def test_avg_is_a_function_of_the_released_answer_only(pums_file, tmp_path, monkeypatch):
    """Neighbour test: once the SUM and COUNT are released, the database with one
    person fewer gives bit for bit the same AVG, without the data."""
    import duckdb

    with _conn(pums_file, tmp_path) as conn:
        conn.execute(SUMS, epsilon=0.5)
        _no_backend(conn, monkeypatch)
        first = conn.execute(AVGS, epsilon=0.5)
    with duckdb.connect(str(pums_file)) as db:  # the neighbour: one person removed
        db.execute("DELETE FROM pums WHERE pid = (SELECT MIN(pid) FROM pums)")
        assert db.execute("SELECT COUNT(*) FROM pums").fetchone()[0] == 999
    with _conn(pums_file, tmp_path) as conn:
        _no_backend(conn, monkeypatch)
        second = conn.execute(AVGS, epsilon=0.5)
        with pytest.raises(Exception, match="internal"):  # anything else needs the data
            conn.execute("SELECT sex, AVG(income) FROM pums WHERE age > 0 GROUP BY sex",
                         epsilon=0.5)
    assert first.cost == second.cost == (0.0, 0.0)
    assert _bits(first.rows) == _bits(second.rows) and first.intervals == second.intervals
    assert first.accuracy == second.accuracy and first.notes == second.notes


def test_avg_cells_at_the_edges():
    """A released count at or below 0 is read as 1 (the value stays in the bounds, the
    interval holds it); a NULL gives a NULL without an error bar; the interval holds the
    true mean whenever the true sum and count lie within their half-widths."""
    import random

    from dpsql.answer_avg import _Ratio, avg_cell

    r = _Ratio(0, 1, h_total=3000.0, h_count=12.0, total_range=(0.0, math.inf),
               count_range=(0.0, math.inf), lower=0.0, upper=500.0)
    value, width, (low, high) = avg_cell(r, 2000.0, 0)
    assert value == 500.0 and 0 <= low <= value <= high <= 500 and width == value - low
    assert avg_cell(r, None, 10) == (None, None, None)
    assert avg_cell(r, 10.0, None) == (None, None, None)
    assert avg_cell(r, 10.0, float("nan")) == (None, None, None)
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randint(1, 60)
        s = sum(rng.uniform(0, 500) for _ in range(n))
        total = max(s + rng.uniform(-r.h_total, r.h_total), 0.0)  # released: consistent
        count = max(round(n + rng.uniform(-r.h_count, r.h_count)), 0)
        value, _, (low, high) = avg_cell(r, total, count)
        assert low - 1e-9 <= s / n <= high + 1e-9 and low <= value <= high


def test_pointers_are_not_answers_and_are_checked(pums_file, tmp_path):
    conn = _conn(pums_file, tmp_path)
    conn.execute(SUMS, epsilon=0.5)
    ledger_of(conn).settle()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        keys = [k for (k,) in db.execute("SELECT key FROM answers")]
        assert sum(k.startswith("core:frame:") for k in keys) == 1 and len(keys) == 3
        db.execute("UPDATE answers SET answer = '{\"sql\": \"SELECT 1\"}' "
                   "WHERE key LIKE 'core:frame:%'")
    assert len(conn._answers) == 1
    with pytest.raises(dpsql.errors.LedgerError, match="fails its check"):
        conn.execute(AVGS, epsilon=0.5)
    assert clear(ledger_of(conn)) == 1


def test_the_avg_query_is_checked_as_a_fresh_one(pums_file, tmp_path, monkeypatch):
    """Attack review: the free path answered an AVG query the fresh path refuses (an
    unknown name; a query over the size limits)."""
    conn = _conn(pums_file, tmp_path)
    conn.execute("SELECT age > 50 AS g, SUM(income), COUNT(income) FROM pums GROUP BY g",
                 epsilon=0.5)
    conn.execute(SUMS, epsilon=0.5)
    spent = conn.budget.spent[0]
    with pytest.raises(dpsql.UnknownColumnError):
        conn.execute("SELECT AVG(income) FROM pums GROUP BY g", epsilon=0.5)
    many = ", ".join(["AVG(income)"] * 2000)
    with pytest.raises(dpsql.DpsqlError, match="limit"):
        conn.execute(f"SELECT sex, {many} FROM pums GROUP BY sex", epsilon=0.5)
    assert conn.budget.spent[0] == spent


def test_the_free_path_analyses_a_bounded_number_of_plans(pums_file, tmp_path,
                                                          monkeypatch):
    """Attack review: every stored pointer of a frame was re-analysed per AVG query."""
    import dpsql.answer_flow

    conn = _conn(pums_file, tmp_path, plan_cache=False)
    for i in range(6):
        conn.execute(f"SELECT sex, SUM(income), COUNT(income), SUM(age) + {i} "
                     "FROM pums GROUP BY sex", epsilon=0.5)
    analysed = []
    real = dpsql.answer_flow.Answering._plan_of

    def counted(self, ask, sql):
        analysed.append(sql)
        return real(self, ask, sql)

    monkeypatch.setattr(dpsql.answer_flow.Answering, "_plan_of", counted)
    for _ in range(3):  # none supplies MAX(age): matched on the text, never analysed
        conn.execute("SELECT sex, AVG(income), MAX(age) FROM pums GROUP BY sex",
                     epsilon=0.5)
    assert analysed == []
    conn.execute("SELECT sex, AVG(age) FROM pums WHERE age > 1 GROUP BY sex", epsilon=0.5)
    assert len(analysed) <= dpsql.answer_flow._ANALYSED


def test_an_answer_is_cached_before_the_call_returns(pums_file, tmp_path):
    """Not queued with one-commit outcomes (dpsql.ledger.outcomes): another connection
    asking at once gets the same answer free, and the owner's clear right after an
    answer is not undone by a write that comes later (attack review)."""
    a = _conn(pums_file, tmp_path)
    b = _conn(pums_file, tmp_path)
    first = a.execute(QUERY, epsilon=0.5)
    again = b.execute(QUERY, epsilon=0.5)
    assert again.cost == (0.0, 0.0) and _bits(again.rows) == _bits(first.rows)
    owner = Ledger(str(tmp_path / "ledger.sqlite"))
    assert clear(owner) >= 1
    owner.close()
    time.sleep(0.5)  # longer than any queued write would wait (outcomes.SETTLE_AFTER)
    fresh = a.execute(QUERY, epsilon=0.5)
    assert fresh.cost == (0.5, 0.0)
    a.close()
    b.close()
