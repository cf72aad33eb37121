"""The persistent, atomic, tamper-evident privacy-budget ledger (SQLite or PostgreSQL).

One ledger holds, per data set, the owner's total budget and optional per-analyst
budgets, the running totals of what was spent, and an audit log of every query. The
rules:

* **Charge before release.** ``charge`` checks that the query fits and records it in
  one write transaction, before the backend reads any data: SQLite's ``BEGIN
  IMMEDIATE`` write lock, or on PostgreSQL a row lock (``SELECT ... FOR UPDATE``) on the
  ledger's identity row, serialises every writer across threads, processes and hosts,
  so two queries can never both spend the last of a budget.
* **Constant-time admission.** The sums the accountants need (Σε, Σδ, Σρ and ρ's δ) are
  kept as running totals per (data set, analyst) and per data set (analyst ``*``),
  updated in the same transaction as the charge: a charge reads and writes a handful
  of rows whatever the ledger's age. The history stays, for audit and verification.
* **Failures keep their charge.** A query that fails after its charge is logged as
  ``failed``, one cancelled while it ran (Ctrl-C) as ``cancelled``; the charge stays.
  If even that outcome cannot be written (a full disk), the charge still stands and the
  failure goes to the owner's log (logger ``dpsql.owner``).
* **Refusals charge nothing and are bounded.** A query refused before reading data is
  logged as ``refused`` with cost 0, its text kept as a SHA-256 and the first
  :data:`SQL_KEPT` characters; past :data:`REFUSAL_CAP` stored refusals per analyst
  they are only counted. A query is never refused because the log is full.
* **Never forget.** A new ledger is made only where no file exists (an empty or foreign
  file is a :class:`~dpsql.errors.LedgerError`, never a fresh budget); it is created
  complete and linked into place atomically. Its real path is used (a symlink resolves
  to it), a file with a second hard link is refused (SQLite's locks follow the name),
  and every charge checks, inside its transaction, that the file at the path is still
  the one opened (device and inode) and still carries the ledger's random id: a ledger
  deleted or replaced under an open connection stops it before the next charge.
* **Tamper evidence.** Every entry carries the hash of the one before (a chain), over
  its cost, the full query's SHA-256 and length and the SHA-256 of the text kept; its
  outcome (written after execution) carries its own MAC bound to the entry's hash. With
  an owner secret (:data:`KEY_ENV`) the hashes are HMACs, and so are the budgets, the
  running totals and the data-set bindings, so only the key holder can rewrite them
  undetected.
* **The head record** (one ``meta`` row, MAC'd) names the newest entry (id and hash), a
  sequence number, and the exact version (128 bits of the MAC) of every budget, running
  total, binding and refusal-count row; it is rewritten in the same transaction as
  every charge, refusal, budget change and binding. Every transaction (charges and
  reads alike) checks it: its MAC, that the newest entry is the one it names (one index
  lookup), that it is not older than one this connection already saw, and that each
  row read is the version it names (a missing row must be missing there too). So,
  with the key, deleting or rewinding entries (a tail included), totals, budgets or
  bindings, or putting back an older row, is a :class:`~dpsql.errors.LedgerError` for
  an open connection and at the next open. At open the whole set of small-table rows
  is compared with the head, and the entries since the last verified checkpoint are
  checked and summed onto the checkpoint's totals, which must equal the running totals
  exactly (incremental: each entry is verified once by some open, not O(history) per
  open); ``dpsql budget verify`` checks the whole chain, every outcome MAC, and each
  stored text against the query's hash when the whole text is kept. Every stored cost
  must be finite and non-negative, or the ledger refuses. The head grows with the
  number of (data set, analyst) rows (about 70 bytes each) and is written per charge.
* **Clean failures.** A full disk, a read-only file, a lock held past the owner's
  timeout (:data:`TIMEOUT_ENV`, default 60 s) or a corrupt file is a ``LedgerError``,
  raised before any data is read.
* **Crash safety.** SQLite's rollback journal (``journal_mode=DELETE``) with
  ``synchronous=FULL``: a committed charge is in the main file itself, fsynced before
  the answer, so it survives a killed process or a crash and no side file holds it
  (deleting a ``-wal`` could lose committed charges; deleting a ``-journal`` can only
  lose an uncommitted one, for which no data was read). A killed process never leaves a
  half-written charge. A new ledger file is made with mode 0600 (it holds every
  analyst's SQL; SQLite gives its journal the same mode). A read-only open never falls
  back to ``immutable=1`` (which would ignore a journal and show a stale spend). A
  query's outcome (and its cached answer) is not part of that commit: it waits for the
  connection's next write, at most :data:`~dpsql.ledger.outcomes.SETTLE_AFTER` seconds
  (:mod:`dpsql.ledger.outcomes`), so one durable commit a query is the charge's; a crash
  in that window leaves the charge ``charged`` (outcome unknown), never uncharged.

**What a ledger cannot detect on its own.** Without the owner's key, anyone who can
write the file can rewrite it consistently, head included (the chain then only catches
accidents: bit flips, truncation, naive edits). Even with the key, the file as a whole
(head included) can be rolled back to an older copy while no connection has it open
(an open connection refuses a head older than one it saw), or deleted then; when the
ledger is not pinned, the next connection then starts a fresh budget. Pinning the
ledger (which must then exist; creating it is the owner's act) and its id
(:data:`LEDGER_ID_ENV`, the catalog's ``ledger_id:``) turns a deleted or replaced file
into a refusal; a rollback stays undetectable from inside the file, so the owner keeps
the file where analysts cannot write it (behind ``dpsql serve``).

**Data sets and databases.** Each data set in a ledger is bound, at its first
connection, to the identity of its database (a file's device, inode and real path; a
server's normalised URL). A connection to another database under the same data set name
(e.g. two databases whose catalogs leave ``dataset:`` at ``"default"``) is refused: give
each its own ``dataset:`` or ledger, or, when the database really moved, the owner runs
``dpsql budget rebind``. A database file rebuilt at the same path (a new inode) is the
owner's new version of the same database and keeps its budget.

**Pins.** A connection names its database, ledger and analyst; a fresh ledger is a fresh
budget. When analysts can choose those arguments, the owner pins them, either in the
catalog (``database:``, ``ledger:``, both relative to the catalog file, ``ledger_id:``
and ``analyst:``) or in the environment the service process starts with
(:data:`DATABASE_ENV`, :data:`LEDGER_ENV`, :data:`LEDGER_ID_ENV`, :data:`ANALYST_ENV`,
and :data:`CATALOG_ENV`, which pins the catalog itself). The environment wins over the
catalog. Under a pin, a connection that names another database (compared by device and
inode for files, by normalised URL for servers), another ledger (``":memory:"``
included), another analyst or another catalog is refused with a
:class:`~dpsql.errors.LedgerError` before anything is opened; one that names none gets
the pinned one; a pinned ledger must already exist; and a connection's ``budget=`` is
only a cap, never the data set's total (only the owner sets that: the catalog's
``budget:`` or ``dpsql budget set``).

>>> led = Ledger(":memory:")
>>> led.ensure_budget("pums", (1.0, 1e-6))
>>> led.charge("pums", "alice", Cost(0.25), "SELECT COUNT(*) FROM pums")
1
>>> led.view("pums", "alice").spent
(0.25, 0.0)

**The package.** One module per concern: :mod:`~dpsql.ledger.settings` (constants and
the owner's environment), :mod:`~dpsql.ledger.values` (numbers and names accepted),
:mod:`~dpsql.ledger.identity` (which database a data set is),
:mod:`~dpsql.ledger.records` (the MAC and the documents it signs),
:mod:`~dpsql.ledger.schema` (tables, first records, older formats),
:mod:`~dpsql.ledger.stores` (SQLite and PostgreSQL, locking),
:mod:`~dpsql.ledger.core` (opening, transactions), :mod:`~dpsql.ledger.chain` (tamper
evidence and verification), :mod:`~dpsql.ledger.budgets` (budgets and bindings),
:mod:`~dpsql.ledger.charging` (admission, charges, refusals, outcomes),
:mod:`~dpsql.ledger.outcomes` (outcomes queued for the next write),
:mod:`~dpsql.ledger.reports` (reading, :class:`BudgetView`) and
:mod:`~dpsql.ledger.pins`. :class:`Ledger` puts the parts together.
"""

