"""The ``dpsql`` command line.

Exit codes: 0 success; 1 a query or catalog was refused (a :class:`DpsqlError`);
2 bad command-line usage; 130 a query cancelled with Ctrl-C (one line, no traceback;
its charge is kept).

Text that an analyst or the data may have written (SQL, error messages, analyst names,
column names, string values) is printed through :func:`dpsql.text.escape`: a control
character, an ANSI escape sequence, a line separator or a bidi override shows as a
visible escape such as ``\\n`` or ``\\x1b``, never acts on the terminal, and never
starts a new line (``budget log`` is one line per entry). JSON output escapes them as
JSON does.
"""

from __future__ import annotations

import contextlib
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import sqlglot

import dpsql
from dpsql.errors import DpsqlError, LedgerError, QueryCancelled
from dpsql.text import escape

DEMO_QUERIES = [
    ("Count and average income by sex (public domain: both keys always shown)",
     "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM pums GROUP BY sex",
     1.0, 0.0),
    ("People by race in pums_dup, where one person has 1-4 rows (user-level bounding)",
     "SELECT race, COUNT(*) AS n_rows, COUNT(DISTINCT pid) AS people FROM pums_dup "
     "GROUP BY race ORDER BY race",
     1.0, 0.0),
    ("Share with income over 50,000 by marital status",
     "SELECT married, AVG(CASE WHEN income > 50000 THEN 1 ELSE 0 END) AS share_rich "
     "FROM pums GROUP BY married",
     0.5, 0.0),
    ("Age decades (age's catalog bounds 0..100 are public: every decade is listed)",
     "SELECT age // 10 * 10 AS decade, COUNT(*) AS n FROM pums WHERE age >= 20 "
     "GROUP BY decade ORDER BY decade",
     0.5, 0.0),
    ("Income bands found in the data (keys released by DP partition selection)",
     "SELECT FLOOR(income / 25000) * 25000 AS band, COUNT(*) AS n FROM pums "
     "GROUP BY band ORDER BY band",
     1.5, 1e-6),
]


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


def _fail(exc: DpsqlError) -> None:
    if isinstance(exc, QueryCancelled):  # Ctrl-C: one line, the shell's usual status
        click.secho(f"cancelled: {escape(exc)}", fg="red", err=True)
        sys.exit(130)
    # the hints in the command line's words: --delta 1e-6, not delta=1e-6
    message = cli_spelling(str(exc))
    click.secho(f"error ({type(exc).__name__}): {escape(message)}", fg="red", err=True)
    sys.exit(1)


def _status(message: str):
    """A spinner on stderr while something slow runs (nothing when stderr is no terminal)."""
    from rich.console import Console

    console = Console(stderr=True)
    return console.status(message) if console.is_terminal else contextlib.nullcontext()


_ALPHA = click.FloatRange(0, 1, min_open=True, max_open=True)


