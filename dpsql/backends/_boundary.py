"""The backends' side of the trust boundary: stable messages out, engine text to the owner.

Whatever a database says when it refuses or fails a query may quote the data (a value
that did not convert, a name it met) or echo text the query carried. None of it reaches
the analyst: every backend raises one of the fixed messages below — the same on every
database, one per stage — and writes the engine's own message to the data owner's log,
the ``dpsql.owner`` logger (``WARNING``, with the backend's name and the stage). Control
characters in the logged text are escaped, so a message cannot forge log lines.

The messages are also raised *outside* the driver's ``except`` block, so the driver's
exception is not kept as the ``__context__`` of the error the analyst gets.

>>> err = plan_failed("duckdb :memory:", ValueError("bad value 'Alice|42'\\nfake line"),
...                   "SELECT 1")
>>> str(err), err.charged
('the database could not plan this query; nothing was charged', False)
>>> printable("a\\nb\\x1b[31m")
'a\\\\nb\\\\x1b[31m'
"""

from __future__ import annotations

import logging

from dpsql.errors import BackendError
from dpsql.text import escape

#: The data owner's log (backend error texts); never shown to analysts.
OWNER_LOG = logging.getLogger("dpsql.owner")

#: Before the charge: the database refused to bind or plan the query.
PLAN_FAILED = "the database could not plan this query; nothing was charged"
#: After the charge: the database failed while running the query.
RUN_FAILED = ("the database failed while running this query; the charge is kept because "
              "the failure may depend on the data")
#: Metadata (column types, keys, collations) could not be read; before any charge.
SCHEMA_FAILED = "the database could not describe table {table!r}; nothing was charged"
#: The connection could not be opened (the reason is in the owner's log).
OPEN_FAILED = "cannot open {what}: the reason is in the data owner's log (logger dpsql.owner)"

#: Strings of pairwise different bytes that some collation compares as equal: case
#: (NOCASE, ICU), accents (NOACCENT), canonical equivalence (NFC and every ICU collation),
#: trailing and leading spaces (RTRIM), ignorable code points, width, special casing. A
#: column under which fewer of them stay distinct does not compare strings byte-wise.
COLLATION_PROBES = ("a", "A", "a ", " a", "e", "é", "e\u0301", "ss", "ß", "a\u200b",
                    "a\u00ad", "ａ", "i", "ı", "İ")

#: Longest engine message or SQL text kept in one log record (characters).
_LOG_LIMIT = 4000


def printable(text: object, limit: int = _LOG_LIMIT) -> str:
    """``text`` cut at ``limit`` characters, every control or format character escaped.

    >>> printable("a\\nb\\x1b[2J")
    'a\\\\nb\\\\x1b[2J'
    """
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    return escape(text)


def log_failure(backend: str, stage: str, exc: BaseException | str,
                sql: str | None = None) -> None:
    """Writes a backend's own failure (type and message) to the owner's log."""
    detail = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    if sql is None:
        OWNER_LOG.warning("dpsql backend %s: %s failed: %s", printable(backend), stage,
                          printable(detail))
    else:
        OWNER_LOG.warning("dpsql backend %s: %s failed: %s; SQL: %s", printable(backend),
                          stage, printable(detail), printable(sql))


def _error(message: str, charged: bool) -> BackendError:
    err = BackendError(message)
    err.charged = charged
    return err


def plan_failed(backend: str, exc: BaseException | str, sql: str | None) -> BackendError:
    """The error for a query the database would not bind or plan (nothing charged)."""
    log_failure(backend, "check", exc, sql)
    return _error(PLAN_FAILED, charged=False)


def run_failed(backend: str, exc: BaseException | str, sql: str | None) -> BackendError:
    """The error for a query that failed while running (the charge is kept)."""
    log_failure(backend, "execute", exc, sql)
    return _error(RUN_FAILED, charged=True)


def not_ready(backend: str, exc: BaseException) -> BackendError:
    """The error for a backend that could not get ready to run a query (before the
    charge: nothing charged), e.g. a process out of threads."""
    log_failure(backend, "start", exc)
    return _error("the database could not get ready to run the query (the owner's log "
                  "says why); nothing was charged, try again", charged=False)


def not_one_select(backend: str, stage: str, detail: str, sql: str) -> BackendError:
    """The error for SQL text that is not exactly one SELECT statement, sent nowhere.

    Such text can only come from a bug in dpsql (its output check refuses it first), so
    the analyst gets the stage's usual message — the same whichever database noticed —
    and the owner's log says what was found. ``stage`` is ``"check"`` (nothing charged)
    or ``"execute"`` (the charge is kept).
    """
    detail = f"not exactly one SELECT statement: {detail}"
    if stage == "check":
        return plan_failed(backend, detail, sql)
    return run_failed(backend, detail, sql)


def schema_failed(backend: str, table: str, exc: BaseException | str) -> BackendError:
    """The error for metadata that could not be read (before any charge)."""
    log_failure(backend, f"reading the schema of {table!r}", exc)
    return _error(SCHEMA_FAILED.format(table=printable(table, 200)), charged=False)


def open_failed(what: str, exc: BaseException | str) -> BackendError:
    """The error for a connection that could not be opened; ``what`` names it for the
    owner (a path or a URL without its password), never the driver's text."""
    log_failure(what, "opening the connection", exc)
    return _error(OPEN_FAILED.format(what=what), charged=False)
