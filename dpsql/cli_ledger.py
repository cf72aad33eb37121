"""The data owner's ledger commands: ``dpsql budget ...`` and ``dpsql cache clear``."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from dpsql.cli_support import fail as _fail
from dpsql.errors import DpsqlError, LedgerError
from dpsql.text import escape


def _ledger_path(ledger, database) -> str:
    """--ledger, else --database's default ledger, else the service's DPSQL_LEDGER pin."""
    import os

    from dpsql.database_file import default_ledger_path
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


@click.group()
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


@click.group()
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
