"""The newer command-line interfaces through the real entry point, and notebook display.

Covers ``query --mechanism/--alpha``, ``catalog draft``, ``catalog import-smartnoise``,
``shell`` (piped, and on a terminal through pexpect), exit codes, ``Result.arrow`` and
the ``_repr_html_`` of results and explanations.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import duckdb
import pytest
import yaml

import dpsql
from dpsql.datasets import catalog_path, data_path, load_pums
from dpsql.result import Explanation, Result
from tests.support import cli

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
SHARED = ROOT.parent / "shared" / "data" / "pums"


def command() -> list[str]:
    exe = Path(sys.executable).parent / "dpsql"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dpsql.cli"]


def run(*args, check=True, input=None):
    """``dpsql ARGS`` in this process (see :func:`tests.support.cli`)."""
    return cli(*args, input=input, check=check)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "pums.duckdb"
    load_pums(path)
    return path


def budget_args(tmp_path) -> list[str]:
    return ["--ledger", str(tmp_path / "ledger.sqlite"), "--budget", "10", "1e-5"]


# -- query ------------------------------------------------------------------------------

def test_query_gaussian_and_alpha(db, tmp_path):
    cat = catalog_path("pums")
    out = run("query", "SELECT COUNT(*) AS n FROM pums", "-d", db, "-c", cat, "-e", "1",
              "--delta", "1e-6", "--mechanism", "gaussian", "--alpha", "0.1",
              "--format", "json", *budget_args(tmp_path)).stdout
    doc = json.loads(out)
    assert doc["cost"] == {"epsilon": 1.0, "delta": 1e-6}
    assert doc["confidence"] == pytest.approx(0.9)
    assert isinstance(doc["rows"][0][0], int) and doc["accuracy"][0][0] > 0
    # Gaussian noise without delta is refused (exit 1), free of charge
    refused = run("query", "SELECT COUNT(*) FROM pums", "-d", db, "-c", cat, "-e", "1",
                  "--mechanism", "gaussian", *budget_args(tmp_path), check=False)
    assert refused.returncode == 1 and "PrivacyParameterError" in refused.stderr
    for bad in (["--mechanism", "cauchy"], ["--alpha", "1.5"]):
        usage = run("query", "SELECT COUNT(*) FROM pums", "-d", db, "-c", cat, "-e", "1",
                    *bad, *budget_args(tmp_path), check=False)
        assert usage.returncode == 2, bad
    explained = run("explain", "SELECT COUNT(*) FROM pums", "-d", db, "-c", cat, "-e", "1",
                    "--delta", "1e-6", "--mechanism", "gaussian", "--alpha", "0.1").stdout
    assert "discrete Gaussian" in explained and "±90%" in explained


def test_exit_codes_and_help():
    top = run("--help").stdout
    for name in ("demo", "query", "explain", "shell", "budget", "catalog"):
        assert name in top
    assert "0 success, 1 refused" in " ".join(top.split())
    sub = run("catalog", "--help").stdout
    assert "draft" in sub and "import-smartnoise" in sub
    shell_help = run("shell", "--help").stdout
    assert ".epsilon" in shell_help and "--mechanism" in shell_help
    assert run("no-such-command", check=False).returncode == 2
    assert run("query", check=False).returncode == 2
    # a LedgerError outside a try block still exits 1 with one line, no traceback
    proc = run("budget", "log", "--ledger", __file__, check=False)
    assert proc.returncode == 1 and "LedgerError" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_readme_options_exist():
    """Every --option the README's command-line section shows is a real option."""
    from dpsql.cli import main

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Command line", 1)[-1].split("\n## ", 1)[0]
    current = None
    for line in section.splitlines():
        words = line.split("#")[0].split()
        if words[:1] == ["dpsql"] and len(words) > 1:
            cmd = main.commands.get(words[1])
            if cmd is not None and hasattr(cmd, "commands") and len(words) > 2:
                cmd = [cmd.commands[w] for w in words[2].split("|") if w in cmd.commands]
            current = cmd if isinstance(cmd, list) else [cmd] if cmd else None
        if current is None:
            continue
        for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            for c in current:
                names = {o for p in c.params for o in [*p.opts, *p.secondary_opts]}
                assert option in names | {"--help"}, (c.name, option)