class _Main(click.Group):
    """Every refusal (a DpsqlError) anywhere below exits with status 1 and one line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DpsqlError as exc:
            _fail(exc)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(dpsql.__version__, prog_name="dpsql")
def main() -> None:
    """dpsql: differentially private answers to aggregate SQL.

    Exit status: 0 success, 1 refused (a DpsqlError: bad query, catalog or budget),
    2 usage error, 130 cancelled with Ctrl-C.
    """


@main.command()
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Keep the demo DuckDB database at this path (default: a temporary file).")
def demo(save: Path | None) -> None:
    """Load the bundled PUMS sample into DuckDB and answer a few private queries."""
    from dpsql.datasets import load_pums, pums_catalog

    with tempfile.TemporaryDirectory() as tmp:
        path = save or Path(tmp) / "pums.duckdb"
        from dpsql.engine import default_ledger_path

        # a fresh demo data set starts with a fresh budget
        for old in (path, default_ledger_path(path)):
            if old.exists():
                old.unlink()
        click.echo(f"Loading the bundled PUMS sample (1,000 people) into {path} ...")
        with _status("Loading the PUMS sample into DuckDB ..."):
            load_pums(path)
        budget = (10.0, 1e-5)
        click.echo(f"Connecting with a privacy budget of epsilon={budget[0]:g}, "
                   f"delta={budget[1]:g}.\n")
        try:
            with dpsql.connect(path, catalog=pums_catalog(), budget=budget) as conn:
                results = []
                for title, sql, eps, delta in DEMO_QUERIES:
                    click.secho(title, bold=True)
                    click.echo(f"  {sql}")
                    click.echo(f"  epsilon={eps:g}, delta={delta:g}\n")
                    with _status("Answering privately ..."):
                        res = conn.execute(sql, epsilon=eps, delta=delta)
                    results.append(res)
                    click.echo(str(res) + "\n")
                spent, left = conn.budget.spent, conn.budget.remaining
                click.secho("Budget", bold=True)
                click.echo(f"  spent     epsilon={spent[0]:g}, delta={spent[1]:g}")
                click.echo(f"  remaining epsilon={left[0]:g}, delta={left[1]:g}\n")
                # pums has one row per person (a primary key), so its SQL is a plain
                # clamped GROUP BY; pums_dup shows the per-user bounding
                click.secho("Rewritten SQL of the second query (what DuckDB ran): one "
                            "clamped partial per person and group", bold=True)
                click.echo(sqlglot.transpile(results[1].sql, read="duckdb", pretty=True)[0])
        except DpsqlError as exc:
            _fail(exc)


def _query_options(fn):
    """The options `query` and `explain` share (one definition, so their --help agree)."""
    options = [
        click.argument("sql"),
        click.option("--database", "-d", required=True, help="DuckDB database file."),
        click.option("--catalog", "-c", required=True,
                     type=click.Path(exists=True, dir_okay=False), help="Catalog YAML file."),
        click.option("--epsilon", "-e", type=float, required=True, help="The query's epsilon."),
        click.option("--delta", type=float, default=0.0, show_default=True,
                     help="The query's delta."),
        click.option("--max-groups", type=int, default=None,
                     help="Override the table's max_groups."),
        click.option("--max-rows", type=int, default=None, help="Override the table's max_rows."),
        click.option("--mechanism", type=click.Choice(["laplace", "gaussian"]),
                     default="laplace", show_default=True,
                     help="Noise: discrete Laplace, or Gaussian (needs delta > 0)."),
        click.option("--alpha", type=_ALPHA, default=0.05, show_default=True,
                     help="Error bars are 1 - alpha confidence intervals."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@main.command()
@_query_options
def explain(sql, database, catalog, epsilon, delta, max_groups, max_rows, mechanism,
            alpha) -> None:
    """Show the rewritten SQL, sensitivities, noise and predicted error; spends nothing."""
    from dpsql.ledger import pinned_catalog, pins

    try:
        # explain spends nothing, so a throw-away ledger will do, unless the owner
        # pinned one (which then refuses any other)
        pinned = pins(dpsql.load_catalog(pinned_catalog(catalog))).ledger is not None
        with dpsql.connect(database, catalog=catalog, budget=(max(epsilon, 1e-9), 0.5),
                           ledger=None if pinned else ":memory:") as conn:
            click.echo(str(conn.explain(sql, epsilon=epsilon, delta=delta,
                                        max_groups=max_groups, max_rows=max_rows,
                                        mechanism=mechanism, alpha=alpha)))
    except DpsqlError as exc:
        _fail(exc)


def _format_result(res, fmt: str) -> str:
    if fmt == "csv":
        import pandas as pd

        # the error bars, the level and the cost as ordinary columns (every CSV reader
        # takes them; comment lines would break most): Result.error_table(cost=True)
        columns, rows = res.error_table(cost=True)
        # one line per row, and nothing a terminal would act on
        df = pd.DataFrame.from_records(
            [tuple(escape(v) if isinstance(v, str) else v for v in row) for row in rows],
            columns=[escape(c) for c in columns])
        return df.to_csv(index=False).rstrip("\n")
    if fmt == "json":
        import json

        return json.dumps({
            "columns": res.columns,
            "rows": [list(r) for r in res.rows],
            "accuracy": [list(a) for a in res.accuracy],
            "intervals": [[None if i is None else list(i) for i in row]
                          for row in res.intervals],
            "confidence": 1 - res.alpha,
            "cost": {"epsilon": res.cost[0], "delta": res.cost[1]},
            "notes": list(res.notes),
        }, default=str)
    return str(res)


@main.command()
@_query_options
@click.option("--ledger", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: beside the database, <database>.ledger.sqlite).")
@click.option("--analyst", default=None, help="Analyst name (default: the OS user).")
@click.option("--budget", nargs=2, type=float, default=None, metavar="EPSILON DELTA",
              help="Cap for this call; seeds the data set's total if the owner set none.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="Output format.")
def query(sql, database, catalog, epsilon, delta, max_groups, max_rows, ledger, analyst,
          budget, fmt, mechanism, alpha) -> None:
    """Answer one aggregate query privately and charge the ledger."""
    try:
        with dpsql.connect(database, catalog=catalog, budget=budget, ledger=ledger,
                           analyst=analyst) as conn:
            with _status("Answering privately ..."):
                res = conn.execute(sql, epsilon=epsilon, delta=delta, max_groups=max_groups,
                                   max_rows=max_rows, mechanism=mechanism, alpha=alpha)
            click.echo(_format_result(res, fmt))
            if fmt == "table":
                left = conn.budget.remaining
                click.echo(f"remaining budget: epsilon={left[0]:g}, delta={left[1]:g}",
                           err=True)
    except DpsqlError as exc:
        _fail(exc)


@main.command()
@click.option("--database", "-d", required=True, help="DuckDB database file.")
@click.option("--catalog", "-c", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Catalog YAML file.")
@click.option("--epsilon", "-e", type=click.FloatRange(0, min_open=True), default=0.1,
              show_default=True, help="Epsilon of each query (.epsilon changes it).")
@click.option("--delta", type=click.FloatRange(0, 1, max_open=True), default=0.0,
              show_default=True, help="Delta of each query (.delta changes it).")
@click.option("--mechanism", type=click.Choice(["laplace", "gaussian"]), default="laplace",
              show_default=True, help="Noise: discrete Laplace, or Gaussian (needs delta > 0).")
@click.option("--alpha", type=_ALPHA, default=0.05, show_default=True,
              help="Error bars are 1 - alpha confidence intervals.")
@click.option("--ledger", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: beside the database, <database>.ledger.sqlite).")
@click.option("--analyst", default=None, help="Analyst name (default: the OS user).")
@click.option("--budget", nargs=2, type=float, default=None, metavar="EPSILON DELTA",
              help="Cap for this session; seeds the data set's total if the owner set none.")
def shell(database, catalog, epsilon, delta, mechanism, alpha, ledger, analyst,
          budget) -> None:
    """Interactive prompt: SQL answered privately, each query charged to the ledger.

    SQL ends with ';' or an empty line. Commands: .epsilon X, .delta X, .mechanism NAME,
    .alpha X, .explain SQL, .budget, .tables, .help, .quit. History is kept in
    ~/.dpsql_history. With input piped in, the exit status is 1 if a statement was
    refused.
    """
    from dpsql.shell import run_shell

    with dpsql.connect(database, catalog=catalog, budget=budget, ledger=ledger,
                       analyst=analyst) as conn:
        status = run_shell(conn, epsilon, delta, mechanism, alpha)
    sys.exit(status)


def _ledger_path(ledger, database) -> str:
    """--ledger, else --database's default ledger, else the service's DPSQL_LEDGER pin."""
    import os

    from dpsql.engine import default_ledger_path
    from dpsql.ledger import LEDGER_ENV

    if ledger:
        return str(ledger)
    if database is not None:
        return str(default_ledger_path(database))
    if os.environ.get(LEDGER_ENV):
        return os.environ[LEDGER_ENV]
    raise click.UsageError(f"give --ledger PATH or --database PATH (or set {LEDGER_ENV})")


def _ledger(ledger, database, readonly: bool = False, create: bool = False):
    """The ledger an owner command works on. Reading commands open it read-only (a
    read-only file works); only ``init`` and ``set`` may create one, and never over an
    existing file."""
    from dpsql.ledger import Ledger

    try:
        path = _ledger_path(ledger, database)
        if "://" not in path and not create and not Path(path).exists():
            raise click.UsageError(f"no ledger at {path}")
        led = Ledger(path, readonly=readonly, create=create)
    except DpsqlError as exc:
        _fail(exc)
    click.get_current_context().call_on_close(led.close)  # also under CliRunner
    return led


_LEDGER_OPTIONS = [
    click.option("--ledger", default=None,
                 help="Ledger file or PostgreSQL URL (default: the DPSQL_LEDGER pin, if set)."),
    click.option("--database", "-d", default=None,
                 help="Database whose default ledger (<database>.ledger.sqlite) to use."),
]


def _ledger_options(fn):
    for option in reversed(_LEDGER_OPTIONS):
        fn = option(fn)
    return fn


def _float(value: str, what: str) -> float:
    """An owner's number from the command line, validated like every budget."""
    from dpsql.ledger import real_number

    try:
        return real_number(float(value), what)
    except ValueError:
        raise click.BadParameter(f"{what} must be a number, got {value!r}") from None


