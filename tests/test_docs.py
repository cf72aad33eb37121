"""The README's quick start stays true to CI and to the command line."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert command.startswith("python3 -m venv .venv")
    assert command in readme


def test_readme_documents_every_cli_command():
    from dpsql.cli import main

    readme = (ROOT / "README.md").read_text()
    for name in main.commands:
        assert f"dpsql {name}" in readme
