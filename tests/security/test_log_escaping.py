"""Issue 13, item 9: logs and terminal output escape control characters.

The attack: ``dpsql budget log`` printed analyst SQL as it came, so a refused (free)
query carrying a newline and ANSI escapes forged an "answered" line and hid a real
ε = 50 entry on the data owner's terminal. Every place that prints analyst-influenced
text (the budget log and show, CLI errors and tables, the shell, Result and Explanation
rendering) now goes through :func:`dpsql.text.escape`.
"""

from __future__ import annotations

import re
import unicodedata
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import dpsql
from dpsql.cli import _format_result, main
from dpsql.datasets import pums_catalog
from dpsql.ledger import ANALYST_ENV, CATALOG_ENV, LEDGER_ENV, Ledger
from dpsql.result import Explanation, Result
from dpsql.shell import Shell
from dpsql.text import ESCAPED_CATEGORIES, escape
from tests.support import ledger_of

FORGED = ("\n2026-01-01T00:00:00.000+00:00  pums  alice  answered  epsilon=0 delta=0  "
          "SELECT COUNT(*) FROM pums")
HIDE = "\x1b[2K\x1b[1A\x1b[2K\r"

#: Refused, free queries an analyst might send; each one is logged with its raw text.
PAYLOADS = [
    "SELECT COUNT(*) FROM nowhere" + FORGED,
    "SELECT COUNT(*) FROM nowhere " + HIDE + HIDE,
    "SELECT COUNT(*) FROM nowhere \u2028forged\u2029line\x85nel\x0bvt\x0cff\x1cfs",
    "SELECT COUNT(*) FROM nowhere \u202eevil\u202c \u2066x\u2069 \u200e\u200f\u061c",
    "SELECT COUNT(*) FROM nowhere \x9b2K\x9d0;title\x07 \x7f \x00 \t\ud800",
    "SELECT COUNT(*) FROM pums WHERE \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\",
]

LINE = re.compile(r"^(\S+)  (\S+)  (\S+)  (\w+) +epsilon=(\S+) delta=(\S+)  (.*)$")


def raw_controls(text: str) -> list[str]:
    """The characters a terminal would act on, other than the newline between lines."""
    return [f"U+{ord(ch):04X}" for ch in text
            if ch != "\n" and unicodedata.category(ch) in ESCAPED_CATEGORIES]