@main.group()
def budget() -> None:
    """Show, check and manage privacy budgets in a ledger.

    Whoever can write the ledger file can change budgets: its file permissions are the
    data owner's control. With DPSQL_LEDGER_KEY set, the ledger's entries, totals and
    budgets are HMAC-keyed, so only the key's holder can rewrite them undetected.
    """


#: What the zCDP line of ``budget show`` means, in words.
ZCDP_NOTE = (
    "(*) zCDP: this data set admits queries by zero-concentrated DP (rho adds up, then\n"
    "    converts to an epsilon using the total's delta); 'remaining' is what that bound\n"
    "    leaves. One accountant per data set: see dpsql.accounting for the theorem.")


@budget.command("show")
@_ledger_options
@click.option("--dataset", default=None, help="Only this data set.")
def budget_show(ledger, database, dataset) -> None:
    """Totals, spending and what remains, per data set and analyst (read-only)."""
    from dpsql.accounting import Accounting
    from dpsql.ledger import ALL

    led = _ledger(ledger, database, readonly=True)
    try:
        rows = led.budgets(dataset)
        counts = {(d, a): (n, c) for d, a, n, c in led.refusal_counts(dataset)}
        click.echo(f"ledger {escape(led.path)} (id {led.id}, "
                   f"{'keyed' if led.keyed else 'not keyed'})")
        if not rows:
            click.echo("no budgets set")
            return
        bindings = led.bindings()
        zcdp_shown = False
        for ds in sorted({r[0] for r in rows}):
            totals = {a: (e, d, src) for d_, a, e, d, src in rows if d_ == ds}
            accountant = led.accountant(ds)
            where = bindings.get(ds)
            click.secho(f"data set {escape(ds)} ({accountant} composition"
                        + (f"; database {escape(where.get('path') or where.get('url'))}"
                           if where else "") + ")", bold=True)
            spenders = {a for d_, a in led.spenders() if d_ == ds}
            names = [ALL] + sorted((set(totals) | spenders | {a for d_, a in counts
                                                              if d_ == ds}) - {ALL})
            for name in names:
                s = led.spent(ds, None if name == ALL else name)
                who = "all analysts" if name == ALL else f"analyst {escape(name)}"
                line = f"  {who:<24} spent epsilon={s.basic[0]:g}, delta={s.basic[1]:g}"
                if name in totals:
                    e, d, src = totals[name]
                    left = Accounting((e, d), accountant).remaining(s)
                    line += (f"; total epsilon={e:g}, delta={d:g} ({src}); remaining "
                             f"epsilon={left[0]:g}, delta={left[1]:g}")
                    if accountant == "zcdp" and s.rho > 0:
                        line += f"; zCDP epsilon={s.zcdp_epsilon(d):.4g} (*)"
                        zcdp_shown = True
                if (ds, name) in counts:
                    stored, dropped = counts[(ds, name)]
                    line += f"; refused {stored + dropped}"
                    if dropped:
                        line += f" ({dropped} counted only)"
                click.echo(line)
        if zcdp_shown:
            click.echo(ZCDP_NOTE)
    except DpsqlError as exc:
        _fail(exc)


