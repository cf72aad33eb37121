"""The README stays true: its commands, code, catalog and command synopsis are run here.

Every fenced block of the README is covered: the two quick-start commands are CI's
(``.ci/run``); the Python blocks run top to bottom in one fresh directory, as a reader
would paste them (the notebook block under IPython with jupysql); the YAML catalog
answers a query; each line of the command-line synopsis names only options its command
has; the ``dpsql serve`` walk-through runs up to serving (``--check``). Blocks that
install or run the whole suite (Development, Tested versions) are CI's own commands.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def fences(text: str) -> list[tuple[str, str]]:
    """Every fenced code block as ``(language, body)``, in order."""
    found, lang, body = [], None, []
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                found.append((lang, "".join(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    return found


def blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of one language, in order."""
    return [body for kind, body in fences(text) if kind == lang]


def test_ci_runs_the_readme_test_command():
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert command.startswith("python3 -m venv .venv")
    assert command in README
    assert blocks(README, "bash")[1].strip() == command


def test_ci_runs_the_readme_demo_command():
    demo = blocks(README, "bash")[0].strip()
    assert demo.endswith("dpsql demo")
    assert f"{demo} > /dev/null" in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_readme_installs_sqlglots_compiled_build():
    """The README's two commands install the extra ``fast`` (sqlglot's compiled build,
    ``sqlglot[c]``), constraints.txt pins its package at sqlglot's own version, and it is
    an extra, never a dependency (it has no wheel on some platforms). Where it is
    installed, sqlglot's parser must be the compiled module, of sqlglot's version: in
    CI, which runs the README's command, the suite has to run under it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["fast"] == ["sqlglot[c]>=30.0"]
    assert not any("sqlglot[c]" in d for d in project["dependencies"])
    demo, test = blocks(README, "bash")[:2]
    assert '".[fast]"' in demo and '".[test,fast]"' in test
    constraints = (ROOT / "constraints.txt").read_text()
    pins = dict(re.findall(r"^(sqlglotc?)==(\S+)$", constraints, re.M))
    assert pins["sqlglotc"] == pins["sqlglot"]
    try:
        compiled = importlib.metadata.version("sqlglotc")
    except importlib.metadata.PackageNotFoundError:
        in_ci = bool(os.environ.get("CI"))
        assert not in_ci, "CI's test command installs dpsql[fast], so sqlglotc"
        return
    import sqlglot.parser

    assert compiled == importlib.metadata.version("sqlglot")
    assert not sqlglot.parser.__file__.endswith(".py"), sqlglot.parser.__file__


def test_readme_documents_every_cli_command():
    from dpsql.cli import main

    for name in main.commands:
        assert f"dpsql {name}" in README


def test_readme_states_the_supported_duckdb_versions():
    import duckdb

    pinned = re.search(r"^duckdb==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)[1]
    assert f"DuckDB {pinned.rsplit('.', 1)[0]}.x" in README and f"{pinned} tested" in README
    assert '"duckdb>=2.0"' in (ROOT / "pyproject.toml").read_text()
    assert duckdb.__version__.startswith("2.")


def _jupysql(monkeypatch):
    """tests/clients' way of importing jupysql (it trips over pyspark without grpcio)."""
    path = ROOT / "tests" / "clients" / "test_jupysql_probes.py"
    spec = importlib.util.spec_from_file_location("_jupysql_probes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._import_jupysql(monkeypatch)


def test_readme_python_examples_run_top_to_bottom_on_one_ledger(tmp_path, monkeypatch):
    """The Python blocks in order, in a fresh directory, then the notebook block.

    They must all spend from one ledger (the file beside the database): a second
    ledger file would be a second budget for the same people.
    """
    pytest.importorskip("IPython")
    monkeypatch.chdir(tmp_path)
    python = blocks(README, "python")
    code = [b for b in python if not b.lstrip().startswith("%")]
    notebook = [b for b in python if b.lstrip().startswith("%")]
    assert len(code) == 2 and len(notebook) == 1
    ns: dict = {}
    for block in code:
        exec(compile(block, "README.md", "exec"), ns)  # noqa: S102 - the README's own code
    res, conn = ns["res"], ns["conn"]
    assert res.columns == ["sex", "n", "avg_income"] and res.cost == (1.0, 0.0)
    columns = "sex, n, n_error, avg_income, avg_income_error, confidence"
    assert f"`{columns}`" in README and ", ".join(res.df.columns) == columns
    assert res.arrow.column_names == list(res.df.columns) == ns["res"].pl().columns
    assert "age >= 18" in ns["adults"].sql

    _jupysql(monkeypatch)
    from IPython.core.interactiveshell import InteractiveShell
    from sql.connection import ConnectionManager

    ip = InteractiveShell.instance()
    try:
        ip.push({"engine": ns["engine"]})
        cell = ip.run_cell(notebook[0])
        assert cell.success, cell.error_in_exec
        header = re.search(r"^# \|(.*)\|$", notebook[0], re.M)[1]
        assert list(cell.result.keys) == [c.strip() for c in header.split("|")]
    finally:
        ConnectionManager.close_all()
    ledgers = sorted(p.name for p in tmp_path.iterdir() if "ledger" in p.name)
    assert ledgers == ["pums.duckdb.ledger.sqlite"]
    # 1 + 0.5 (Python) + 0.5 + 0.25 (DB-API) + 0.5 (pandas) + 0.5 (notebook): one budget
    assert conn.budget.spent[0] == pytest.approx(3.25)
    ns["con"].close()
    ns["engine"].dispose()
    conn.close()


def test_readme_catalog_example_answers(tmp_path):
    import dpsql
    from dpsql.datasets import load_pums

    (example,) = blocks(README, "yaml")
    db = tmp_path / "pums.duckdb"
    load_pums(db)
    catalog = tmp_path / "pums.yaml"
    catalog.write_text(example)
    with dpsql.connect(db, catalog=catalog, ledger=":memory:") as conn:
        assert conn.budget.remaining == (10.0, 1e-5)
        res = conn.execute("SELECT sex, COUNT(*) AS n, AVG(income) AS a FROM pums "
                           "GROUP BY sex", epsilon=1.0)
        assert [row[0] for row in res.rows] == [0, 1]
    # the date column written as the prose writes it
    date = re.search(r"`(\{type: date, lower: [^`]*\})`", README)[1]
    column = dpsql.load_catalog({"tables": {"t": {"row_privacy": True, "columns": {
        "d": yaml.safe_load(date)}}}}).tables["t"].columns["d"]
    assert column.bounded and str(column.lower) == "1992-01-01"


def _synopsis() -> list[str]:
    """The command-line synopsis, one line per command (continuation lines joined)."""
    (text,) = [b for b in blocks(README, "") if b.startswith("dpsql demo")]
    lines: list[str] = []
    for line in text.splitlines():
        body = line.split("#")[0].rstrip()
        if body.startswith("dpsql "):
            lines.append(body)
        elif body.strip():
            lines[-1] += " " + body.strip()
    return lines


def test_readme_command_synopsis_names_real_options():
    """Each synopsis line names a real command, and only options that command has;
    every command and subcommand of ``budget`` and ``catalog`` has a line."""
    import click

    from dpsql.cli import main

    seen = set()
    for line in _synopsis():
        words = line.split()
        command = main.commands[words[1]]
        if isinstance(command, click.Group):
            targets = [(f"{words[1]} {sub}", command.commands[sub])
                       for sub in words[2].split("|")]
            rest = words[3:]
        else:
            targets, rest = [(words[1], command)], words[2:]
        for name, target in targets:
            seen.add(name)
            flags = {opt for p in target.params for opt in (*p.opts, *p.secondary_opts)}
            for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", " ".join(rest)):
                assert flag in flags, f"dpsql {name}: the README names {flag}, which it lacks"
    for name, command in main.commands.items():
        if name in ("serve", "user"):  # their own section, and docs/server.md
            continue
        subs = command.commands if isinstance(command, click.Group) else {"": None}
        for sub in subs:
            assert f"{name} {sub}".strip() in seen, f"dpsql {name} {sub} is not in the synopsis"


def test_readme_serve_walkthrough_runs_up_to_serving(tmp_path, monkeypatch):
    """The ``dpsql serve`` block, with ``serve.yaml`` as the prose describes it; the
    server itself is checked (``--check``) rather than left running, and psql is
    tests/server's."""
    from dpsql.cli import main
    from dpsql.datasets import catalog_path

    (walkthrough,) = blocks(README, "sh")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(main, ["demo", "--save", "pums.duckdb"]).exit_code == 0
    Path("serve.yaml").write_text(f"database: pums.duckdb\ncatalog: {catalog_path('pums')}\n"
                                  "ledger: pums.ledger.sqlite\n")
    commands = [shlex.split(line.split("#")[0]) for line in walkthrough.splitlines()
                if line.startswith("dpsql ")]
    assert [c[:2] for c in commands] == [["dpsql", "budget"], ["dpsql", "user"],
                                          ["dpsql", "serve"]]
    for args in commands[:2]:
        done = runner.invoke(main, args[1:], input="s3cret-pw\ns3cret-pw\n")
        assert done.exit_code == 0, done.output
    done = runner.invoke(main, [*commands[2][1:], "--check"])
    assert done.exit_code == 0, done.output
    assert "psql \"host=127.0.0.1 port=5433 user=alice sslmode=require\"" in walkthrough