@pytest.fixture(autouse=True)
def _no_pins(monkeypatch):
    for name in (LEDGER_ENV, ANALYST_ENV, CATALOG_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def attacked_ledger(security_db, tmp_path):
    """A ledger with a real ε = 50 answer and, after it, the analyst's forgeries."""
    path = tmp_path / "ledger.sqlite"
    import dataclasses

    catalog = dataclasses.replace(pums_catalog(), budget=None)
    with dpsql.connect(security_db, catalog, budget=(100.0, 1e-5), ledger=path,
                       analyst="mallory") as conn:
        conn.execute("SELECT COUNT(*) AS n FROM pums", epsilon=50.0)
        for sql in PAYLOADS:
            with pytest.raises(dpsql.DpsqlError):
                conn.execute(sql, epsilon=0.1)
        assert conn.budget.spent == (50.0, 0.0)  # the forgeries were free
    # names written by other means (an older dpsql, the Ledger API) are escaped too
    Ledger(path).refuse("pums", "eve\x1b[2K\nroot", "SELECT 1" + FORGED, "x\x1b[8m")
    return path


def test_budget_log_is_one_line_per_entry_and_shows_the_real_charge(attacked_ledger):
    entries = Ledger(attacked_ledger).log(None, 1000)
    assert len(entries) == len(PAYLOADS) + 2
    out = CliRunner().invoke(main, ["budget", "log", "--ledger", str(attacked_ledger)])
    assert out.exit_code == 0, out.output
    assert raw_controls(out.output) == []
    lines = out.output.splitlines()  # also splits at U+2028/2029, U+0085, VT, FF, FS...
    assert len(lines) == len(entries)
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    outcomes = [(m.group(4), float(m.group(5))) for m in parsed]
    assert outcomes.count(("answered", 50.0)) == 1
    assert sorted(outcomes)[1:] == [("refused", 0.0)] * (len(entries) - 1)
    # nothing was lost: the escapes are there to read
    text = out.output
    assert "nowhere\\n2026-01-01T00:00:00.000+00:00  pums  alice  answered" in text
    assert "\\x1b[2K\\x1b[1A\\x1b[2K\\r" in text
    assert "\\u202eevil\\u202c" in text and "\\u2028forged\\u2029line\\x85nel" in text
    assert "\\x9b2K" in text and "\\x00" in text and "\\ud800" in text
    assert "eve\\x1b[2K\\nroot" in text and "[x\\x1b[8m]" in text


def test_budget_show_escapes_names(attacked_ledger):
    out = CliRunner().invoke(main, ["budget", "show", "--ledger", str(attacked_ledger)])
    assert out.exit_code == 0, out.output
    assert raw_controls(out.output) == []
    assert "analyst eve\\x1b[2K\\nroot" in out.output and "analyst mallory" in out.output


def test_cli_errors_are_escaped(security_db, tmp_path, monkeypatch):
    import dpsql.cli as cli

    def refuse(*args, **kwargs):
        raise dpsql.UnknownTableError("unknown table 'x" + HIDE + FORGED + "'")

    monkeypatch.setattr(cli.dpsql, "connect", refuse)
    out = CliRunner().invoke(main, ["query", "SELECT 1", "-d", str(security_db), "-c",
                                    __file__, "-e", "1"])
    assert out.exit_code == 1
    assert raw_controls(out.stderr) == [] and len(out.stderr.splitlines()) == 1
    assert "\\x1b[2K" in out.stderr


def test_cli_query_with_a_payload_prints_no_raw_controls(security_db):
    from dpsql.datasets import catalog_path

    for sql in PAYLOADS:
        out = CliRunner().invoke(main, ["query", sql, "-d", str(security_db), "-c",
                                        str(catalog_path("pums")), "-e", "0.1",
                                        "--ledger", ":memory:"])
        assert out.exit_code == 1
        assert raw_controls(out.stderr) == [] and raw_controls(out.output) == []


EVIL = "a\x1b[2J\nb\u202e\u2028c\x85"
EVIL_RESULT = Result(columns=["k" + EVIL, "n"], rows=[(EVIL, 3), ("plain", 4)],
                     accuracy=[(None, 2), (None, 2)], cost=(1.0, 0.0), sql="SELECT 1",
                     notes=("note" + EVIL,))


def test_result_text_and_html_escape_names_and_values():
    text = str(EVIL_RESULT)
    assert raw_controls(text) == []
    assert len(text.splitlines()) == 2 + len(EVIL_RESULT.rows) + 1 + len(EVIL_RESULT.notes)
    assert escape(EVIL) in text and "ka\\x1b[2J\\nb" in text
    html = EVIL_RESULT._repr_html_()
    assert raw_controls(html) == [] and "a\\x1b[2J\\nb\\u202e" in html
    # the values themselves are the data, untouched
    assert EVIL_RESULT.rows[0][0] == EVIL and EVIL_RESULT.df.iloc[0, 0] == EVIL


def test_cli_formats_escape_names_and_values():
    for fmt in ("table", "csv", "json"):
        out = _format_result(EVIL_RESULT, fmt)
        assert raw_controls(out) == [], fmt
        assert len(out.splitlines()) == {"table": 6, "csv": 3, "json": 1}[fmt], fmt
    import json

    assert json.loads(_format_result(EVIL_RESULT, "json"))["rows"][0][0] == EVIL


def test_explanation_text_and_html_escape():
    exp = Explanation(sql="SELECT '" + EVIL + "'", statistics=[{
        "name": "n" + EVIL, "statistic": "COUNT(" + EVIL + ")", "linf": 1, "l1": 1,
        "epsilon": 1.0, "rho": None, "mechanism": "laplace", "scale": 1.0,
        "half_width": 3.0}], partition_selection=None, cost=(1.0, 0.0), max_groups=1,
        max_rows=1, notes=("note " + EVIL,))
    text = str(exp)
    assert raw_controls(text) == []
    assert "SELECT 'a\\x1b[2J\\nb" in text and "Note: note a\\x1b" in text
    assert raw_controls(exp._repr_html_()) == []


def test_shell_escapes_errors_and_names(capsys):
    class Conn:
        analyst = "eve" + EVIL
        catalog = SimpleNamespace(tables={}, dataset="pums")
        budget = SimpleNamespace(spent=(0.0, 0.0), remaining=(1.0, 0.0))

        def execute(self, sql, **kwargs):
            raise dpsql.ParseError("cannot parse " + sql)

        def explain(self, sql, **kwargs):
            return EVIL_RESULT

    shell = Shell(Conn(), 0.1, interactive=False)
    shell.onecmd(PAYLOADS[0].replace("\n", " ") + HIDE + ";")
    shell.onecmd(".explain SELECT 1")
    shell.onecmd(".budget")
    shell.onecmd(".epsilon " + HIDE)
    shell.onecmd(".nope" + HIDE)
    out = capsys.readouterr()
    assert raw_controls(out.out) == [] and raw_controls(out.err) == []
    assert "\\x1b[2K" in out.err and "analyst eve" + escape(EVIL) in out.out
    assert len(out.err.splitlines()) == 3  # three errors, one line each


def test_shell_with_real_payloads(security_db, capsys):
    with dpsql.connect(security_db, pums_catalog(), ledger=":memory:") as conn:
        shell = Shell(conn, 0.1, interactive=False)
        for sql in PAYLOADS:
            shell.onecmd(sql.replace("\n", " ") + ";")
        assert conn.budget.spent == (0.0, 0.0)
    out = capsys.readouterr()
    assert raw_controls(out.out) == [] and raw_controls(out.err) == []
    assert shell.failures == len(PAYLOADS)


def test_lone_surrogates_are_refused_cleanly_and_logged(security_db):
    """A lone surrogate is not UTF-8: the ledger stores it as a visible escape instead
    of failing (with a UnicodeEncodeError outside the dpsql hierarchy)."""
    with dpsql.connect(security_db, pums_catalog(), ledger=":memory:") as conn:
        with pytest.raises(dpsql.DpsqlError):
            conn.execute("SELECT COUNT(*) FROM nowhere\ud800", epsilon=0.1)
        entry = ledger_of(conn).log(None, 1)[0]
        assert entry["outcome"] == "refused" and entry["sql"].endswith("nowhere\\ud800")
