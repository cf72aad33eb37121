"""The persistent, atomic privacy-budget ledger (SQLite, standard library).

One ledger file holds, per data set, the owner's total budget and optional per-analyst
budgets, every charge, and an audit log of every query. The rules:

* **Charge before release.** ``charge`` checks that the query fits and records it in
  one ``BEGIN IMMEDIATE`` transaction, before the backend reads any data. SQLite's
  write lock serialises every writer across threads and processes, so two queries can
  never both spend the last of a budget.
* **Failures keep their charge.** A query that fails after its charge is logged as
  ``failed``, one cancelled while it ran (Ctrl-C) as ``cancelled``; the charge stays (a
  data-dependent failure is information, and so is how far a query got).
* **Refusals charge nothing.** A query refused before reading data is logged as
  ``refused`` with cost 0.
* **Crash safety.** WAL journaling with ``synchronous=FULL``: a committed charge
  survives a killed process, and a killed process never leaves a half-written one.

Whoever can write the ledger file can change budgets: the file's permissions are the
data owner's control. Analysts' processes need write access to record charges, so
deploy dpsql behind a service account when analysts must not edit the file directly.

**Pins.** A connection names its ledger and analyst (``connect(..., ledger=...,
analyst=...)``, or a SQLAlchemy URL's ``?ledger=...&analyst=...``); a fresh ledger is a
fresh budget. When analysts can choose those arguments, the owner pins them, either in
the catalog (``ledger: PATH``, relative to the catalog file, and ``analyst: NAME``) or
in the environment the service process starts with (:data:`LEDGER_ENV`,
:data:`ANALYST_ENV`, and :data:`CATALOG_ENV`, which pins the catalog itself). The
environment wins over the catalog. Under a pin, a connection that names another ledger
(``":memory:"`` included), another analyst or another catalog is refused with a
:class:`~dpsql.errors.LedgerError` before anything is opened; one that names none gets
the pinned one; and a connection's ``budget=`` is only a cap, never the data set's
total (only the owner sets that: the catalog's ``budget:`` or ``dpsql budget set``).

>>> led = Ledger(":memory:")
>>> led.ensure_budget("pums", (1.0, 1e-6))
>>> led.charge("pums", "alice", Cost(0.25), "SELECT COUNT(*) FROM pums")
1
>>> led.view("pums", "alice").spent
(0.25, 0.0)
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpsql.accounting import Accounting, Cost, Spent, spent
from dpsql.errors import BudgetExhaustedError, LedgerError, PrivacyParameterError
from dpsql.text import is_plain

FORMAT = "dpsql-ledger"
VERSION = "1"
ALL = "*"  # analyst key of a data set's total budget

#: Environment variable of the service process: the only ledger file (absolute path).
LEDGER_ENV = "DPSQL_LEDGER"
#: Environment variable of the service process: the only analyst identity.
ANALYST_ENV = "DPSQL_ANALYST"
#: Environment variable of the service process: the only catalog file (absolute path).
CATALOG_ENV = "DPSQL_CATALOG"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS budgets (
    dataset TEXT NOT NULL, analyst TEXT NOT NULL,
    epsilon REAL NOT NULL, delta REAL NOT NULL, source TEXT NOT NULL, updated TEXT NOT NULL,
    PRIMARY KEY (dataset, analyst));
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY, time TEXT NOT NULL, dataset TEXT NOT NULL,
    analyst TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL,
    rho REAL NOT NULL, rho_delta REAL NOT NULL, sql TEXT NOT NULL,
    outcome TEXT NOT NULL, detail TEXT);
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY, time TEXT NOT NULL, dataset TEXT NOT NULL,
    analyst TEXT NOT NULL, sql TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS charges_by_dataset ON charges (dataset, analyst);
"""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Ledger:
    """A ledger file (or ``":memory:"``, only when asked for explicitly)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.Lock()
        if self.path != ":memory:":
            p = Path(self.path)
            if p.is_dir():
                raise LedgerError(f"ledger path {self.path!r} is a directory")
            if not p.parent.exists():
                raise LedgerError(f"ledger directory {str(p.parent)!r} does not exist")
        try:
            self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA busy_timeout = 60000")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._init()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(
                f"{self.path!r} is not a usable dpsql ledger ({exc}); refusing to start a "
                "fresh budget over it"
            ) from None

    def _init(self) -> None:
        check = self._db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise LedgerError(f"ledger {self.path!r} is corrupted ({check})")
        with self._tx():
            tables = {r[0] for r in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "meta" not in tables:
                raise LedgerError(f"{self.path!r} is an SQLite file but not a dpsql ledger")
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    self._db.execute(statement)
            meta = dict(self._db.execute("SELECT key, value FROM meta"))
            if not meta:
                self._db.execute("INSERT INTO meta VALUES ('format', ?), ('version', ?)",
                                 (FORMAT, VERSION))
            elif meta.get("format") != FORMAT:
                raise LedgerError(f"{self.path!r} is not a dpsql ledger")
            elif meta.get("version") != VERSION:
                raise LedgerError(
                    f"ledger {self.path!r} has format version {meta.get('version')}; "
                    f"this dpsql reads version {VERSION}"
                )

    class _Tx:
        def __init__(self, ledger: Ledger):
            self.ledger = ledger

        # A KeyboardInterrupt can land between any two steps here (the analyst's Ctrl-C
        # in the shell). A transaction left open would keep the ledger file locked for
        # every process and make every later BEGIN fail: each exit path rolls back what
        # is still open, and a transaction an interrupt left open anyway is rolled back
        # before the next one begins. An uncommitted charge is lost only when no data
        # was read for it.

        def __enter__(self):
            self.ledger._lock.acquire()
            try:
                db = self.ledger._db
                if db.in_transaction:
                    db.execute("ROLLBACK")
                db.execute("BEGIN IMMEDIATE")
            except BaseException:
                self._close(commit=False)
                raise
            return db

        def __exit__(self, exc_type, exc, tb):
            self._close(commit=exc_type is None)

        def _close(self, commit: bool) -> None:
            db = self.ledger._db
            try:
                if db.in_transaction:
                    db.execute("COMMIT" if commit else "ROLLBACK")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                self.ledger._lock.release()

    def _tx(self) -> Ledger._Tx:
        return Ledger._Tx(self)

    # -- budgets ----------------------------------------------------------------------

    def ensure_budget(self, dataset: str, total: tuple[float, float],
                      analyst: str = ALL, source: str = "catalog") -> None:
        """Records a budget unless one is already set (the owner's, or an earlier seed)."""
        _check_pair(total)
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO budgets VALUES (?, ?, ?, ?, ?, ?)",
                       (dataset, analyst, total[0], total[1], source, _now()))

    def set_budget(self, dataset: str, total: tuple[float, float], analyst: str = ALL) -> None:
        """Owner command: sets a total (data set when analyst is ``*``) outright."""
        _check_pair(total)
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?, 'owner', ?)",
                       (dataset, analyst, total[0], total[1], _now()))

    def grant(self, dataset: str, extra: tuple[float, float], analyst: str = ALL) -> None:
        """Owner command: raises a total by ``extra``."""
        with self._tx() as db:
            row = db.execute("SELECT epsilon, delta FROM budgets WHERE dataset = ? AND "
                             "analyst = ?", (dataset, analyst)).fetchone()
            if row is None:
                raise LedgerError(f"no budget set for data set {dataset!r}, analyst "
                                  f"{analyst!r}; use set first")
            total = (row[0] + extra[0], row[1] + extra[1])
            _check_pair(total)
            db.execute("UPDATE budgets SET epsilon = ?, delta = ?, source = 'owner', "
                       "updated = ? WHERE dataset = ? AND analyst = ?",
                       (*total, _now(), dataset, analyst))

    def budgets(self, dataset: str | None = None) -> list[tuple]:
        query = "SELECT dataset, analyst, epsilon, delta, source FROM budgets"
        args: tuple = ()
        if dataset is not None:
            query += " WHERE dataset = ?"
            args = (dataset,)
        with self._lock:
            return self._db.execute(query + " ORDER BY dataset, analyst", args).fetchall()

    def _total(self, db, dataset: str, analyst: str) -> tuple[float, float] | None:
        row = db.execute("SELECT epsilon, delta FROM budgets WHERE dataset = ? AND "
                         "analyst = ?", (dataset, analyst)).fetchone()
        return None if row is None else (row[0], row[1])

    def _costs(self, db, dataset: str, analyst: str | None) -> list[Cost]:
        query = "SELECT epsilon, delta, rho, rho_delta FROM charges WHERE dataset = ?"
        args: tuple = (dataset,)
        if analyst is not None:
            query += " AND analyst = ?"
            args += (analyst,)
        return [Cost(*row) for row in db.execute(query, args)]

    # -- charging ---------------------------------------------------------------------

    def charge(self, dataset: str, analyst: str, cost: Cost, sql: str,
               cap: tuple[tuple[float, float], list[Cost]] | None = None) -> int:
        """Checks and records ``cost`` atomically; returns the charge's id.

        Args:
            cap: an extra (total, charges so far) limit, e.g. a connection's own budget.

        Raises:
            BudgetExhaustedError: the cost does not fit (nothing charged; the refusal
                is logged).
        """
        with self._tx() as db:
            reason = None
            dataset_total = self._total(db, dataset, ALL)
            if dataset_total is None:
                reason = f"no budget is set for data set {dataset!r}"
            else:
                checks = [("data set", dataset_total, self._costs(db, dataset, None))]
                analyst_total = self._total(db, dataset, analyst)
                if analyst_total is not None:
                    checks.append((f"analyst {analyst!r}", analyst_total,
                                   self._costs(db, dataset, analyst)))
                if cap is not None:
                    checks.append(("connection", cap[0], cap[1]))
                for name, total, costs in checks:
                    if not Accounting(total).admits([*costs, cost]):
                        left = Accounting(total).remaining(spent(costs))
                        reason = (
                            f"query needs epsilon={cost.epsilon:g}, delta={cost.delta:g} "
                            f"but the {name} budget has only epsilon={left[0]:g}, "
                            f"delta={left[1]:g} left (total epsilon={total[0]:g}, "
                            f"delta={total[1]:g})"
                        )
                        break
            if reason is not None:
                db.execute("INSERT INTO refusals VALUES (NULL, ?, ?, ?, ?, ?)",
                           (_now(), dataset, analyst, _storable(sql),
                            "BudgetExhaustedError: " + reason))
                refusal = BudgetExhaustedError(reason)
            else:
                rho, rho_delta = cost.zcdp
                cur = db.execute(
                    "INSERT INTO charges VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, 'charged', NULL)",
                    (_now(), dataset, analyst, cost.epsilon, cost.delta, rho, rho_delta,
                     _storable(sql)))
                if cap is not None:
                    cap[1].append(cost)
                return cur.lastrowid
        raise refusal

    def finish(self, charge_id: int, outcome: str, detail: str | None = None) -> None:
        """Marks a charged query ``answered``, ``failed`` or ``cancelled`` (Ctrl-C); the
        charge itself stays."""
        assert outcome in ("answered", "failed", "cancelled")
        with self._tx() as db:
            db.execute("UPDATE charges SET outcome = ?, detail = ? WHERE id = ?",
                       (outcome, None if detail is None else _storable(detail), charge_id))

    def refuse(self, dataset: str, analyst: str, sql: str, detail: str) -> None:
        """Logs a query refused before any data was read (it costs nothing)."""
        with self._tx() as db:
            db.execute("INSERT INTO refusals VALUES (NULL, ?, ?, ?, ?, ?)",
                       (_now(), dataset, analyst,
                        _storable(sql if isinstance(sql, str) else repr(sql)),
                        _storable(detail)))

    # -- reading ----------------------------------------------------------------------

    def spent(self, dataset: str, analyst: str | None = None) -> Spent:
        with self._lock:
            return spent(self._costs(self._db, dataset, analyst))

    def view(self, dataset: str, analyst: str, cap=None) -> BudgetView:
        return BudgetView(self, dataset, analyst, cap)

    def log(self, dataset: str | None = None, limit: int = 100) -> list[dict]:
        """The audit log, newest first: answered, failed, charged and refused queries."""
        where, args = ("WHERE dataset = ?", (dataset,)) if dataset else ("", ())
        query = (
            "SELECT time, dataset, analyst, sql, epsilon, delta, outcome, detail FROM ("
            "SELECT time, dataset, analyst, sql, epsilon, delta, outcome, detail FROM charges "
            "UNION ALL SELECT time, dataset, analyst, sql, 0, 0, 'refused', detail "
            f"FROM refusals) {where} ORDER BY time DESC LIMIT ?"
        )
        keys = ("time", "dataset", "analyst", "sql", "epsilon", "delta", "outcome", "detail")
        with self._lock:
            return [dict(zip(keys, r, strict=True))
                    for r in self._db.execute(query, (*args, limit))]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class BudgetView:
    """One analyst's budget on one data set: ``spent``, ``remaining``, ``total``.

    ``spent`` is by basic composition (Σε, Σδ); ``remaining`` is the least of what the
    data set's total, the analyst's own total and the connection's cap leave. The
    ledger may still admit more through the zCDP bound; ``zcdp`` reports it.
    """

    def __init__(self, ledger: Ledger, dataset: str, analyst: str, cap=None):
        self.ledger, self.dataset, self.analyst = ledger, dataset, analyst
        self._cap = cap  # (total, list of this connection's costs) or None

    def _limits(self) -> list[tuple[tuple[float, float], Spent]]:
        out = []
        rows = {a: (e, d) for _, a, e, d, _ in self.ledger.budgets(self.dataset)}
        if ALL in rows:
            out.append((rows[ALL], self.ledger.spent(self.dataset)))
        if self.analyst in rows and self.analyst != ALL:
            out.append((rows[self.analyst], self.ledger.spent(self.dataset, self.analyst)))
        if self._cap is not None:
            out.append((self._cap[0], spent(self._cap[1])))
        return out

    @property
    def total(self) -> tuple[float, float]:
        limits = self._limits()
        return (min(t[0] for t, _ in limits), min(t[1] for t, _ in limits))

    @property
    def spent(self) -> tuple[float, float]:
        """What this analyst has spent on the data set (all connections, all time)."""
        return self.ledger.spent(self.dataset, self.analyst).basic

    @property
    def remaining(self) -> tuple[float, float]:
        left = [Accounting(t).remaining(s) for t, s in self._limits()]
        return (min(x[0] for x in left), min(x[1] for x in left))

    @property
    def zcdp(self) -> dict:
        """The analyst's spend as zCDP: ρ, the δ it does not cover, and ε at the total δ."""
        s = self.ledger.spent(self.dataset, self.analyst)
        return {"rho": s.rho, "delta": s.rho_delta,
                "epsilon": s.zcdp_epsilon(self.total[1])}

    def __repr__(self) -> str:
        (se, sd), (re_, rd) = self.spent, self.remaining
        return (f"Budget(dataset={self.dataset!r}, analyst={self.analyst!r}, "
                f"spent=({se:g}, {sd:g}), remaining=({re_:g}, {rd:g}))")


