"""The command line through its real entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys

import duckdb
import pytest

from dpsql.datasets import catalog_path
from tests.support import cli


def run(*args, check=True):
    """``dpsql ARGS`` in this process (see :func:`tests.support.cli`)."""
    return cli(*args, check=check)


def run_process(*args, check=True):
    """``dpsql ARGS`` through the installed entry point, in a new process."""
    exe = shutil.which("dpsql")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "dpsql.cli", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_demo_prints_answers_budget_and_sql(tmp_path):
    out = run("demo", "--save", str(tmp_path / "demo.duckdb")).stdout
    assert "avg_income" in out and " ± " in out
    assert "spent     epsilon=" in out and "remaining epsilon=" in out
    assert "WITH __per_user AS (" in out and "LEAST(COUNT(*), 3)" in out
    assert (tmp_path / "demo.duckdb").exists()


def test_explain_and_errors(tmp_path):
    db = tmp_path / "demo.duckdb"
    run("demo", "--save", str(db))
    out = run("explain", "SELECT COUNT(*) FROM pums", "-d", str(db),
              "-c", str(catalog_path("pums")), "-e", "1").stdout
    assert "discrete Laplace" in out and "Cost: epsilon=1" in out
    bad = run("explain", "SELECT * FROM pums", "-d", str(db), "-c",
              str(catalog_path("pums")), "-e", "1", check=False)
    assert bad.returncode == 1 and "UnsupportedQueryError" in bad.stderr
    usage = run("explain", check=False)
    assert usage.returncode == 2


@pytest.mark.parametrize("name", ["pums", "pums_dup"])
def test_catalog_validate(name):
    out = run("catalog", "validate", str(catalog_path(name))).stdout
    assert "OK" in out and "user key pid" in out


def test_catalog_validate_names_the_mistake(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("tables:\n  t:\n    user_key: id\n    columns:\n      x: {type: int}\n")
    proc = run("catalog", "validate", str(path), check=False)
    assert proc.returncode == 1
    assert "user_key 'id' is not one of its columns" in proc.stderr


def test_help_lists_commands():
    out = run_process("--help").stdout
    for command in ("demo", "explain", "catalog"):
        assert command in out


def test_query_charges_the_ledger_and_budget_commands(tmp_path):
    db = tmp_path / "demo.duckdb"
    run("demo", "--save", str(db))
    cat = str(catalog_path("pums"))
    out = run("query", "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex", "-d", str(db),
              "-c", cat, "-e", "0.5", "--analyst", "bob", "--format", "csv").stdout
    assert out.splitlines()[0] == "sex,n,n_error,confidence,epsilon,delta"
    assert len(out.splitlines()) == 3
    import json

    out = run("query", "SELECT COUNT(*) AS n FROM pums", "-d", str(db), "-c", cat, "-e",
              "0.5", "--analyst", "bob", "--format", "json").stdout
    doc = json.loads(out)
    assert doc["columns"] == ["n"] and doc["cost"] == {"epsilon": 0.5, "delta": 0.0}
    show = run("budget", "show", "-d", str(db)).stdout
    assert "analyst bob" in show and "spent epsilon=1," in show
    log = run("budget", "log", "-d", str(db), "--limit", "2").stdout
    assert log.count("answered") == 2 and "bob" in log
    # the demo spent 4.5 of 10, bob 1: 4.5 remain
    refused = run("query", "SELECT COUNT(*) FROM pums", "-d", str(db), "-c", cat, "-e", "5",
                  check=False)
    assert refused.returncode == 1 and "BudgetExhaustedError" in refused.stderr
    run("budget", "grant", "-d", str(db), "--dataset", "pums", "--epsilon", "1")
    run("query", "SELECT COUNT(*) FROM pums", "-d", str(db), "-c", cat, "-e", "5")
    run("budget", "set", "-d", str(db), "--dataset", "pums", "--analyst", "eve",
        "--epsilon", "0.1")
    eve = run("query", "SELECT COUNT(*) FROM pums", "-d", str(db), "-c", cat, "-e", "0.2",
              "--analyst", "eve", check=False)
    assert eve.returncode == 1 and "analyst 'eve'" in eve.stderr
    missing = run("budget", "show", "--ledger", str(tmp_path / "nope.sqlite"), check=False)
    assert missing.returncode == 2


def test_messages_name_the_command_line_flags(tmp_path):
    """A message shared with the Python API names keyword arguments; the command line
    says its own flags instead (``--budget EPSILON DELTA``, not ``budget=(...)``)."""
    db = tmp_path / "demo.duckdb"
    run("demo", "--save", str(db))
    catalog = tmp_path / "nobudget.yaml"
    catalog.write_text(catalog_path("pums").read_text().replace("budget:", "# budget:"))
    common = ["-d", str(db), "-c", str(catalog), "-e", "1", "--ledger",
              str(tmp_path / "fresh.sqlite")]
    proc = run("query", "SELECT COUNT(*) FROM pums", *common, check=False)
    assert proc.returncode == 1
    assert "--budget EPSILON DELTA" in proc.stderr and "budget=(" not in proc.stderr
    proc = run("shell", *common, check=False)
    assert proc.returncode == 1 and "--budget EPSILON DELTA" in proc.stderr
    proc = run("query", "SELECT COUNT(*) FROM pums", *common, "--budget", "1", "0",
               "--max-groups", "0", check=False)
    assert "--max-groups must be a positive integer" in proc.stderr
    proc = run("query", "SELECT age, COUNT(*) FROM pums GROUP BY age", *common,
               "--budget", "1", "0", "--mechanism", "gaussian", check=False)
    assert "(e.g. --delta 1e-6)" in proc.stderr


def test_shell_tables_shows_date_bounds_as_dates(tmp_path):
    import duckdb

    db = tmp_path / "visits.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE visits AS SELECT i AS pid, DATE '2024-01-01' + i::INT AS d, "
                    "i % 7 AS cost FROM range(10) t(i)")
    catalog = tmp_path / "visits.yaml"
    catalog.write_text(
        "dataset: visits\nbudget: {epsilon: 1, delta: 1e-6}\ntables:\n  visits:\n"
        "    user_key: pid\n    columns:\n      pid: {type: int}\n"
        "      d: {type: date, lower: 2024-01-01, upper: 2024-12-31}\n"
        "      cost: {type: float, lower: 0, upper: 10000000}\n")
    exe = shutil.which("dpsql")
    cmd = [exe] if exe else [sys.executable, "-m", "dpsql.cli"]
    proc = subprocess.run([*cmd, "shell", "-d", str(db), "-c", str(catalog)], input=".tables\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "d date [2024-01-01, 2024-12-31]" in proc.stdout
    assert "cost float [0, 10000000]" in proc.stdout


@pytest.mark.parametrize("held, change, refusal", [
    # dpsql.one_per_user
    ("one value per user, checked: age, sex, educ, race, married",
     "UPDATE pums_dup SET sex = 1 - sex WHERE pid = (SELECT MIN(pid) FROM "
     "(SELECT pid FROM pums_dup GROUP BY pid HAVING COUNT(*) > 1)) AND age > 0 "
     "AND rowid = (SELECT MIN(rowid) FROM pums_dup d WHERE d.pid = pums_dup.pid)",
     "declared one_per_user but some user has two values: sex"),
    # dpsql.values_only
    ("only the declared values, checked: sex, educ, race, married",
     "UPDATE pums_dup SET race = 9 WHERE pid = (SELECT MIN(pid) FROM pums_dup)",
     "declared values_only but some row holds another value: race"),
    # dpsql.in_bounds
    ("every value within its bounds, checked: age, income",
     "UPDATE pums_dup SET income = 500000.5 WHERE pid = (SELECT MIN(pid) FROM pums_dup)",
     "declared in_bounds but some value lies outside: income (sums of them keep "
     "the clamp)"),
], ids=["one_per_user", "values_only", "in_bounds"])
def test_catalog_validate_checks_declarations_on_the_data(tmp_path, held, change, refusal):
    # the owner's view of each data-checked declaration: held, or false
    db = tmp_path / "demo.duckdb"
    run("demo", "--save", str(db))
    cat = str(catalog_path("pums_dup"))
    out = run("catalog", "validate", cat, "-d", str(db)).stdout
    assert held in out
    con = duckdb.connect(str(db))
    con.execute(change)
    con.close()
    bad = run("catalog", "validate", cat, "-d", str(db), check=False)
    assert bad.returncode == 1
    assert refusal in bad.stderr