from __future__ import annotations

from pathlib import Path

from dpsql.accounting import Cost  # noqa: F401 - the doctest above uses it
from dpsql.ledger.budgets import Budgets
from dpsql.ledger.chain import Chain
from dpsql.ledger.charging import Charging
from dpsql.ledger.core import LedgerBase
from dpsql.ledger.identity import _same_database, _shown_identity, database_identity, normalise_url
from dpsql.ledger.outcomes import InFlight
from dpsql.ledger.pins import Pins, apply_database_pin, apply_pins, pinned_catalog, pins
from dpsql.ledger.records import _checkpoint_doc, _head_doc, _hk, _Mac, _sha, _storable, _tag
from dpsql.ledger.reports import BudgetView, Reports
from dpsql.ledger.schema import _ENTRY_COLUMNS, _OUTCOMES, _init_meta, _Schema, read_v1, write_v1
from dpsql.ledger.settings import (
    ALL,
    ANALYST_ENV,
    CATALOG_ENV,
    CHARGED_SQL_KEPT,
    CHECKPOINT_EVERY,
    DATABASE_ENV,
    FORMAT,
    KEY_ENV,
    LEDGER_ENV,
    LEDGER_ID_ENV,
    MAX_NAME,
    REFUSAL_CAP,
    SQL_KEPT,
    TIMEOUT_ENV,
    VERSION,
    _now,
    _owner_key,
    _timeout,
)
from dpsql.ledger.stores import _ledger_error, _Postgres, _SQLite
from dpsql.ledger.values import (
    Running,
    _check_accountant,
    _check_cost,
    _check_extra,
    check_analyst,
    check_budget,
    check_dataset,
    real_number,
)