# -- pins: the owner, not the connection, chooses the ledger and the analyst ------------


@dataclass(frozen=True)
class Pins:
    """What a connection was pinned to, and by whom.

    Attributes:
        ledger: the pinned ledger file (absolute path), or None.
        analyst: the pinned analyst name, or None.
        ledger_source, analyst_source: where each pin came from (for messages).
    """

    ledger: str | None = None
    analyst: str | None = None
    ledger_source: str = ""
    analyst_source: str = ""


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None  # set but empty: not pinned, as shells treat it


def _env_path(name: str) -> str:
    value = _env(name)
    if value == ":memory:" or not Path(value).is_absolute():
        # fail closed: a misconfigured pin must not silently become no pin
        raise LedgerError(f"{name} must be an absolute file path, got {value!r}")
    return str(Path(value).resolve())


def _same_file(given: str | Path, pinned: str) -> bool:
    if str(given) == ":memory:":
        return False
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
    """The ledger and analyst pins in force for ``catalog``: environment, then catalog.

    Raises:
        LedgerError: a pin in the environment is malformed.
    """
    ledger = analyst = None
    ledger_source = analyst_source = ""
    if _env(LEDGER_ENV) is not None:
        ledger, ledger_source = _env_path(LEDGER_ENV), LEDGER_ENV
    elif getattr(catalog, "ledger", None) is not None:
        ledger, ledger_source = catalog.ledger, "the catalog's 'ledger:'"
    if _env(ANALYST_ENV) is not None:
        analyst, analyst_source = _env(ANALYST_ENV), ANALYST_ENV
        check_analyst(analyst, ANALYST_ENV)
    elif getattr(catalog, "analyst", None) is not None:
        analyst, analyst_source = catalog.analyst, "the catalog's 'analyst:'"
    return Pins(ledger, analyst, ledger_source, analyst_source)


