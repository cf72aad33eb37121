"""``dpsql shell``: an interactive prompt that answers SQL privately.

SQL may span lines; it runs when a line ends with ``;`` or at an empty line. Each
answer spends the shell's current epsilon and delta from the connection's budget. Lines
starting with a dot are shell commands (``.help`` lists them). With a terminal, line
editing and a history kept in ``~/.dpsql_history`` come from :mod:`readline` (when
Python has it); without one (input piped in), there is no prompt and the exit status
is 1 if any statement was refused. Ctrl-C while a query runs cancels it (the
database stops at once; the charge is kept and logged as ``cancelled``) and returns to
the prompt; Ctrl-C at the prompt drops a half-typed query.

Analyst-influenced text it prints (error messages, the analyst's name, results) goes
through :func:`dpsql.text.escape`, so control characters show as visible escapes.
"""

from __future__ import annotations

import cmd
import datetime
import re
import signal
import sys
import threading
from pathlib import Path

import click

from dpsql.errors import DpsqlError, QueryCancelled
from dpsql.mechanisms import DEFAULT_MECHANISM, MECHANISMS
from dpsql.text import escape

PROMPT = "dpsql> "
CONTINUATION = "   ...> "
HISTORY_LENGTH = 1000

HELP = """\
SQL                 answer an aggregate query privately (ends with ';' or an empty line);
                    it spends the current epsilon and delta
.explain SQL        rewritten SQL, noise and predicted error; spends nothing
.epsilon [X]        show or set the epsilon of each query
.delta [X]          show or set the delta of each query
.mechanism [NAME]   show or set the noise: {mechanisms}
.alpha [X]          show or set alpha: error bars are 1 - alpha intervals
.budget             budget spent and remaining (this analyst)
.tables             catalog tables and their columns
.help               this help
.quit               leave (also .exit or Ctrl-D); Ctrl-C drops a half-typed query
                    or cancels a running one (its charge is kept)""".format(
    mechanisms=" or ".join(MECHANISMS))

_SQL_WORDS = ("SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT", "COUNT",
              "SUM", "AVG", "DISTINCT", "CASE", "WHEN", "THEN", "ELSE", "END", "AS", "AND",
              "OR", "NOT", "CAST", "LEAST", "GREATEST", "ABS", "ROUND")


_PYTHON_HINT = re.compile(r"\be\.g\. (epsilon|delta|alpha|mechanism)=([^\s)]+)")


def shell_spelling(message: str) -> str:
    """A message's Python-style hint in the shell's words.

    >>> shell_spelling("needs delta > 0 (e.g. delta=1e-6)")
    'needs delta > 0 (e.g. .delta 1e-6)'
    """
    return _PYTHON_HINT.sub(lambda m: f"e.g. .{m[1]} {m[2]}", message)


def bound_text(value) -> str:
    """A catalog bound as the analyst wrote it: a number, or an ISO date or timestamp.

    >>> import datetime
    >>> bound_text(0), bound_text(1e7), bound_text(0.25), bound_text(datetime.date(2024, 1, 1))
    ('0', '10000000', '0.25', '2024-01-01')
    >>> bound_text(datetime.datetime(2024, 1, 1, 6, 30))
    '2024-01-01 06:30:00'
    """
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)  # 10000000, not 1e+07
    if isinstance(value, float):
        return repr(value)
    return str(value)


def default_history_path() -> Path:
    return Path.home() / ".dpsql_history"


