"""What the command line's modules share: flag spellings in messages, failing with one
line, and a spinner (:mod:`dpsql.cli`, :mod:`dpsql.cli_ledger`)."""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Any

import click

from dpsql.errors import DpsqlError, QueryCancelled
from dpsql.text import escape

_FLAGS = {"epsilon": "--epsilon", "delta": "--delta", "alpha": "--alpha",
          "mechanism": "--mechanism", "max_groups": "--max-groups", "max_rows": "--max-rows",
          "ledger": "--ledger", "analyst": "--analyst", "catalog": "--catalog",
          "database": "--database"}
_NAMES = "|".join(_FLAGS)

#: dpsql's messages are shared with the Python API, so their hints name keyword
#: arguments; on the command line each becomes the flag that does the same.
_CLI_SPELLINGS: list[tuple[re.Pattern, Any]] = [
    (re.compile(r"\bbudget=\(epsilon, delta\)"), "--budget EPSILON DELTA"),
    (re.compile(r"\ba connection's budget= is only a cap"), "--budget is only a cap"),
    (re.compile(r"\bconnection budget\b"), "--budget"),
    (re.compile(r"\bcatalog=PATH \(a YAML file\), a dict or a Catalog"), "--catalog FILE"),
    (re.compile(r"\bledger=PATH\b"), "--ledger PATH"),
    (re.compile(r"\bledger=':memory:'"), "--ledger :memory:"),
    (re.compile(r"\bpass epsilon=\.\.\."), "pass --epsilon EPS"),
    (re.compile(rf"\be\.g\. ({_NAMES})=([^\s)]+)"), lambda m: f"e.g. {_FLAGS[m[1]]} {m[2]}"),
    (re.compile(rf"\b({_NAMES})=('(?:[^'\\]|\\.)*') is refused"),
     lambda m: f"{_FLAGS[m[1]]} {m[2]} is refused"),
    (re.compile(rf"\bleave ({_NAMES}) unset"), lambda m: f"leave out {_FLAGS[m[1]]}"),
    (re.compile(rf"^({_NAMES}) must\b"), lambda m: f"{_FLAGS[m[1]]} must"),
]


def cli_spelling(message: str) -> str:
    """A message's Python spellings (keyword arguments) in the command line's flags.

    >>> cli_spelling("no privacy budget for data set 'x': declare 'budget: {epsilon: ..., "
    ...              "delta: ...}' in the catalog, or pass budget=(epsilon, delta)")
    "no privacy budget for data set 'x': declare 'budget: {epsilon: ..., delta: ...}' in \
the catalog, or pass --budget EPSILON DELTA"
    >>> cli_spelling("needs delta > 0 (e.g. delta=1e-6)")
    'needs delta > 0 (e.g. --delta 1e-6)'
    >>> cli_spelling("ledger='x.sqlite' is refused: the data owner pinned this data set's "
    ...              "ledger (DPSQL_LEDGER); leave ledger unset")
    "--ledger 'x.sqlite' is refused: the data owner pinned this data set's ledger \
(DPSQL_LEDGER); leave out --ledger"
    """
    for pattern, replacement in _CLI_SPELLINGS:
        message = pattern.sub(replacement, message)
    return message


def fail(exc: DpsqlError) -> None:
    if isinstance(exc, QueryCancelled):  # Ctrl-C: one line, the shell's usual status
        click.secho(f"cancelled: {escape(exc)}", fg="red", err=True)
        sys.exit(130)
    # the hints in the command line's words: --delta 1e-6, not delta=1e-6
    message = cli_spelling(str(exc))
    click.secho(f"error ({type(exc).__name__}): {escape(message)}", fg="red", err=True)
    sys.exit(1)


def spinner(message: str):
    """A spinner on stderr while something slow runs (nothing when stderr is no terminal)."""
    from rich.console import Console

    console = Console(stderr=True)
    return console.status(message) if console.is_terminal else contextlib.nullcontext()