@budget.command("log")
@_ledger_options
@click.option("--dataset", default=None, help="Only this data set.")
@click.option("--limit", type=int, default=50, show_default=True, help="Newest N entries.")
def budget_log(ledger, database, dataset, limit) -> None:
    """The audit log, newest first by insertion: every query with its time, analyst,
    cost and outcome (read-only).

    One line per entry: control characters in the SQL, the analyst name or the error
    (a newline, an ANSI escape, a bidi override) print as visible escapes, so a query
    cannot forge an entry or hide one. A long query shows its first characters, its
    length and its SHA-256.
    """
    led = _ledger(ledger, database, readonly=True)
    try:
        entries = led.log(dataset, limit)
    except DpsqlError as exc:
        _fail(exc)
    for e in entries:
        detail = f"  [{escape(e['detail'])}]" if e["detail"] else ""
        sql = escape(e["sql"])
        if e["sql_length"] > len(e["sql"]):
            sql += f"... ({e['sql_length']} characters, sha256 {e['sql_hash'][:16]})"
        click.echo(f"{escape(e['time'])}  {escape(e['dataset'])}  "
                   f"{escape(e['analyst'])}  {escape(e['outcome']):<8}  "
                   f"epsilon={e['epsilon']:g} delta={e['delta']:g}  {sql}{detail}")


