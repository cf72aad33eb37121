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
        if path.exists():
            path.unlink()
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
        with dpsql.connect(database, catalog=catalog, budget=(max(epsilon, 1e-9), 0.5)) as conn:
            click.echo(str(conn.explain(sql, epsilon=epsilon, delta=delta,
                                        max_groups=max_groups, max_rows=max_rows)))
    except DpsqlError as exc:
        _fail(exc)


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