class Shell(cmd.Cmd):
    """The prompt loop; dot commands are the ``do_*`` methods."""

    def __init__(self, conn, epsilon: float, delta: float = 0.0,
                 mechanism: str | None = None, alpha: float | None = None,
                 interactive: bool | None = None, history: Path | None = None):
        super().__init__()
        self.conn = conn
        self.epsilon, self.delta = epsilon, delta
        self.mechanism, self.alpha = mechanism or DEFAULT_MECHANISM, alpha or 0.05
        self.interactive = sys.stdin.isatty() if interactive is None else interactive
        self.history = history if history is not None else default_history_path()
        self.buffer: list[str] = []
        self.failures = 0
        self.done = False
        self.prompt = PROMPT if self.interactive else ""

    # -- loop -------------------------------------------------------------------------

    def _python_handles_ctrl_c(self):
        """On a terminal, Ctrl-C must drop a half-typed query and cancel a running one:
        Python's own SIGINT handler is installed for the loop (the previous handler is
        returned, None if nothing changed). A process a script started in the
        background inherits SIGINT ignored, and Python then raises no
        KeyboardInterrupt at all."""
        if not self.interactive or threading.current_thread() is not threading.main_thread():
            return None
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            return None
        return signal.signal(signal.SIGINT, signal.default_int_handler)

    def cmdloop(self, intro=None) -> None:
        readline = self._start_readline()
        previous = self._python_handles_ctrl_c()
        try:
            if intro and self.interactive:
                self.stdout.write(intro + "\n")
            while not self.done:
                self.prompt = ("" if not self.interactive
                               else CONTINUATION if self.buffer else PROMPT)
                try:
                    line = input(self.prompt)
                except EOFError:
                    if self.interactive:
                        self.stdout.write("\n")
                    if self.buffer:
                        self._run_buffer()
                    break
                except KeyboardInterrupt:
                    self.stdout.write("^C\n")
                    self.buffer = []
                    continue
                try:
                    self.onecmd(line)
                except KeyboardInterrupt:
                    click.secho("interrupted", fg="red", err=True)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            if readline is not None:
                try:
                    readline.set_history_length(HISTORY_LENGTH)
                    readline.write_history_file(str(self.history))
                except OSError:
                    pass

    def _start_readline(self):
        if not self.interactive:
            return None
        try:
            import readline
        except ImportError:  # no readline on this platform: plain input()
            return None
        try:
            if self.history.exists():
                readline.read_history_file(str(self.history))
        except OSError:
            pass
        readline.set_completer(self.complete)
        readline.set_completer_delims(" \t\n(),;=<>*+-/")
        readline.parse_and_bind("tab: complete")
        return readline

    def onecmd(self, line: str) -> bool:
        text = line.strip()
        if not self.buffer and (not text or text.startswith("--")):
            return False
        if text.startswith("."):  # a dot command, also while a query is half typed
            name, _, arg = text[1:].partition(" ")
            handler = getattr(self, f"do_{name.lower()}", None)
            if handler is None:
                self._error(f"unknown command .{name} (.help lists the commands)")
            else:
                handler(arg.strip())
            return self.done
        if text:
            self.buffer.append(line)
        if self.buffer and (not text or text.endswith(";")):
            self._run_buffer()
        return self.done

    def complete(self, text: str, state: int):
        import readline

        if readline.get_line_buffer().lstrip().startswith(".") and " " not in \
                readline.get_line_buffer().strip():
            names = [f".{n[3:]}" for n in self.get_names() if n.startswith("do_")]
        else:
            names = list(_SQL_WORDS)
            for table in self.conn.catalog.tables.values():
                names.append(table.name)
                names += list(table.columns)
        options = sorted({n for n in names if n.lower().startswith(text.lower())})
        return options[state] if state < len(options) else None

    # -- SQL ----------------------------------------------------------------------------

    def _run_buffer(self) -> None:
        sql = "\n".join(self.buffer).strip().rstrip(";").strip()
        self.buffer = []
        if not sql:
            return
        try:
            res = self.conn.execute(sql, epsilon=self.epsilon, delta=self.delta,
                                    mechanism=self.mechanism, alpha=self.alpha)
        except QueryCancelled as exc:  # Ctrl-C while it ran: back to the prompt
            self.failures += 1
            click.secho(f"cancelled: {escape(exc)}", fg="red", err=True)
            if exc.charged:
                self._remaining()
            return
        except DpsqlError as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return
        self.stdout.write(str(res) + "\n")
        self._remaining()

    def _remaining(self) -> None:
        left = self.conn.budget.remaining
        self.stdout.write(f"remaining budget: epsilon={left[0]:g}, delta={left[1]:g}\n")

    def _error(self, message: str) -> None:
        self.failures += 1
        click.secho(f"error: {escape(shell_spelling(message))}", fg="red", err=True)

    # -- dot commands ---------------------------------------------------------------------

    def _number(self, name: str, arg: str, ok, rule: str) -> None:
        if not arg:
            self.stdout.write(f"{name} = {getattr(self, name):g}\n")
            return
        try:
            value = float(arg)
        except ValueError:
            value = None
        if value is None or not ok(value):
            self._error(f".{name} needs {rule}, got {arg!r}")
            return
        setattr(self, name, value)
        self.stdout.write(f"{name} = {value:g}\n")

    def do_epsilon(self, arg: str) -> None:
        """Show or set the epsilon each query spends."""
        self._number("epsilon", arg, lambda v: 0 < v < float("inf"), "a number > 0")

    def do_delta(self, arg: str) -> None:
        """Show or set the delta each query spends."""
        self._number("delta", arg, lambda v: 0 <= v < 1, "a number in [0, 1)")

    def do_alpha(self, arg: str) -> None:
        """Show or set alpha (error bars are 1 - alpha intervals)."""
        self._number("alpha", arg, lambda v: 0 < v < 1, "a number in (0, 1)")

    def do_mechanism(self, arg: str) -> None:
        """Show or set the noise mechanism."""
        if arg:
            if arg.lower() not in MECHANISMS:
                self._error(f".mechanism needs {' or '.join(MECHANISMS)}, got {arg!r}")
                return
            self.mechanism = arg.lower()
        self.stdout.write(f"mechanism = {self.mechanism}\n")

    def do_explain(self, arg: str) -> None:
        """Explain a query without spending budget."""
        sql = arg.strip().rstrip(";").strip()
        if not sql:
            self._error(".explain needs a query: .explain SELECT ...")
            return
        try:
            self.stdout.write(str(self.conn.explain(
                sql, epsilon=self.epsilon, delta=self.delta, mechanism=self.mechanism,
                alpha=self.alpha)) + "\n")
        except DpsqlError as exc:
            self._error(f"{type(exc).__name__}: {exc}")

    def do_budget(self, arg: str) -> None:
        """Budget spent and remaining."""
        view = self.conn.budget
        spent, left = view.spent, view.remaining
        self.stdout.write(f"analyst {escape(self.conn.analyst)}: spent epsilon={spent[0]:g}, "
                          f"delta={spent[1]:g}; remaining epsilon={left[0]:g}, "
                          f"delta={left[1]:g}\n")

    def do_tables(self, arg: str) -> None:
        """Catalog tables and columns."""
        for table in self.conn.catalog.tables.values():
            cols = ", ".join(
                f"{c.name} {c.type}"
                + (f" [{bound_text(c.lower)}, {bound_text(c.upper)}]" if c.bounded else "")
                for c in table.columns.values())
            self.stdout.write(escape(f"{table.name}: {cols}") + "\n")

    def do_help(self, arg: str) -> None:
        """This help."""
        self.stdout.write(HELP + "\n")

    def do_quit(self, arg: str) -> None:
        """Leave the shell."""
        self.done = True

    do_exit = do_quit


def run_shell(conn, epsilon: float, delta: float = 0.0, mechanism: str | None = None,
              alpha: float | None = None, history: Path | None = None) -> int:
    """Runs the prompt on stdin; returns the exit status (1 if piped input had errors)."""
    shell = Shell(conn, epsilon, delta, mechanism, alpha, history=history)
    intro = (f"dpsql shell: data set {escape(repr(conn.catalog.dataset))}, analyst "
             f"{escape(repr(conn.analyst))}. "
             f"Each query spends epsilon={epsilon:g}, delta={delta:g} "
             "(.epsilon / .delta to change).\n"
             "End SQL with ';' or an empty line. .help lists the commands, .quit leaves.")
    shell.cmdloop(intro)
    return 1 if shell.failures and not shell.interactive else 0