# -- catalog draft ------------------------------------------------------------------------

def test_catalog_draft_loads_and_answers_once_filled(db, tmp_path):
    out = run("catalog", "draft", "-d", db, "pums").stdout
    assert "lower: null, upper: null" in out and "TODO" in out
    assert "user_key: TODO" in out
    with pytest.raises(dpsql.CatalogError, match="user_key 'todo'"):
        dpsql.load_catalog(yaml.safe_load(out))  # fail closed until the owner decides
    # placeholders removed: loads
    removed = out.replace("lower: null, upper: null, ", "").replace(
        "user_key: TODO", "user_key: pid")
    cat = dpsql.load_catalog(yaml.safe_load(removed))
    assert cat.dataset == "pums" and cat.table("pums").user_key == "pid"
    assert not any(c.bounded for c in cat.table("pums").columns.values())

    path = tmp_path / "draft.yaml"
    run("catalog", "draft", "-d", db, "pums", "pums_dup", "--user-key", "pid",
        "--dataset", "census", "-o", path)
    text = path.read_text()
    cat = dpsql.load_catalog(path)  # with a user key the draft loads as it is
    assert set(cat.tables) == {"pums", "pums_dup"} and cat.dataset == "census"
    assert cat.table("pums").column("income").type == "float"
    # the owner fills one bound: that column can be aggregated, the others are refused
    filled = re.sub(r"age: \{type: int, lower: null, upper: null",
                    "age: {type: int, lower: 0, upper: 100", text)
    path.write_text(filled)
    assert dpsql.load_catalog(path).table("pums").column("age").bounded
    args = ["-d", db, "-c", path, "-e", "1", *budget_args(tmp_path)]
    ok = run("query", "SELECT AVG(age) AS a FROM pums", *args).stdout
    assert " ± " in ok
    refused = run("query", "SELECT SUM(income) FROM pums", *args, check=False)
    assert refused.returncode == 1 and "income" in refused.stderr


def test_catalog_draft_reads_the_schema_only(tmp_path):
    """Two databases with one schema and different rows give the same draft."""
    drafts = []
    for i, rows in enumerate(([(1, 10.5, "a")], [(2, -3000.5, "zz"), (3, 7.0, None)])):
        path = tmp_path / str(i) / "shop.duckdb"
        path.parent.mkdir()
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE sales (cid INTEGER NOT NULL, amount DECIMAL(10, 2), "
                    "region VARCHAR, tags VARCHAR[])")
        con.executemany("INSERT INTO sales VALUES (?, ?, ?, ['x'])", rows)
        con.close()
        drafts.append(run("catalog", "draft", "-d", path, "sales", "--user-key", "cid").stdout)
    assert drafts[0] == drafts[1]
    cat = dpsql.load_catalog(yaml.safe_load(drafts[0]))
    table = cat.table("sales")
    assert table.column("cid").nullable is False and table.column("region").nullable
    assert table.column("amount").type == "float" and not table.has_column("tags")
    assert "# tags: DuckDB type VARCHAR[] has no dpsql type" in drafts[0]


def test_catalog_draft_errors(db, tmp_path):
    unknown = run("catalog", "draft", "-d", db, "nope", check=False)
    assert unknown.returncode == 1 and "no table 'nope'" in unknown.stderr
    assert "pums_dup" in unknown.stderr
    bad_key = run("catalog", "draft", "-d", db, "pums", "--user-key", "ssn", check=False)
    assert bad_key.returncode == 2 and "'ssn' is not a column" in bad_key.stderr
    missing = run("catalog", "draft", "-d", tmp_path / "none.duckdb", "pums", check=False)
    assert missing.returncode == 2
    both = run("catalog", "draft", "-d", db, "pums", "--user-key", "pid", "--row-privacy",
               check=False)
    assert both.returncode == 2
    rows = run("catalog", "draft", "-d", db, "pums", "--row-privacy").stdout
    assert dpsql.load_catalog(yaml.safe_load(rows)).table("pums").row_privacy


