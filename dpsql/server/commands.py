"""Session commands: ``SET``, ``SHOW``, ``RESET``, ``BEGIN``/``COMMIT``/``ROLLBACK``,
``DISCARD``, ``DEALLOCATE``... answered from the session's own state: nothing read,
nothing spent.

Transactions are accepted and tracked (the status byte of ReadyForQuery, and the
aborted state after an error), with nothing to commit: every statement only reads.
Each command is one method, chosen by the statement's first word from
:data:`_COMMANDS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dpsql.server import protocol as pg
from dpsql.server.settings import (
    DPSQL_SETTINGS,
    REPORTED,
    canonical,
    checked_setting,
    split_commas,
    unquote,
)
from dpsql.server.sqlstate import QueryError
from dpsql.server.statements import Outcome, Portal, Prepared

#: The error for a statement sent in a failed transaction block (as PostgreSQL's).
_ABORTED = ("25P02", "current transaction is aborted, commands ignored until end of "
            "transaction block")


def first_words(text: str) -> list[str]:
    """The first three words of a statement, lower case, after its leading comments."""
    text = re.sub(r"(?s)^\s*(--[^\n]*\n\s*|/\*.*?\*/\s*)*", "", text)
    return [w.lower() for w in re.findall(r"[A-Za-z_]+", text[:80])[:3]]


def is_command(words: list[str]) -> bool:
    """Whether a statement with these :func:`first_words` is a session command."""
    return bool(words) and words[0] in _COMMANDS


class SessionCommands:
    """The session commands, mixed into :class:`~dpsql.server.session.Session`.

    They read and change only the session's own state: its settings and their
    defaults, the transaction status, prepared statements and portals, and (SHOW
    dpsql.budget) the login's own budget in the ledger.
    """

    login: str
    catalog: object
    ledger: object
    settings: dict[str, str]
    defaults: dict[str, str]
    statements: dict[str, Prepared]
    portals: dict[str, Portal]
    txn: str

    def _command(self, text: str) -> Outcome | None:
        """Answers ``text`` if it is a session command; None if it is not one."""
        words = first_words(text)
        if not is_command(words):
            return None
        head = words[0]
        if self.txn == "E" and head not in ("rollback", "abort", "commit", "end"):
            raise QueryError(*_ABORTED)
        return _COMMANDS[head](self, text, words)

    def _set(self, name: str, value: str) -> list[tuple[str, str]]:
        """Sets one setting; returns the ParameterStatus to report (if any)."""
        key, value = checked_setting(name, value)
        self.settings[key] = value
        return [(key, value)] if key in REPORTED else []

    # -- transactions ---------------------------------------------------------------

    def _begin(self, text: str, words: list[str]) -> Outcome:
        """``BEGIN``/``START TRANSACTION``: a transaction block opens."""
        self.txn = "T"
        return Outcome("BEGIN")

    def _commit(self, text: str, words: list[str]) -> Outcome:
        """``COMMIT``/``END``: the block closes (a failed one rolls back)."""
        tag = "ROLLBACK" if self.txn == "E" else "COMMIT"
        self.txn = "I"
        return Outcome(tag)

    def _rollback(self, text: str, words: list[str]) -> Outcome:
        """``ROLLBACK``/``ABORT`` closes the block; ``ROLLBACK TO`` a savepoint
        leaves the failed state."""
        if len(words) > 1 and words[1] == "to":
            if self.txn == "E":
                self.txn = "T"
            return Outcome("ROLLBACK")
        self.txn = "I"
        return Outcome("ROLLBACK")

    # -- settings -------------------------------------------------------------------

    def _set_command(self, text: str, words: list[str] | None = None) -> Outcome:
        """``SET [SESSION|LOCAL] name = value``, ``SET TIME ZONE``, ``SET name TO
        DEFAULT``; ``SET TRANSACTION ...`` is accepted and changes nothing."""
        m = re.match(r"(?is)^set\s+(?:session\s+|local\s+)?(.*)$", text)
        rest = (m.group(1) if m else "").strip()
        low = rest.lower()
        if low.startswith(("transaction", "session characteristics")):
            return Outcome("SET")
        if low.startswith("time zone"):
            value = rest[len("time zone"):].strip()
            return Outcome("SET", status=self._set("TimeZone", unquote(value)))
        m = re.match(r'(?s)^("?[\w.]+"?)\s*(?:=|\s+to\s+|\s)\s*(.*)$', rest, re.IGNORECASE)
        if not m:
            raise QueryError("42601", "cannot read this SET: write SET name = value")
        name, value = m.group(1).strip('"'), m.group(2).strip()
        if value.lower() == "default":
            key = canonical(name)
            self.settings[key] = self.defaults.get(key, "")
            return Outcome("SET", status=[(key, self.settings[key])] if key in REPORTED
                           else [])
        value = ",".join(unquote(v.strip()) for v in split_commas(value))
        return Outcome("SET", status=self._set(name, value))

    def _reset(self, text: str, words: list[str]) -> Outcome:
        """``RESET name`` or ``RESET ALL``: back to the session's defaults."""
        name = text.split(None, 1)[1].strip() if len(words) > 1 else ""
        if name.lower() == "all":
            changed = [(k, v) for k, v in self.defaults.items()
                       if k in REPORTED and self.settings.get(k) != v]
            self.settings = dict(self.defaults)
            return Outcome("RESET", status=changed)
        key = canonical(name)
        if key in self.defaults:
            self.settings[key] = self.defaults[key]
        else:
            self.settings.pop(key, None)
        status = [(key, self.settings[key])] if key in REPORTED else []
        return Outcome("RESET", status=status)

    def _show(self, text: str, words: list[str] | None = None) -> Outcome:
        """``SHOW name``, ``SHOW ALL``, ``SHOW dpsql.budget`` (the login's own)."""
        name = text.split(None, 1)[1].strip().rstrip(";").strip() if " " in text else ""
        low = name.lower().strip('"')
        if low == "dpsql.budget":
            return self._show_budget()
        if low == "all":
            rows = [(k, v, "") for k, v in sorted(self.settings.items())]
            return Outcome("SHOW", [("name", pg.TEXT), ("setting", pg.TEXT),
                                    ("description", pg.TEXT)], rows)
        if low in ("transaction isolation level", "transaction_isolation"):
            return Outcome("SHOW", [("transaction_isolation", pg.TEXT)],
                           [("read committed",)])
        key = canonical(low)
        if key not in self.settings:
            if key.lower() in DPSQL_SETTINGS:
                return Outcome("SHOW", [(key, pg.TEXT)], [("",)])
            raise QueryError("42704", f'unrecognized configuration parameter "{name}"')
        return Outcome("SHOW", [(key, pg.TEXT)], [(self.settings[key],)])

    def _show_budget(self) -> Outcome:
        """``SHOW dpsql.budget``: the login's own spending and budget, one row."""
        (se, sd), (re_, rd), (te, td) = self.own_budget()
        cols = [("analyst", pg.TEXT), ("epsilon_spent", pg.FLOAT8),
                ("delta_spent", pg.FLOAT8), ("epsilon_remaining", pg.FLOAT8),
                ("delta_remaining", pg.FLOAT8), ("epsilon_total", pg.FLOAT8),
                ("delta_total", pg.FLOAT8)]
        return Outcome("SHOW", cols, [(self.login, float(se), float(sd), float(re_),
                                       float(rd), float(te), float(td))])

    def own_budget(self):
        """(spent, remaining, total) of this login's own budget: never the data set's
        total or what it has left, which would tell others' spending. A login without
        a budget of its own shows NaN for remaining and total."""
        from dpsql.accounting import Accounting

        dataset = self.catalog.dataset
        spent = self.ledger.spent(dataset, self.login)
        own = {a: (float(e), float(d)) for _, a, e, d, _ in self.ledger.budgets(dataset)
               }.get(self.login)
        if own is None:
            nan = float("nan")
            return spent.basic, (nan, nan), (nan, nan)
        left = Accounting(own, self.ledger.accountant(dataset)).remaining(spent)
        return spent.basic, left, own

    # -- statements and portals -----------------------------------------------------

    def _discard(self, text: str, words: list[str]) -> Outcome:
        """``DISCARD ALL``: settings, prepared statements and portals back to start."""
        if self.txn != "I":
            raise QueryError("25001", "DISCARD ALL cannot run inside a transaction block")
        self.settings = dict(self.defaults)
        self.statements.clear()
        self.portals.clear()
        return Outcome("DISCARD ALL")

    def _deallocate(self, text: str, words: list[str]) -> Outcome:
        """``DEALLOCATE [PREPARE] name`` or ``ALL``."""
        rest = [w for w in words[1:] if w != "prepare"]
        if rest and rest[0] == "all":
            self.statements.clear()
        elif rest:
            self.statements.pop(text.split()[-1].strip('"'), None)
        return Outcome("DEALLOCATE")

    def _unsupported(self, text: str, words: list[str]) -> Outcome:
        """Commands that write or wait for others (``LISTEN``, ``LOCK``...): refused."""
        raise QueryError("0A000", f"{words[0].upper()} is not supported: dpsql answers "
                         "aggregate SELECTs with differential privacy")


def _tag(tag: str) -> Callable[[SessionCommands, str, list[str]], Outcome]:
    """A command accepted with nothing to do: its tag only."""
    return lambda session, text, words: Outcome(tag)


#: A session command's first word → its method.
_COMMANDS: dict[str, Callable[[SessionCommands, str, list[str]], Outcome]] = {
    "begin": SessionCommands._begin,
    "start": SessionCommands._begin,
    "commit": SessionCommands._commit,
    "end": SessionCommands._commit,
    "rollback": SessionCommands._rollback,
    "abort": SessionCommands._rollback,
    "savepoint": _tag("SAVEPOINT"),
    "release": _tag("RELEASE"),
    "set": SessionCommands._set_command,
    "show": SessionCommands._show,
    "reset": SessionCommands._reset,
    "discard": SessionCommands._discard,
    "deallocate": SessionCommands._deallocate,
    "close": _tag("CLOSE CURSOR"),
    **{word: SessionCommands._unsupported
       for word in ("listen", "unlisten", "notify", "lock", "vacuum", "analyze")},
}
