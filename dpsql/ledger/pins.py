"""Pins: the owner, not the connection, chooses the database, ledger, analyst and
catalog (in the catalog or in the service's environment; the environment wins).

Under a pin, a connection that names another database, ledger, analyst or catalog is
refused with a :class:`~dpsql.errors.LedgerError` before anything is opened; one that
names none gets the pinned one. A malformed pin fails closed (it never becomes no pin).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsql.errors import LedgerError
from dpsql.ledger.core import LedgerBase
from dpsql.ledger.identity import normalise_url
from dpsql.ledger.settings import ANALYST_ENV, CATALOG_ENV, DATABASE_ENV, LEDGER_ENV, LEDGER_ID_ENV
from dpsql.ledger.values import check_analyst


@dataclass(frozen=True)
class Pins:
    """What a connection was pinned to, and by whom.

    Attributes:
        ledger: the pinned ledger (absolute path or PostgreSQL URL), or None.
        analyst: the pinned analyst name, or None.
        database: the pinned database (absolute path or URL), or None.
        ledger_id: the pinned ledger's id, or None.
        ledger_source, analyst_source, database_source: where each pin came from.
    """

    ledger: str | None = None
    analyst: str | None = None
    ledger_source: str = ""
    analyst_source: str = ""
    database: str | None = None
    database_source: str = ""
    ledger_id: str | None = None


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None  # set but empty: not pinned, as shells treat it


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and "://" in value


def _env_path(name: str, urls: bool = False) -> str:
    value = _env(name)
    if urls and _is_url(value):
        if normalise_url(value) is None:
            raise LedgerError(f"{name} is not a URL dpsql reads: {value!r}")
        return value
    if value == ":memory:" or not Path(value).is_absolute():
        # fail closed: a misconfigured pin must not silently become no pin
        raise LedgerError(f"{name} must be an absolute file path"
                          f"{' or a URL' if urls else ''}, got {value!r}")
    return str(Path(value).resolve())


def _same_file(given: str | Path, pinned: str) -> bool:
    if str(given) == ":memory:":
        return False
    if _is_url(pinned) or _is_url(str(given)):
        return _is_url(pinned) and _is_url(str(given)) and \
            normalise_url(str(given)) == normalise_url(pinned)
    a, b = Path(given).resolve(), Path(pinned)
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)  # a hard link, or a case-insensitive file system
    except OSError:
        return False


def pinned_catalog(catalog: Any) -> Any:
    """The catalog a connection may use: the argument, unless the owner pinned one.

    With :data:`CATALOG_ENV` set, ``catalog`` must be None (use the pin) or a path to
    the pinned file; a dict or a :class:`~dpsql.catalog.Catalog` object is refused too,
    because a catalog states the bounds and privacy units that DP rests on.

    Raises:
        LedgerError: the argument names another catalog, or the pin is malformed.
    """
    if _env(CATALOG_ENV) is None:
        return catalog
    pin = _env_path(CATALOG_ENV)
    if catalog is None or (isinstance(catalog, str | Path) and _same_file(catalog, pin)):
        return pin
    shown = catalog if isinstance(catalog, str | Path) else type(catalog).__name__
    raise LedgerError(
        f"catalog={str(shown)!r} is refused: the data owner pinned the catalog "
        f"({CATALOG_ENV}); leave catalog unset")


def pins(catalog) -> Pins:
    """The pins in force for ``catalog``: environment first, then the catalog.

    Raises:
        LedgerError: a pin in the environment is malformed.
    """
    ledger = analyst = database = None
    ledger_source = analyst_source = database_source = ""
    if _env(LEDGER_ENV) is not None:
        ledger, ledger_source = _env_path(LEDGER_ENV, urls=True), LEDGER_ENV
    elif getattr(catalog, "ledger", None) is not None:
        ledger, ledger_source = catalog.ledger, "the catalog's 'ledger:'"
    if _env(ANALYST_ENV) is not None:
        analyst, analyst_source = _env(ANALYST_ENV), ANALYST_ENV
        check_analyst(analyst, ANALYST_ENV)
    elif getattr(catalog, "analyst", None) is not None:
        analyst, analyst_source = catalog.analyst, "the catalog's 'analyst:'"
    if _env(DATABASE_ENV) is not None:
        database, database_source = _env_path(DATABASE_ENV, urls=True), DATABASE_ENV
    elif getattr(catalog, "database", None) is not None:
        database, database_source = catalog.database, "the catalog's 'database:'"
    ledger_id = _env(LEDGER_ID_ENV) or getattr(catalog, "ledger_id", None)
    return Pins(ledger, analyst, ledger_source, analyst_source, database, database_source,
                ledger_id)


def apply_pins(pinned: Pins, ledger: Any, analyst: str | None) -> tuple[Any, str | None]:
    """The (ledger, analyst) a connection uses: the pins, or its own when unpinned.

    Under a pin, an argument naming the same ledger file (or the same analyst) is
    accepted; anything else, ``":memory:"`` included, is refused.

    Raises:
        LedgerError: ``ledger`` or ``analyst`` names something other than its pin.
    """
    if pinned.ledger is not None and ledger is not None:
        given = ledger.path if isinstance(ledger, LedgerBase) else ledger
        if not (isinstance(given, str | Path) and _same_file(given, pinned.ledger)):
            raise LedgerError(
                f"ledger={str(given)!r} is refused: the data owner pinned this "
                f"data set's ledger ({pinned.ledger_source}); leave ledger unset")
    if pinned.ledger is not None and not isinstance(ledger, LedgerBase):
        ledger = pinned.ledger
    if pinned.analyst is not None:
        if analyst and analyst != pinned.analyst:
            raise LedgerError(
                f"analyst={analyst!r} is refused: the data owner pinned the "
                f"analyst identity ({pinned.analyst_source}); leave analyst unset")
        analyst = pinned.analyst
    return ledger, analyst


def apply_database_pin(pinned: Pins, database: Any) -> Any:
    """The database a connection uses: the pin, or its own when unpinned.

    Under a pin, ``database`` must be None (use the pin), the same file (by device and
    inode: a symlink or hard link to it is the same) or the same server (normalised URL:
    backend, host, port, database name). Anything else, an open connection object
    included (its file cannot be checked), is refused before anything is opened.

    Raises:
        LedgerError: ``database`` names another database than the pin.
    """
    pin = pinned.database
    if pin is None:
        return database
    if database is None:
        return pin
    if isinstance(database, str | Path):
        given = str(database)
        if _is_url(pin) and _is_url(given) and normalise_url(given) == normalise_url(pin):
            return database
        from dpsql.backends import ledger_home

        a = ledger_home(given) if _is_url(given) else Path(given)
        b = ledger_home(pin) if _is_url(pin) else Path(pin)
        if a is not None and b is not None and str(given) != ":memory:":
            with contextlib.suppress(OSError):
                if os.path.samefile(a, b):
                    return database
    shown = database if isinstance(database, str | Path) else type(database).__name__
    raise LedgerError(
        f"database={str(shown)!r} is refused: the data owner pinned this data set's "
        f"database ({pinned.database_source}); leave it unset or name the same one")