# -- catalog import-smartnoise -------------------------------------------------------------

def test_import_smartnoise_pums_dup(tmp_path):
    out_path = tmp_path / "sn.yaml"
    run("catalog", "import-smartnoise", DATA / "smartnoise_pums_dup.yaml", "-o", out_path)
    cat = dpsql.load_catalog(out_path)
    assert cat.dataset == "pums"
    table = cat.table("pums")
    assert table.user_key == "pid" and table.max_rows == 1 and table.max_groups == 1
    assert (table.column("age").lower, table.column("age").upper) == (0, 100)
    assert table.column("income").type == "int" and table.column("income").upper == 500000
    assert table.column("sex").type == "string" and not table.column("sex").bounded
    assert "rows: 1000" in out_path.read_text()  # dropped options are named

    # answers on a database whose types match the metadata (SmartNoise: strings)
    db = tmp_path / "sn.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE PUMS AS SELECT * FROM read_csv(?, header=true, types="
                "{'sex': 'VARCHAR', 'educ': 'VARCHAR', 'race': 'VARCHAR', "
                "'married': 'VARCHAR'})", [str(data_path("pums_dup.csv"))])
    con.close()
    out = run("query", "SELECT COUNT(DISTINCT pid) AS people, AVG(age) AS age FROM pums",
              "-d", db, "-c", out_path, "-e", "1", "--delta", "1e-6", "--mechanism",
              "gaussian", "--format", "json", *budget_args(tmp_path)).stdout
    doc = json.loads(out)
    assert doc["columns"] == ["people", "age"] and 0 <= doc["rows"][0][1] <= 100


def test_import_smartnoise_types_and_options():
    out = run("catalog", "import-smartnoise", DATA / "smartnoise_pums_large.yaml",
              "--dataset", "census").stdout
    cat = dpsql.load_catalog(yaml.safe_load(out))
    table = cat.table("pums_large")
    assert cat.dataset == "census" and table.user_key == "personid"
    assert table.column("married").type == "bool"
    assert table.column("income").type == "float" and table.column("income").bounded
    assert "censor_dims: false" in out


@pytest.mark.parametrize("doc, message", [
    ({"": {"s": {"t": {"x": {"type": "int"}}}}}, "no private_id column"),
    ({"": {"s": {"t": {"a": {"type": "int", "private_id": True},
                       "b": {"type": "int", "private_id": True}}}}}, "several private_id"),
    ({"a": {}, "b": {}}, "exactly one collection"),
    ({"": {"s": {"t": {"row_privacy": True, "x": {"type": "int", "lower": 5,
                                                   "upper": 1}}}}}, "greater than upper"),
])
def test_import_smartnoise_refusals(tmp_path, doc, message):
    path = tmp_path / "meta.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = run("catalog", "import-smartnoise", path, check=False)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared SmartNoise data beside the checkout")
def test_import_smartnoise_shared_files():
    from dpsql.smartnoise import smartnoise_catalog

    for path in sorted(SHARED.glob("*.yaml")):
        out = smartnoise_catalog(yaml.safe_load(path.read_text()), path.name)
        assert dpsql.load_catalog(yaml.safe_load(out)).tables, path


# -- shell --------------------------------------------------------------------------------

def test_shell_piped(db, tmp_path):
    script = ("SELECT sex, COUNT(*) AS n\nFROM pums GROUP BY sex;\n"
              ".epsilon 0.25\n.delta 1e-6\n.budget\n"
              ".explain SELECT COUNT(*) FROM pums\n"
              "SELECT COUNT(*) AS n FROM pums\n")
    proc = run("shell", "-d", db, "-c", catalog_path("pums"), "--analyst", "pipe",
               *budget_args(tmp_path), input=script)
    out = proc.stdout
    assert out.count("remaining budget") == 2 and "sex" in out
    assert "spent epsilon=0.1, delta=0" in out          # the first query, default epsilon
    assert "spent epsilon=0.25" in out  # the last, ended by end of input
    assert "Cost: epsilon=0.25" in out                  # .explain
    bad = run("shell", "-d", db, "-c", catalog_path("pums"), *budget_args(tmp_path),
              input="SELECT * FROM pums;\n.epsilon -1\n", check=False)
    assert bad.returncode == 1 and "UnsupportedQueryError" in bad.stderr
    assert ".epsilon needs a number > 0" in bad.stderr


