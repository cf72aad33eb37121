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

import sys
import tempfile
from pathlib import Path

import click
import sqlglot

import dpsql
from dpsql.cli_support import cli_spelling  # noqa: F401 - re-exported
from dpsql.cli_support import fail as _fail
from dpsql.cli_support import spinner as _status
from dpsql.errors import DpsqlError
from dpsql.mechanisms import DEFAULT_MECHANISM, MECHANISMS
from dpsql.text import escape

#: ``--mechanism``'s help, from the registry: "Noise: discrete Laplace, or Gaussian (...)."
_MECHANISM_HELP = f"Noise: {', or '.join(m.description for m in MECHANISMS.values())}."

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
        from dpsql.database_file import default_ledger_path

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
        click.option("--mechanism", type=click.Choice(list(MECHANISMS)),
                     default=DEFAULT_MECHANISM, show_default=True,
                     help=_MECHANISM_HELP),
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
@click.option("--mechanism", type=click.Choice(list(MECHANISMS)), default=DEFAULT_MECHANISM,
              show_default=True, help=_MECHANISM_HELP)
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


@main.group()
def catalog() -> None:
    """Work with catalogs."""


@catalog.command("validate")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--database", "-d", default=None,
              help="Also check the catalog against this database (a DuckDB file or a URL): "
                   "tables, columns, types, user keys (the schema), and one_per_user, "
                   "values_only and in_bounds columns (a count over their table, where "
                   "the data cannot change).")
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
        lines, broken = declared_lines(cat, database)
        for line in lines:
            click.echo(f"  {escape(line)}")
        for line in broken:
            click.secho(f"  {escape(line)}", fg="red", err=True)
        if broken:
            sys.exit(1)


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


#: Per declaration: what holds, what a false one means, what stays, and where.
_DECLARED = (
    ("one_per_user", "one value per user", "some user has two values",
     "the max_groups window", "queries grouped by them"),
    ("values_only", "only the declared values", "some row holds another value",
     "the domain filter", "queries grouped by them"),
    ("in_bounds", "every value within its bounds", "some value lies outside",
     "the clamp", "sums of them"),
)


def declared_lines(cat, database) -> tuple[list[str], list[str]]:
    """Per table with ``one_per_user``, ``values_only`` or ``in_bounds`` columns, what
    the data says of them (:func:`dpsql.one_per_user.check_declared`,
    :func:`dpsql.values_only.check_declared`, :func:`dpsql.in_bounds.check_declared`):
    the owner's view, never an analyst's; the lines that say a declaration is false come
    second."""
    from dpsql import in_bounds, one_per_user, values_only

    checks = {"one_per_user": one_per_user.check_declared,
              "values_only": values_only.check_declared,
              "in_bounds": in_bounds.check_declared}
    lines, false = [], []
    with dpsql.connect(database, catalog=cat, budget=(1.0, 0.5), ledger=":memory:") as conn:
        for option, holds, broke, kept, where in _DECLARED:
            check_declared = checks[option]
            for table in cat.tables.values():
                if not any(getattr(c, option) for c in table.columns.values()):
                    continue
                found = check_declared(conn._backend, table)
                if found is None:
                    lines.append(f"{table.name}: {option} not checked (this database can "
                                 f"change under dpsql): queries keep {kept}")
                    continue
                held = [c for c, ok in found.items() if ok]
                broken = [c for c, ok in found.items() if not ok]
                if held:
                    lines.append(f"{table.name}: {holds}, checked: {', '.join(held)}")
                if broken:
                    false.append(f"{table.name}: declared {option} but {broke}: "
                                 f"{', '.join(broken)} ({where} keep {kept})")
    return lines, false


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
from dpsql.cli_ledger import budget, cache  # noqa: E402
from dpsql.server.cli import serve as _serve  # noqa: E402
from dpsql.server.cli import user as _user  # noqa: E402

main.add_command(_serve)
main.add_command(_user)
# the data owner's ledger commands (dpsql/cli_ledger.py)
main.add_command(budget)
main.add_command(cache)


if __name__ == "__main__":  # pragma: no cover
    main()
