"""The ``dpsql`` command line.

Exit codes: 0 success; 1 a query or catalog was refused (a :class:`DpsqlError`);
2 bad command-line usage.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
import sqlglot

import dpsql
from dpsql.errors import DpsqlError

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
    ("Age decades found in the data (keys released by DP partition selection)",
     "SELECT age // 10 * 10 AS decade, COUNT(*) AS n FROM pums GROUP BY decade "
     "HAVING n > 0 ORDER BY decade",
     2.0, 1e-6),
]


def _fail(exc: DpsqlError) -> None:
    click.secho(f"error ({type(exc).__name__}): {exc}", fg="red", err=True)
    sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(dpsql.__version__, prog_name="dpsql")
def main() -> None:
    """dpsql: differentially private answers to aggregate SQL."""


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
        load_pums(path)
        budget = (10.0, 1e-5)
        click.echo(f"Connecting with a privacy budget of epsilon={budget[0]:g}, "
                   f"delta={budget[1]:g}.\n")
        try:
            with dpsql.connect(path, catalog=pums_catalog(), budget=budget) as conn:
                first = None
                for title, sql, eps, delta in DEMO_QUERIES:
                    click.secho(title, bold=True)
                    click.echo(f"  {sql}")
                    click.echo(f"  epsilon={eps:g}, delta={delta:g}\n")
                    res = conn.execute(sql, epsilon=eps, delta=delta)
                    first = first or res
                    click.echo(str(res) + "\n")
                spent, left = conn.budget.spent, conn.budget.remaining
                click.secho("Budget", bold=True)
                click.echo(f"  spent     epsilon={spent[0]:g}, delta={spent[1]:g}")
                click.echo(f"  remaining epsilon={left[0]:g}, delta={left[1]:g}\n")
                click.secho("Rewritten SQL of the first query (what DuckDB ran)", bold=True)
                click.echo(sqlglot.transpile(first.sql, read="duckdb", pretty=True)[0])
        except DpsqlError as exc:
            _fail(exc)


@main.command()
@click.argument("sql")
@click.option("--database", "-d", required=True, help="DuckDB database file.")
@click.option("--catalog", "-c", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Catalog YAML file.")
@click.option("--epsilon", "-e", type=float, required=True, help="The query's epsilon.")
@click.option("--delta", type=float, default=0.0, show_default=True, help="The query's delta.")
@click.option("--max-groups", type=int, default=None, help="Override the table's max_groups.")
@click.option("--max-rows", type=int, default=None, help="Override the table's max_rows.")
def explain(sql, database, catalog, epsilon, delta, max_groups, max_rows) -> None:
    """Show the rewritten SQL, sensitivities, noise and predicted error; spends nothing."""
    try:
        with dpsql.connect(database, catalog=catalog, budget=(max(epsilon, 1e-9), 0.5),
                           ledger=":memory:") as conn:
            click.echo(str(conn.explain(sql, epsilon=epsilon, delta=delta,
                                        max_groups=max_groups, max_rows=max_rows)))
    except DpsqlError as exc:
        _fail(exc)


def _format_result(res, fmt: str) -> str:
    if fmt == "csv":
        return res.df.to_csv(index=False).rstrip("\n")
    if fmt == "json":
        import json

        return json.dumps({
            "columns": res.columns,
            "rows": [list(r) for r in res.rows],
            "accuracy": [list(a) for a in res.accuracy],
            "confidence": 1 - res.alpha,
            "cost": {"epsilon": res.cost[0], "delta": res.cost[1]},
        }, default=str)
    return str(res)


@main.command()
@click.argument("sql")
@click.option("--database", "-d", required=True, help="DuckDB database file.")
@click.option("--catalog", "-c", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Catalog YAML file.")
@click.option("--epsilon", "-e", type=float, required=True, help="The query's epsilon.")
@click.option("--delta", type=float, default=0.0, show_default=True, help="The query's delta.")
@click.option("--max-groups", type=int, default=None, help="Override the table's max_groups.")
@click.option("--max-rows", type=int, default=None, help="Override the table's max_rows.")
@click.option("--ledger", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: beside the database, <database>.ledger.sqlite).")
@click.option("--analyst", default=None, help="Analyst name (default: the OS user).")
@click.option("--budget", nargs=2, type=float, default=None, metavar="EPSILON DELTA",
              help="Cap for this call; seeds the data set's total if the owner set none.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="Output format.")
def query(sql, database, catalog, epsilon, delta, max_groups, max_rows, ledger, analyst,
          budget, fmt) -> None:
    """Answer one aggregate query privately and charge the ledger."""
    try:
        with dpsql.connect(database, catalog=catalog, budget=budget, ledger=ledger,
                           analyst=analyst) as conn:
            res = conn.execute(sql, epsilon=epsilon, delta=delta, max_groups=max_groups,
                               max_rows=max_rows)
            click.echo(_format_result(res, fmt))
            if fmt == "table":
                left = conn.budget.remaining
                click.echo(f"remaining budget: epsilon={left[0]:g}, delta={left[1]:g}",
                           err=True)
    except DpsqlError as exc:
        _fail(exc)


def _ledger(ledger, database):
    from dpsql.engine import default_ledger_path
    from dpsql.ledger import Ledger

    if ledger is None and database is None:
        raise click.UsageError("give --ledger PATH or --database PATH")
    path = Path(ledger) if ledger else default_ledger_path(database)
    if not path.exists():
        raise click.UsageError(f"no ledger at {path}")
    return Ledger(path)


_LEDGER_OPTIONS = [
    click.option("--ledger", type=click.Path(dir_okay=False), default=None,
                 help="Ledger file."),
    click.option("--database", "-d", default=None,
                 help="Database whose default ledger (<database>.ledger.sqlite) to use."),
]


def _ledger_options(fn):
    for option in reversed(_LEDGER_OPTIONS):
        fn = option(fn)
    return fn


@main.group()
def budget() -> None:
    """Show and manage privacy budgets in a ledger.

    Whoever can write the ledger file can change budgets: its file permissions are the
    data owner's control.
    """


@budget.command("show")
@_ledger_options
@click.option("--dataset", default=None, help="Only this data set.")
def budget_show(ledger, database, dataset) -> None:
    """Totals, spending and what remains, per data set and analyst."""
    from dpsql.accounting import Accounting
    from dpsql.ledger import ALL

    try:
        led = _ledger(ledger, database)
    except DpsqlError as exc:
        _fail(exc)
    rows = led.budgets(dataset)
    if not rows:
        click.echo("no budgets set")
        return
    datasets = sorted({r[0] for r in rows})
    analysts_by_ds = {}
    for entry in led.log(None, limit=10**9):
        analysts_by_ds.setdefault(entry["dataset"], set()).add(entry["analyst"])
    for ds in datasets:
        totals = {a: (e, d, src) for d_, a, e, d, src in rows if d_ == ds}
        click.secho(f"data set {ds}", bold=True)
        names = [ALL] + sorted((set(totals) | analysts_by_ds.get(ds, set())) - {ALL})
        for name in names:
            s = led.spent(ds, None if name == ALL else name)
            who = "all analysts" if name == ALL else f"analyst {name}"
            line = f"  {who:<24} spent epsilon={s.basic[0]:g}, delta={s.basic[1]:g}"
            if name in totals:
                e, d, src = totals[name]
                left = Accounting((e, d)).remaining(s)
                line += (f"; total epsilon={e:g}, delta={d:g} ({src}); remaining "
                         f"epsilon={left[0]:g}, delta={left[1]:g}")
                if d > 0 and s.rho > 0:
                    line += f"; zCDP bound epsilon={s.zcdp_epsilon(d):.4g}"
            click.echo(line)


@budget.command("log")
@_ledger_options
@click.option("--dataset", default=None, help="Only this data set.")
@click.option("--limit", type=int, default=50, show_default=True, help="Newest N entries.")
def budget_log(ledger, database, dataset, limit) -> None:
    """The audit log: every query with its time, analyst, cost and outcome."""
    led = _ledger(ledger, database)
    for e in led.log(dataset, limit):
        detail = f"  [{e['detail']}]" if e["detail"] else ""
        click.echo(f"{e['time']}  {e['dataset']}  {e['analyst']}  {e['outcome']:<8}  "
                   f"epsilon={e['epsilon']:g} delta={e['delta']:g}  {e['sql']}{detail}")


@budget.command("set")
@_ledger_options
@click.option("--dataset", required=True, help="Data set name (the catalog's 'dataset').")
@click.option("--analyst", default=None, help="Set this analyst's own total instead.")
@click.option("--epsilon", type=float, required=True)
@click.option("--delta", type=float, default=0.0, show_default=True)
def budget_set(ledger, database, dataset, analyst, epsilon, delta) -> None:
    """Owner command: set a data set's (or an analyst's) total budget."""
    from dpsql.engine import default_ledger_path
    from dpsql.ledger import ALL, Ledger

    try:
        if ledger is None and database is None:
            raise click.UsageError("give --ledger PATH or --database PATH")
        led = Ledger(ledger or default_ledger_path(database))
        led.set_budget(dataset, (epsilon, delta), analyst or ALL)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"set {dataset} {analyst or 'total'}: epsilon={epsilon:g}, delta={delta:g}")


@budget.command("grant")
@_ledger_options
@click.option("--dataset", required=True, help="Data set name.")
@click.option("--analyst", default=None, help="Raise this analyst's own total instead.")
@click.option("--epsilon", type=float, required=True, help="Epsilon to add.")
@click.option("--delta", type=float, default=0.0, show_default=True, help="Delta to add.")
def budget_grant(ledger, database, dataset, analyst, epsilon, delta) -> None:
    """Owner command: add to a data set's (or an analyst's) total budget."""
    from dpsql.ledger import ALL

    try:
        _ledger(ledger, database).grant(dataset, (epsilon, delta), analyst or ALL)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"granted {dataset} {analyst or 'total'}: +epsilon={epsilon:g}, "
               f"+delta={delta:g}")


@main.group()
def catalog() -> None:
    """Work with catalogs."""


@catalog.command("validate")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
def catalog_validate(path) -> None:
    """Check a catalog file and summarise its tables."""
    try:
        cat = dpsql.load_catalog(path)
    except DpsqlError as exc:
        _fail(exc)
    click.echo(f"{path}: OK (dataset {cat.dataset!r})")
    for table in cat.tables.values():
        unit = ("public" if table.public else "row privacy" if table.row_privacy
                else f"user key {table.user_key}")
        bounded = [c.name for c in table.columns.values() if c.bounded]
        click.echo(f"  {table.name}: {unit}, max_groups={table.max_groups}, "
                   f"max_rows={table.max_rows}, {len(table.columns)} columns, "
                   f"bounded: {', '.join(bounded) or 'none'}")


if __name__ == "__main__":  # pragma: no cover
    main()