@budget.command("verify")
@_ledger_options
def budget_verify(ledger, database) -> None:
    """Check the whole ledger: the hash chain of every entry, the checkpoint, the running
    totals, budgets and bindings (read-only; exit status 1 on any mismatch)."""
    led = _ledger(ledger, database, readonly=True)
    try:
        report = led.verify()
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"ledger {escape(led.path)} (id {report['id']}, "
               f"{'keyed' if report['keyed'] else 'not keyed'}): {report['entries']} entries, "
               f"{report['charges']} charges, chain and totals verified")


@main.group()
def cache() -> None:
    """The answer cache in a ledger (owner commands).

    A query asked again with the same text, epsilon, delta and options gets the answer
    already released to that analyst, free (see dpsql.answer_cache). Only the owner
    decides that answers are stale: change 'data_version' in the catalog, or clear them.
    """


@cache.command("clear")
@_ledger_options
@click.option("--dataset", default=None, help="Only this data set.")
@click.option("--analyst", default=None, help="Only this analyst.")
def cache_clear(ledger, database, dataset, analyst) -> None:
    """Forget cached answers: the next asking of each query is answered and charged."""
    from dpsql.answer_cache import clear

    led = _ledger(ledger, database)
    try:
        n = clear(led, dataset, analyst)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"cleared {n} cached answer{'s' if n != 1 else ''}")


@budget.command("init")
@click.option("--ledger", required=True, help="Ledger file or PostgreSQL URL to create.")
def budget_init(ledger) -> None:
    """Owner command: create an empty ledger (never over an existing file) and print its
    id, to pin with the catalog's 'ledger_id:' or DPSQL_LEDGER_ID."""
    from dpsql.ledger import Ledger

    if "://" not in ledger and Path(ledger).exists():
        _fail(LedgerError(f"{ledger!r} already exists; a ledger is never made over a file"))
    try:
        if "://" in ledger:
            with contextlib.suppress(LedgerError):
                Ledger(ledger, create=False, readonly=True).close()
                _fail(LedgerError("that schema already holds a ledger"))
        led = Ledger(ledger, create=True)
    except DpsqlError as exc:
        _fail(exc)
    led.close()
    click.echo(f"created ledger {escape(led.path)} with id {led.id}")


@budget.command("set")
@_ledger_options
@click.option("--dataset", required=True, help="Data set name (the catalog's 'dataset').")
@click.option("--analyst", default=None, help="Set this analyst's own total instead.")
@click.option("--epsilon", required=True)
@click.option("--delta", default="0", show_default=True)
@click.option("--accountant", type=click.Choice(["basic", "zcdp"]), default=None,
              help="The data set's admission rule (default: keep it; basic for a new one). "
                   "Cannot change once the data set has charges.")