def apply_pins(pinned: Pins, ledger: Any, analyst: str | None) -> tuple[Any, str | None]:
    """The (ledger, analyst) a connection uses: the pins, or its own when unpinned.

    Under a pin, an argument naming the same ledger file (or the same analyst) is
    accepted; anything else, ``":memory:"`` included, is refused.

    Raises:
        LedgerError: ``ledger`` or ``analyst`` names something other than its pin.
    """
    if pinned.ledger is not None and ledger is not None:
        given = ledger.path if isinstance(ledger, Ledger) else ledger
        if not (isinstance(given, str | Path) and _same_file(given, pinned.ledger)):
            raise LedgerError(
                f"ledger={str(given)!r} is refused: the data owner pinned this "
                f"data set's ledger ({pinned.ledger_source}); leave ledger unset")
    if pinned.ledger is not None and not isinstance(ledger, Ledger):
        ledger = pinned.ledger
    if pinned.analyst is not None:
        if analyst and analyst != pinned.analyst:
            raise LedgerError(
                f"analyst={analyst!r} is refused: the data owner pinned the "
                f"analyst identity ({pinned.analyst_source}); leave analyst unset")
        analyst = pinned.analyst
    return ledger, analyst


def check_analyst(name: Any, where: str = "analyst") -> None:
    """An analyst name is printable text and not ``'*'`` (the data set's total).

    Raises:
        LedgerError: it is not.
    """
    if not isinstance(name, str) or not name or name == ALL or not is_plain(name):
        raise LedgerError(
            f"{where} must be a name of printable characters ('*' is reserved for the "
            f"data set's total), got {name!r}")


def _storable(text: str) -> str:
    """Text SQLite can store: a lone surrogate (not UTF-8) becomes a visible escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _check_pair(total) -> None:
    try:
        eps, delta = (float(x) for x in total)
    except (TypeError, ValueError):
        raise PrivacyParameterError(f"a budget is an (epsilon, delta) pair, got {total!r}") \
            from None
    if not (eps > 0 and eps != float("inf")) or not 0 <= delta < 1:
        raise PrivacyParameterError(
            f"a budget needs epsilon > 0 and 0 <= delta < 1, got ({eps}, {delta})")