__all__ = [
    "ALL", "ANALYST_ENV", "CATALOG_ENV", "CHARGED_SQL_KEPT", "CHECKPOINT_EVERY",
    "DATABASE_ENV", "FORMAT", "KEY_ENV", "LEDGER_ENV", "LEDGER_ID_ENV", "MAX_NAME",
    "REFUSAL_CAP", "SQL_KEPT", "TIMEOUT_ENV", "VERSION", "BudgetView", "InFlight", "Ledger",
    "Pins", "Running",
    "apply_database_pin", "apply_pins", "check_analyst", "check_budget", "check_dataset",
    "database_identity", "migrate_v1", "normalise_url", "pinned_catalog", "pins",
    "real_number",
    # the parts' own names, for tools and tests that build or inspect ledgers directly
    "_ENTRY_COLUMNS", "_OUTCOMES", "_Mac", "_Postgres", "_SQLite", "_Schema",
    "_check_accountant", "_check_cost", "_check_extra", "_checkpoint_doc", "_head_doc",
    "_hk", "_init_meta", "_ledger_error", "_now", "_owner_key", "_same_database", "_sha",
    "_shown_identity", "_storable", "_tag", "_timeout",
]


class Ledger(Charging, Budgets, Reports, Chain, LedgerBase):
    """A budget ledger: an SQLite file, ``":memory:"`` (only when asked for explicitly), or
    a PostgreSQL URL (``postgresql+psycopg://user@host/db``, optional ``?schema=name``).

    Args:
        path: where the ledger is.
        create: whether a missing ledger may be created here (never over an existing
            file; a pinned ledger is opened with ``create=False``).
        readonly: open for reading only (``budget show``/``log``/``verify``); charges fail.
        expect_id: the ledger id the owner pinned; another id is a LedgerError.
        timeout: seconds to wait for the lock (default :data:`TIMEOUT_ENV` or 60).
        refusal_cap: refusals stored per (data set, analyst) before they are only counted.

    Raises:
        LedgerError: missing where it may not be created, empty, foreign, corrupted,
            tampered with, keyed with another key, or not readable.
    """

    # The package's clock and checkpoint interval are read here, from this module, at
    # each use: setting ``dpsql.ledger._now`` or ``dpsql.ledger.CHECKPOINT_EVERY`` (as
    # the tests of a clock stepping back and of a long connection do) sets them for
    # every part.

    def _stamp(self) -> str:
        """The time an entry, a budget or a binding is recorded at (ISO 8601, UTC)."""
        return _now()

    def _checkpoint_due(self, entry_id: int) -> bool:
        """Whether the charge ``entry_id`` is :data:`CHECKPOINT_EVERY` entries past the
        checkpoint, so that its transaction verifies them and moves the checkpoint."""
        return entry_id - self._cp_id >= CHECKPOINT_EVERY


def migrate_v1(source: str | Path, target: str | Path) -> int:
    """Copies a version-1 ledger's budgets and charges, in order, into a new ledger.

    Returns:
        The number of charges copied.

    Raises:
        LedgerError: ``source`` is not a version-1 ledger, ``target`` exists, or a
            recorded cost is not a finite non-negative number.
    """
    budgets, charges = read_v1(source, target)
    led = Ledger(target, create=True)
    try:
        return write_v1(led, budgets, charges)
    finally:
        led.close()