def budget_set(ledger, database, dataset, analyst, epsilon, delta, accountant) -> None:
    """Owner command: set a data set's (or an analyst's) total budget (creates the ledger
    where no file exists)."""
    from dpsql.ledger import ALL, check_analyst

    total = (_float(epsilon, "--epsilon"), _float(delta, "--delta"))
    try:
        if analyst is not None:  # '*' is the data set's total: say it by leaving it out
            check_analyst(analyst, "--analyst")
    except DpsqlError as exc:
        _fail(exc)
    led = _ledger(ledger, database, create=True)
    try:
        led.set_budget(dataset, total, analyst if analyst is not None else ALL, accountant)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"set {escape(dataset)} {escape(analyst) if analyst else 'total'}: "
               f"epsilon={total[0]:g}, delta={total[1]:g}")


@budget.command("grant")
@_ledger_options
@click.option("--dataset", required=True, help="Data set name.")
@click.option("--analyst", default=None, help="Raise this analyst's own total instead.")
@click.option("--epsilon", required=True, help="Epsilon to add.")
@click.option("--delta", default="0", show_default=True, help="Delta to add.")
def budget_grant(ledger, database, dataset, analyst, epsilon, delta) -> None:
    """Owner command: add to a data set's (or an analyst's) total budget."""
    from dpsql.ledger import ALL, check_analyst

    extra = (_float(epsilon, "--epsilon"), _float(delta, "--delta"))
    try:
        if analyst is not None:
            check_analyst(analyst, "--analyst")
    except DpsqlError as exc:
        _fail(exc)
    led = _ledger(ledger, database)
    try:
        led.grant(dataset, extra, analyst if analyst is not None else ALL)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"granted {escape(dataset)} {escape(analyst) if analyst else 'total'}: "
               f"+epsilon={extra[0]:g}, +delta={extra[1]:g}")


@budget.command("rebind")
@click.option("--ledger", required=True, help="Ledger file or PostgreSQL URL.")
@click.option("--dataset", required=True, help="Data set name.")
@click.option("--to", "target", required=True, help="The data set's database now.")
def budget_rebind(ledger, dataset, target) -> None:
    """Owner command: the data set's database moved; bind its budget to the new one."""
    from dpsql.ledger import database_identity

    identity = database_identity(target)
    if identity is None:
        _fail(LedgerError(f"{target!r} is not a database file or server URL"))
    led = _ledger(ledger, None)
    try:
        led.bind(dataset, identity, rebind=True)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"data set {escape(dataset)} now belongs to {escape(target)}")


@budget.command("migrate")
@click.option("--from", "source", required=True, help="A version-1 ledger file.")
@click.option("--to", "target", required=True, help="The new ledger file (must not exist).")
def budget_migrate(source, target) -> None:
    """Owner command: copy a version-1 ledger (budgets and charges) into a new file."""
    from dpsql.ledger import migrate_v1

    try:
        n = migrate_v1(source, target)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"migrated {n} charges into {escape(target)}")


@main.group()
def catalog() -> None:
    """Work with catalogs."""


@catalog.command("validate")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--database", "-d", default=None,
              help="Also check the catalog against this database (a DuckDB file or a URL): "
                   "tables, columns, types, user keys. Reads the schema only.")
def catalog_validate(path, database) -> None:
    """Check a catalog file and summarise its tables (and, with -d, match a database)."""
    try:
        cat = dpsql.load_catalog(path)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"{escape(path)}: OK (dataset {cat.dataset!r})")
    for table in cat.tables.values():
        unit = ("public" if table.public else "row privacy" if table.row_privacy
                else f"user key {table.user_key}" if table.user_key
                else "user key via " + " -> ".join(f"{c} = {t}.{r}"
                                                   for c, t, r in table.user_path))
        bounded = [c.name for c in table.columns.values() if c.bounded]
        click.echo(escape(f"  {table.name}: {unit}, max_groups={table.max_groups}, "
                          f"max_rows={table.max_rows}, {len(table.columns)} columns, "
                          f"bounded: {', '.join(bounded) or 'none'}"))
    if database is not None:
        problems = check_against_database(cat, path, database)
        for problem in problems:
            click.secho(f"  {escape(problem)}", fg="red", err=True)
        if problems:
            click.secho(f"{escape(database)}: {len(problems)} problem(s)", fg="red", err=True)
            sys.exit(1)
        click.echo(f"{escape(database)}: OK (every table, column, type and user key "
                   "matches the catalog)")


