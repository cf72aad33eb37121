"""The ledger's constants, the owner's settings read from the environment, and its clock.

Everything here is a plain value or a function of the environment: the names of the
pins (:mod:`dpsql.ledger.pins`), the owner's key and lock timeout, how much of a query's
text is kept, and the format tag every ledger carries. No database, no state.
"""

from __future__ import annotations

import logging
import math
import os
import time

from dpsql.errors import LedgerError

FORMAT = "dpsql-ledger"
VERSION = "3"
ALL = "*"  # analyst key of a data set's total budget

#: Environment variable of the service process: the only ledger (absolute path or URL).
LEDGER_ENV = "DPSQL_LEDGER"
#: Environment variable of the service process: the pinned ledger's id.
LEDGER_ID_ENV = "DPSQL_LEDGER_ID"
#: Environment variable of the service process: the only analyst identity.
ANALYST_ENV = "DPSQL_ANALYST"
#: Environment variable of the service process: the only catalog file (absolute path).
CATALOG_ENV = "DPSQL_CATALOG"
#: Environment variable of the service process: the only database (absolute path or URL).
DATABASE_ENV = "DPSQL_DATABASE"
#: The owner's secret that keys the ledger's hashes (HMAC-SHA256).
KEY_ENV = "DPSQL_LEDGER_KEY"
#: Seconds a charge waits for the ledger's lock before a LedgerError (default 60).
TIMEOUT_ENV = "DPSQL_LEDGER_TIMEOUT"

#: Characters of a refused query's text kept in the log (with its SHA-256 and length).
SQL_KEPT = 300
#: Characters of a charged query's text kept in the log (with its SHA-256 and length).
CHARGED_SQL_KEPT = 65536
#: Refusals stored per (data set, analyst); past it they are only counted.
REFUSAL_CAP = 1000
#: Longest analyst name accepted.
MAX_NAME = 200
#: A charge that finds this many entries past the checkpoint verifies them and moves
#: the checkpoint, so an open never has more than about this many entries to verify,
#: however long a connection ran before it (the one charge takes ~0.1 s more).
CHECKPOINT_EVERY = 10_000

_log = logging.getLogger("dpsql.owner")


#: The last whole second :func:`_now` wrote, and its text (one tuple: read whole by any
#: thread).
_second: tuple[int, str] = (-1, "")


def _now() -> str:
    """The time now in UTC, ISO 8601 to the millisecond, as ``datetime.isoformat`` writes
    it (``2026-11-28T06:50:00.123+00:00``); each second's text is formatted once (a
    charge's stamp took 30 us after a scan had cooled the caches).

    >>> stamp = _now()
    >>> len(stamp), stamp[10], stamp[19], stamp[23:]
    (29, 'T', '.', '+00:00')
    """
    global _second
    sec, rem = divmod(time.time_ns(), 1_000_000_000)
    last = _second
    if last[0] != sec:
        last = _second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{last[1]}.{rem // 1_000_000:03d}+00:00"


def _owner_key() -> bytes | None:
    value = os.environ.get(KEY_ENV)
    return value.encode("utf-8") if value else None


def _timeout() -> float:
    value = os.environ.get(TIMEOUT_ENV)
    if not value:
        return 60.0
    try:
        t = float(value)
    except ValueError:
        t = math.nan
    if not (math.isfinite(t) and t > 0):
        raise LedgerError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {value!r}")
    return t
