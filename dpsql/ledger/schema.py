"""The ledger's tables, its first records, and the conversion of older formats.

Six tables (same columns on SQLite and PostgreSQL): ``meta`` (format, id, key check,
checkpoint, head record), ``budgets``, ``totals`` (the running sums), ``entries`` (the
chained log of charges and refusals), ``refusal_counts`` and ``bindings``. A version-1
ledger is converted by copying its budgets and charges, in order, into a new one
(:func:`read_v1` reads, :func:`write_v1` writes through the ledger's own records).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dpsql.accounting import Cost
from dpsql.errors import LedgerError
from dpsql.ledger.records import _checkpoint_doc, _head_doc, _Mac
from dpsql.ledger.settings import ALL, CHARGED_SQL_KEPT, FORMAT, VERSION, _now
from dpsql.ledger.values import _check_cost, check_budget

#: The columns of an entry, in the order the chain's checks read them.
_ENTRY_COLUMNS = ("id, time, dataset, analyst, kind, epsilon, delta, rho, rho_delta, sql, "
                  "sql_hash, sql_length, outcome, detail, omac, prev, hash")

#: The outcomes an entry of each kind may carry.
_OUTCOMES = {"charge": ("charged", "answered", "failed", "cancelled"),
             "refusal": ("refused",)}


class _Schema:
    """The ledger's tables in one store's SQL (its prefix and column types)."""

    def __init__(self, store):
        self.s = store

    def statements(self) -> list[str]:
        p, r, i = self.s.prefix, self.s.real, self.s.integer
        return [
            f"CREATE TABLE {p}meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            f"CREATE TABLE {p}budgets (dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
            f"epsilon {r} NOT NULL, delta {r} NOT NULL, accountant TEXT NOT NULL, "
            "source TEXT NOT NULL, updated TEXT NOT NULL, mac TEXT NOT NULL, "
            "PRIMARY KEY (dataset, analyst))",
            f"CREATE TABLE {p}totals (dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
            f"epsilon {r} NOT NULL, delta {r} NOT NULL, rho {r} NOT NULL, "
            f"rho_delta {r} NOT NULL, n {i} NOT NULL, mac TEXT NOT NULL, "
            "PRIMARY KEY (dataset, analyst))",
            f"CREATE TABLE {p}entries ({self.s.id_column}, time TEXT NOT NULL, "
            "dataset TEXT NOT NULL, analyst TEXT NOT NULL, kind TEXT NOT NULL, "
            f"epsilon {r} NOT NULL, delta {r} NOT NULL, rho {r} NOT NULL, "
            f"rho_delta {r} NOT NULL, sql TEXT NOT NULL, sql_hash TEXT NOT NULL, "
            f"sql_length {i} NOT NULL, outcome TEXT NOT NULL, detail TEXT, "
            "prev TEXT NOT NULL, hash TEXT NOT NULL, omac TEXT NOT NULL)",
            f"CREATE TABLE {p}refusal_counts (dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
            f"stored {i} NOT NULL, dropped {i} NOT NULL, PRIMARY KEY (dataset, analyst))",
            f"CREATE TABLE {p}bindings (dataset TEXT PRIMARY KEY, db TEXT NOT NULL, "
            "updated TEXT NOT NULL, mac TEXT NOT NULL)",
        ]

    def create(self, con) -> None:
        for statement in self.statements():
            con.execute(statement)


def _init_meta(con, ph: str, prefix: str, ledger_id: str, key: bytes | None) -> None:
    mac = _Mac(ledger_id, key)
    rows = [("format", FORMAT), ("version", VERSION), ("id", ledger_id),
            ("keyed", "1" if key else "0"), ("key_check", mac("key-check")),
            ("created", _now()), ("checkpoint", _checkpoint_doc(mac, 0, mac("genesis"), {})),
            ("head", _head_doc(mac, 0, 0, mac("genesis"), {}))]
    for k, v in rows:
        con.execute(f"INSERT INTO {prefix}meta VALUES ({ph}, {ph})", (k, v))


def read_v1(source: str | Path, target: str | Path) -> tuple[list, list]:
    """A version-1 ledger's budgets and charges, in order (for :func:`write_v1`).

    Raises:
        LedgerError: ``source`` is not a version-1 ledger, or ``target`` exists.
    """
    if Path(target).exists():
        raise LedgerError(f"{str(target)!r} exists; migrate writes a new ledger")
    try:
        con = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
        meta = dict(con.execute("SELECT key, value FROM meta"))
        if meta.get("format") != FORMAT or meta.get("version") != "1":
            raise LedgerError(f"{str(source)!r} is not a version-1 dpsql ledger")
        budgets = con.execute("SELECT dataset, analyst, epsilon, delta, source FROM budgets "
                              "ORDER BY dataset, analyst").fetchall()
        charges = con.execute("SELECT dataset, analyst, epsilon, delta, rho, rho_delta, sql, "
                              "outcome, detail FROM charges ORDER BY id").fetchall()
        con.close()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read {str(source)!r} as a version-1 ledger: {exc}") \
            from None
    return budgets, charges


def write_v1(led, budgets: list, charges: list) -> int:
    """Writes what :func:`read_v1` read into the new ledger ``led``, in one transaction;
    the number of charges copied.

    Raises:
        LedgerError: a recorded cost is not a finite non-negative number.
    """
    with led._tx() as db:
        for ds, an, e, d, src in budgets:
            led._write_budget(db, ds, an, check_budget((e, d)), "basic", src, True)
        for ds, an, e, d, r, rd, sql, outcome, detail in charges:
            parts = _check_cost(Cost(e, d, r, rd))
            led._append(db, ds, an, "charge", parts, sql, CHARGED_SQL_KEPT, outcome, detail)
            led._add(db, ds, an, parts)
            led._add(db, ds, ALL, parts)
    return len(charges)