def check_against_database(cat, catalog_file, database) -> list[str]:
    """What the database lacks that the catalog promises: the check every query makes
    before it is charged (:meth:`dpsql.Connection._check_schema`), for every table, and
    the PRIMARY KEY/UNIQUE keys that foreign-key paths to the user join on. Reads the
    schema only, spends nothing (an in-memory ledger unless the owner pinned one).

    Raises:
        DpsqlError: the database cannot be opened (exit status 1 through ``main``).
    """
    from dpsql.ledger import pinned_catalog, pins

    pinned = pins(dpsql.load_catalog(pinned_catalog(catalog_file))).ledger is not None
    problems = []
    with dpsql.connect(database, catalog=cat, budget=(1.0, 0.5),
                       ledger=None if pinned else ":memory:") as conn:
        backend = conn._backend
        for table in cat.tables.values():
            try:
                conn._check_schema(table, backend)
            except DpsqlError as exc:
                problems.append(str(exc))
                continue
            for _column, ref_table, ref_column in table.user_path:
                if cat.has_table(ref_table) and backend.columns(ref_table) is not None \
                        and (ref_column,) not in conn._unique(backend, ref_table):
                    problems.append(
                        f"table {ref_table!r}, column {ref_column!r}: {table.name}'s path to "
                        "the user joins on it, so it must be a PRIMARY KEY or UNIQUE NOT "
                        "NULL in the database")
    return problems


# -- catalog draft and import ------------------------------------------------------------

def _emit(path: Path | None, text: str) -> None:
    if path is None:
        click.echo(text, nl=False)
    else:
        path.write_text(text, encoding="utf-8")
        click.echo(f"wrote {path}", err=True)


@catalog.command("draft")
@click.argument("tables", nargs=-1, required=True)
@click.option("--database", "-d", required=True,
              type=click.Path(exists=True, dir_okay=False), help="DuckDB database file.")
@click.option("--user-key", default=None, help="Column that identifies a person.")
@click.option("--row-privacy", is_flag=True, help="Each row is a different person.")
@click.option("--dataset", default=None, help="Data set name (default: the database's name).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the draft here instead of to stdout.")
def catalog_draft(tables, database, user_key, row_privacy, dataset, output) -> None:
    """Catalog skeleton for TABLES from the database schema (no data read).

    Bounds are left as 'lower: null, upper: null' with a TODO: the data owner fills
    them from outside knowledge, never from the private data.
    """
    from dpsql.catalog_draft import DraftArgumentError, draft_catalog

    if user_key and row_privacy:
        raise click.UsageError("give --user-key or --row-privacy, not both")
    try:
        text = draft_catalog(database, list(tables), user_key, row_privacy, dataset)
    except DraftArgumentError as exc:  # usage errors (status 2), naming the flag
        if exc.argument == "user_key":
            raise click.BadParameter(str(exc), param_hint="--user-key") from None
        raise click.UsageError(str(exc)) from None
    _emit(output, text)


@catalog.command("import-smartnoise")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--dataset", default=None,
              help="Data set name (default: the collection's, or its single schema's).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the catalog here instead of to stdout.")
def catalog_import_smartnoise(path, dataset, output) -> None:
    """Convert SmartNoise SQL metadata YAML into a dpsql catalog."""
    from dpsql.smartnoise import import_smartnoise

    _emit(output, import_smartnoise(path, dataset))


# the service (dpsql/server): `dpsql serve` and `dpsql user`
from dpsql.server.cli import serve as _serve  # noqa: E402
from dpsql.server.cli import user as _user  # noqa: E402

main.add_command(_serve)
main.add_command(_user)


if __name__ == "__main__":  # pragma: no cover
    main()