def test_shell_on_a_terminal(db, tmp_path):
    pexpect = pytest.importorskip(
        "pexpect", reason="pexpect (test dependency, pexpect>=4.8) drives the shell on a pty")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "TERM": "dumb"}
    cmd = command()
    child = pexpect.spawn(cmd[0], [*cmd[1:], "shell", "-d", str(db), "-c",
                                   str(catalog_path("pums")), "--analyst", "tty",
                                   "-e", "0.3", *budget_args(tmp_path)],
                          env=env, encoding="utf-8", timeout=30)
    try:
        child.expect_exact("dpsql> ")
        child.sendline("SELECT COUNT(*) AS n")        # multi-line: continues
        child.expect_exact("...> ")
        child.sendline("FROM pums;")
        child.expect(r"spent epsilon=0\.3, delta=0")
        child.expect_exact("dpsql> ")
        child.sendline(".budget")
        child.expect(r"analyst tty: spent epsilon=0\.3")
        child.expect_exact("dpsql> ")
        child.sendline("SELECT sex")                   # Ctrl-C drops a half-typed query
        child.expect_exact("...> ")
        child.sendintr()
        child.expect_exact("dpsql> ")
        child.sendline(".help")
        child.expect_exact(".quit")
        child.expect_exact("dpsql> ")
        child.sendline(".quit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    history = home / ".dpsql_history"
    if history.exists():  # readline is optional
        assert "FROM pums;" in history.read_text()


# -- Result.arrow and notebook display ---------------------------------------------------------

def test_result_arrow(conn):
    res = conn.execute("SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums "
                       "GROUP BY sex", epsilon=1.0)
    table = res.fetch_arrow_table(error_columns=False)
    assert table.column_names == ["sex", "n", "avg_income"]
    assert table.num_rows == len(res.rows)
    assert [tuple(r.values()) for r in table.to_pylist()] == res.rows
    # like Result.df, Result.arrow carries the error bars as columns
    assert res.arrow.column_names == list(res.df.columns)
    assert str(table.schema.field("n").type) == "int64"
    meta = table.schema.metadata
    assert float(meta[b"dpsql.epsilon"]) == 1.0 and float(meta[b"dpsql.confidence"]) == 0.95
    empty = Result(["k", "n"], [], [], (0.5, 0.0), "SELECT 1")
    assert empty.arrow.num_rows == 0 and empty.arrow.column_names == ["k", "n"]


def test_result_repr_html(conn):
    res = conn.execute("SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", epsilon=1.0)
    page = res._repr_html_()
    assert page.count("<tr>") == 1 + len(res.rows)
    n, width = res.rows[0][1], res.accuracy[0][1]
    assert f"{n:,} ± {width:,}" in page
    assert "95%" in page and "ε = 1" in page and "δ = 0" in page
    hostile = Result(["<name>"], [("<script>alert(1)</script>",), (1.5,)], [(None,), (0.25,)],
                     (0.5, 1e-6), "SELECT 1", alpha=0.1, notes=("a & b",))
    page = hostile._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;name&gt;" in page
    assert "1.50 ± 0.25" in page and "90%" in page and "a &amp; b" in page


def test_explanation_repr_html(conn):
    exp = conn.explain("SELECT income // 1000 AS k, COUNT(*) AS n FROM pums WHERE age > 30 "
                       "GROUP BY k",
                       epsilon=1.0, delta=1e-6)
    assert isinstance(exp, Explanation)
    page = exp._repr_html_()
    assert "<pre>" in page and "&gt; 30" in page and "> 30" not in page.replace("&gt;", "")
    assert "discrete Laplace" in page and "Partition selection" in page
    assert "ε = 1" in page
