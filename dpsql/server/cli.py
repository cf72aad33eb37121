"""``dpsql serve`` and ``dpsql user``: the owner's commands for the service.

Passwords are read from the terminal (twice) or, for scripts, from the environment
variable named by ``--password-env``; never from the command line, where ``ps`` and
shell history would keep them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from dpsql.errors import DpsqlError
from dpsql.server import ServerError
from dpsql.server.config import ServerConfig, load_config, open_ledger
from dpsql.text import escape


def _budget(value: str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        eps, _, delta = value.partition(",")
        return float(eps), float(delta or 0.0)
    except ValueError:
        raise click.BadParameter(f"expected EPS,DELTA (e.g. 1,1e-6), got {value!r}") \
            from None


def _password(env: str | None, prompt: str = "Password") -> str:
    if env:
        value = os.environ.get(env)
        if not value:
            raise click.UsageError(f"environment variable {env} is empty or unset")
        return value
    return click.prompt(prompt, hide_input=True, confirmation_prompt=True)


def _config_option(fn):
    return click.option("--config", "config_path", required=True,
                        type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help="The service's YAML config (see docs/server.md).")(fn)


def check(config: ServerConfig) -> list[str]:
    """What ``serve --check`` reports: problems that would stop or weaken the service.

    Opens the catalog, the ledger, the login store, the TLS files and the database
    (through dpsql.connect, as a session does), reading no data.
    """
    import ssl

    from dpsql import connect
    from dpsql.catalog import load_catalog
    from dpsql.server.auth import VerifierStore

    problems: list[str] = []
    try:
        catalog = load_catalog(str(config.catalog))
    except DpsqlError as exc:
        return [f"catalog: {exc}"]
    if getattr(catalog, "analyst", None):
        problems.append("catalog: 'analyst:' pins one analyst for in-process use; the "
                        "service's analysts are its logins: remove it")
    for var in ("DPSQL_ANALYST", "DPSQL_LEDGER", "DPSQL_CATALOG"):
        if os.environ.get(var):
            problems.append(f"environment: {var} is set; the service's config pins "
                            "instead: unset it")
    if config.tls and config.cert is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(config.cert),
                                                                     str(config.key))
        except (OSError, ssl.SSLError) as exc:
            problems.append(f"tls: cannot load certificate/key: {exc}")
    try:
        ledger = open_ledger(config, catalog)  # never created by the service
    except DpsqlError as exc:
        return [*problems, str(exc)]
    try:
        if config.budget is None and catalog.budget is None and not any(
                a == "*" for _, a, *_ in ledger.budgets(catalog.dataset)):
            problems.append(f"budget: no total for data set {catalog.dataset!r}: set "
                            "'budget:' in the config or the catalog")
        try:
            store = VerifierStore(config.logins)
            if not store.list():
                problems.append("logins: none yet; add one with dpsql user add")
            store.close()
        except DpsqlError as exc:
            problems.append(f"logins: {exc}")
        if not problems or all(not p.startswith(("budget", "catalog")) for p in problems):
            try:
                budget = config.budget
                conn = connect(config.database, catalog=str(config.catalog), ledger=ledger,
                               analyst="dpsql-serve-check", budget=budget)
                conn.close()
            except DpsqlError as exc:
                problems.append(f"database: {exc}")
    finally:
        ledger.close()
    return problems


@click.command()
@_config_option
@click.option("--check", "check_only", is_flag=True,
              help="Check the config, catalog, ledger, logins, TLS files and database; "
                   "do not serve.")
@click.option("--self-signed", is_flag=True,
              help="Make a self-signed certificate for a local trial (clients with "
                   "sslmode=require accept it; verify-full ones do not).")
@click.option("--host", default=None, help="Override listen.host.")
@click.option("--port", default=None, type=int, help="Override listen.port.")
def serve(config_path: Path, check_only: bool, self_signed: bool, host, port) -> None:
    """Serve the config's data set over the PostgreSQL wire protocol (SCRAM over TLS;
    each login is an analyst with its own budget)."""
    import dataclasses
    import logging

    from dpsql.server.auth import self_signed as make_cert
    from dpsql.server.server import run

    config = load_config(config_path, self_signed=self_signed)
    if host is not None or port is not None:
        config = dataclasses.replace(config, host=host or config.host,
                                     port=config.port if port is None else port)
    if check_only:
        problems = check(config)
        for p in problems:
            click.secho(f"problem: {escape(p)}", fg="red", err=True)
        if problems:
            sys.exit(1)
        click.echo(f"ok: {config_path} (database, catalog, ledger, logins, TLS)")
        return
    if self_signed and config.cert is None:
        tmp = Path(tempfile.mkdtemp(prefix="dpsql-serve-"))
        cert, key = tmp / "server.crt", tmp / "server.key"
        make_cert(cert, key)
        config = config.with_tls(cert, key)
        click.echo(f"self-signed certificate for a local trial: {cert}", err=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    def ready(address) -> None:
        click.echo(f"dpsql serve: listening on {address[0]}:{address[1]} "
                   f"(TLS {'on' if config.tls else 'off'}); Ctrl-C stops", err=True)

    run(config, ready)


@click.group()
def user() -> None:
    """Logins of the service: each is an analyst with its own budget in the ledger."""


@user.command("add")
@click.argument("name")
@_config_option
@click.option("--budget", "budget", required=True,
              help="The login's own budget EPS,DELTA (the data set's total still caps "
                   "the sum over all logins).")
@click.option("--password-env", default=None,
              help="Read the password from this environment variable (for scripts).")
def user_add(name: str, config_path: Path, budget: str, password_env: str | None) -> None:
    """Add a login NAME with its per-analyst budget (the ledger must exist: dpsql
    budget init)."""
    from dpsql.catalog import load_catalog
    from dpsql.server.auth import VerifierStore, check_login_name

    config = load_config(config_path, self_signed=True)
    total = _budget(budget)
    check_login_name(name)
    catalog = load_catalog(str(config.catalog))
    ledger = open_ledger(config, catalog)  # before any prompt: never created here
    ledger.close()
    store = VerifierStore(config.logins)
    try:
        if store.exists(name):
            raise ServerError(f"login {name!r} exists; use 'dpsql user passwd'")
        password = _password(password_env)
        ledger = open_ledger(config, catalog)
        try:
            dataset = catalog.dataset
            before = {a: (e, d) for _, a, e, d, _ in ledger.budgets(dataset)}
            ledger.ensure_budget(dataset, total, name, "dpsql user add")
            store.add(name, password)
            if name in before and before[name] != total:
                click.echo(f"note: {name!r} already had a budget in the ledger, kept: "
                           f"epsilon={before[name][0]:g}, delta={before[name][1]:g} "
                           "(change it with dpsql budget set)", err=True)
        finally:
            ledger.close()
    finally:
        store.close()
    click.echo(f"added login {name!r}")


@user.command("passwd")
@click.argument("name")
@_config_option
@click.option("--password-env", default=None)
def user_passwd(name: str, config_path: Path, password_env: str | None) -> None:
    """Set a new password for login NAME."""
    from dpsql.server.auth import VerifierStore

    config = load_config(config_path, self_signed=True)
    store = VerifierStore(config.logins)
    try:
        if not store.exists(name):
            raise ServerError(f"no login {name!r}")
        store.set_password(name, _password(password_env, "New password"))
    finally:
        store.close()
    click.echo(f"password of {name!r} changed")


@user.command("remove")
@click.argument("name")
@_config_option
def user_remove(name: str, config_path: Path) -> None:
    """Remove login NAME (its spending stays in the ledger; adding it again does not
    reset it)."""
    from dpsql.server.auth import VerifierStore

    config = load_config(config_path, self_signed=True)
    store = VerifierStore(config.logins)
    try:
        store.remove(name)
    finally:
        store.close()
    click.echo(f"removed login {name!r}")


@user.command("list")
@_config_option
def user_list(config_path: Path) -> None:
    """List logins with their budgets (spent / total)."""
    from dpsql.catalog import load_catalog
    from dpsql.server.auth import VerifierStore

    config = load_config(config_path, self_signed=True)
    catalog = load_catalog(str(config.catalog))
    ledger = open_ledger(config, catalog)
    store = VerifierStore(config.logins)
    try:
        dataset = catalog.dataset
        for name, _iterations, created, _ in store.list():
            view = ledger.view(dataset, name)
            (se, sd), (te, td) = view.spent, view.total
            click.echo(f"{escape(name)}\tspent epsilon={se:g}, delta={sd:g}\t"
                       f"budget epsilon={te:g}, delta={td:g}\tsince {created}")
    finally:
        store.close()
        ledger.close()
