"""The answer cache: the same query asked again gets the answer already released, free.

An answer released to an analyst is theirs: handing it to them again is
post-processing of what they already hold, so it costs nothing, and it ends averaging
attacks by repetition (asking one query n times to shrink its noise by √n), which a
budget otherwise only slows down. The cache lives in the ledger (table ``answers``,
same file or PostgreSQL schema, same transactions and durability): the answer is
written in the same transaction as the query's ``answered`` outcome, after the charge,
and read in one read transaction before anything else happens.

**Key.** SHA-256 of an injective encoding (a JSON list of strings) of: the data set and
the analyst (answers are per analyst: another analyst's answer was charged to their
budget, not to this one's); the catalog's content hash (bounds, domains, limits and the
owner's ``data_version``, :func:`dpsql.plan_cache.catalog_fingerprint`); the backend's
schema version; the exact SQL text (options clause included); and ε, δ, ``max_groups``,
``max_rows``, the mechanism and ``alpha`` each as (type, ``repr``)
(:func:`dpsql.plan_cache.typed`). Nothing is normalised, so no two texts share an entry.

**Why a hit releases nothing new.** A hit returns bytes stored by :meth:`storer` from a
Result that was returned to this same analyst of this same data set after its charge
was committed; the stored answer is exactly that Result (rows, error bars, notes, SQL),
so the analyst learns nothing they were not given. A hit writes nothing to the ledger
(no charge, no entry) and its Result says it came from the cache at zero cost. Only
answered queries are stored: a query that failed after its charge stores nothing, so
asking it again is charged again. Any key difference (ε, options, catalog or its
``data_version``, schema, analyst) is a miss, answered afresh and charged.

**Derived answers.** An answer is also stored under its query's *core* (the query
without HAVING, ORDER BY, LIMIT and OFFSET, when it had none of the first three), so
that another HAVING/ORDER BY/LIMIT over its released rows is answered from it,
free (:mod:`dpsql.answer_derive`); such entries' keys start with :data:`CORE_PREFIX`
and are not counted as answers of their own. With it goes a *pointer* (key under
:data:`FRAME_PREFIX`: the core's frame, i.e. the core without its select list, and the
core): the query's own text, so that a query with another select list over the same
frame (an AVG from a released SUM and COUNT, :mod:`dpsql.answer_avg`) finds the answers
it may be computed from. A pointer holds SQL the analyst wrote, never an answer.

**Staleness is the owner's word.** dpsql never guesses that the data changed: the owner
bumps ``data_version`` in the catalog (every older entry stops matching) or runs
``dpsql cache clear``.

**Tamper evidence.** Each entry carries the ledger's MAC (an HMAC with the owner's key,
:data:`dpsql.ledger.KEY_ENV`) over its data set, analyst, key and answer; an entry that
fails it is a :class:`~dpsql.errors.LedgerError`, never an answer.

**Format.** The table is an addition to a version-3 ledger, created on first use (in a
write transaction under the ledger's lock, so concurrent openers do not race); a ledger
without it is a version-3 ledger with an empty cache, and a dpsql that does not know it
reads and charges the ledger as before. The answer is a tagged JSON encoding that keeps
Python types (tuple/list, int/float/bool, dates, Decimal) and floats bit for bit
(``float.hex``); no pickle, so a ledger file can never run code.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import json
import logging
from decimal import Decimal
from typing import Any

from dpsql.errors import LedgerError
from dpsql.plan_cache import typed
from dpsql.result import Result

_log = logging.getLogger("dpsql.owner")

#: Tag of the key's encoding: a new encoding never matches an old entry.
KEY_VERSION = "dpsql-answer-1"
#: Start of the keys an answer is stored under a second time, as its query's core's
#: (:mod:`dpsql.answer_derive`): not counted as answers of their own.
CORE_PREFIX = "core:"
#: Start of the keys of pointers from a frame (a core without its select list) to the
#: text of a query answered over it (:mod:`dpsql.answer_avg`); under CORE_PREFIX, so
#: not counted as answers either.
FRAME_PREFIX = CORE_PREFIX + "frame:"
#: The most pointers of one frame read by :meth:`AnswerCache.pointers`.
MAX_POINTERS = 16
#: The note a Result from the cache carries.
CACHED_NOTE = ("answered from the answer cache: this query was answered before with the "
               "same epsilon, delta and options; the same answer again, nothing was spent")


def _table(prefix: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {prefix}answers (dataset TEXT NOT NULL, "
            "analyst TEXT NOT NULL, key TEXT NOT NULL, answer TEXT NOT NULL, "
            "created TEXT NOT NULL, mac TEXT NOT NULL, PRIMARY KEY (dataset, analyst, key))")


class AnswerCache:
    """Released answers of one ledger, per (data set, analyst, key)."""

    def __init__(self, ledger):
        self._ledger = ledger
        self.enabled = not ledger.readonly
        if self.enabled:
            with ledger.side_table(write=True) as (db, prefix, _):
                db.execute(_table(prefix))

    @staticmethod
    def key(dataset: str, analyst: str, catalog: str, schema: Any, sql: Any, epsilon: Any,
            delta: Any, max_groups: Any, max_rows: Any, mechanism: Any,
            alpha: Any) -> str | None:
        """The entry's key (see the module docstring); None: not cacheable."""
        if not isinstance(sql, str):
            return None
        parts = [KEY_VERSION, dataset, analyst, catalog, repr(schema), sql,
                 *(x for v in (epsilon, delta, max_groups, max_rows, mechanism, alpha)
                   for x in typed(v))]
        return hashlib.sha256(json.dumps(parts, ensure_ascii=True).encode()).hexdigest()

    def get(self, key: str | None, dataset: str, analyst: str) -> Result | None:
        """The answer released before under ``key``, marked free; None: a miss.

        Raises:
            LedgerError: the entry fails its MAC (tampered with), or the ledger cannot
                be read.
        """
        if key is None or not self.enabled:
            return None
        # an answer still queued with its outcome is written first; any other key is
        # not among the queued ones, so the read need not wait for them
        with self._ledger.side_table(settle=self._ledger.queued_answer(key.__eq__)) as (
                db, prefix, mac):
            row = db.execute(f"SELECT answer, mac FROM {prefix}answers WHERE dataset = ? "
                             "AND analyst = ? AND key = ?", (dataset, analyst, key)).fetchone()
        if row is None:
            return None
        answer, tag = row
        if not hmac.compare_digest(tag, mac("answer", dataset, analyst, key, answer)):
            raise LedgerError(f"ledger {self._ledger.path!r}: a cached answer fails its "
                              "check (was the ledger edited?); refusing to use it")
        try:
            result = decode_result(answer)
        except (ValueError, TypeError, KeyError) as exc:  # an older dpsql's Result
            _log.warning("answer cache: an entry cannot be read (%s); answering afresh",
                         type(exc).__name__)
            return None
        return dataclasses.replace(result, cost=(0.0, 0.0),
                                   notes=(*result.notes, CACHED_NOTE))

    def pointers(self, frame: str | None, dataset: str, analyst: str) -> list[str]:
        """The texts of the queries answered over ``frame`` (a frame key, see the module
        docstring), the most recent first, at most :data:`MAX_POINTERS`.

        Raises:
            LedgerError: a pointer fails its MAC, or the ledger cannot be read.
        """
        if frame is None or not self.enabled:
            return []
        settle = self._ledger.queued_answer(lambda k: k.startswith(frame + ":"))
        with self._ledger.side_table(settle=settle) as (db, prefix, mac):
            # the pattern as a parameter (psycopg); a frame key is hex after the prefix,
            # so it holds no '%' nor '_'
            rows = db.execute(
                f"SELECT key, answer, mac FROM {prefix}answers WHERE dataset = ? AND "
                "analyst = ? AND key LIKE ? ORDER BY created DESC, key LIMIT ?",
                (dataset, analyst, frame + ":%", MAX_POINTERS)).fetchall()
        out = []
        for key, answer, tag in rows:
            if not hmac.compare_digest(tag, mac("answer", dataset, analyst, key, answer)):
                raise LedgerError(f"ledger {self._ledger.path!r}: a cached answer fails its "
                                  "check (was the ledger edited?); refusing to use it")
            try:
                sql = json.loads(answer)["sql"]
            except (ValueError, TypeError, KeyError):
                continue
            if isinstance(sql, str):
                out.append(sql)
        return out

    def storer(self, key: str | None, dataset: str, analyst: str, result: Result,
               also_as: str | None = None, frame: tuple[str, str] | None = None):
        """What :meth:`dpsql.ledger.Ledger.finish` runs in the outcome's transaction to
        keep ``result`` (under ``key``, and ``also_as`` when given: its core's key,
        :mod:`dpsql.answer_derive`), and with ``also_as`` the pointer ``frame`` (its
        frame's key and the query's text, :meth:`pointers`); None when it cannot be kept
        (never an error: the answer is released either way)."""
        if key is None or not self.enabled:
            return None
        try:
            answer = encode_result(result)
        except (TypeError, ValueError) as exc:
            _log.warning("answer cache: a %s in the answer cannot be stored; not cached",
                         exc)
            return None

        keys = [key] if also_as is None or also_as == key else [key, also_as]
        entries = [(k, answer) for k in keys]
        if also_as is not None and frame is not None and frame[0] is not None:
            # one pointer per core: it is replaced with the core's entry, so the text it
            # holds is always that of the answer stored under the core
            core = hashlib.sha256(also_as.encode()).hexdigest()[:32]
            entries.append((f"{frame[0]}:{core}", json.dumps({"sql": frame[1]},
                                                             ensure_ascii=True)))

        def store(db, prefix: str, mac) -> None:
            db.execute(_table(prefix))
            for k, answer in entries:
                db.execute(f"DELETE FROM {prefix}answers WHERE dataset = ? AND analyst = ? "
                           "AND key = ?", (dataset, analyst, k))
                db.execute(f"INSERT INTO {prefix}answers VALUES (?, ?, ?, ?, ?, ?)",
                           (dataset, analyst, k, answer,
                            datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                            mac("answer", dataset, analyst, k, answer)))

        store.keys = tuple(k for k, _ in entries)  # type: ignore[attr-defined]
        return store

    def clear(self, dataset: str | None = None, analyst: str | None = None) -> int:
        """Forgets cached answers (all, or of one data set and/or analyst); their number."""
        return clear(self._ledger, dataset, analyst)

    def __len__(self) -> int:
        with self._ledger.side_table() as (db, prefix, _):
            # the pattern as a parameter: psycopg reads a '%' in the text as one
            return db.execute(f"SELECT COUNT(*) FROM {prefix}answers WHERE key NOT LIKE ?",
                              (CORE_PREFIX + "%",)).fetchone()[0]


def clear(ledger, dataset: str | None = None, analyst: str | None = None) -> int:
    """``dpsql cache clear``: forgets cached answers of a ledger; returns how many.

    The owner's word that the data changed (or that answers should be drawn afresh):
    the next time each query is asked it is answered and charged again.
    """
    where, args = [], []
    for column, value in (("dataset", dataset), ("analyst", analyst)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    with ledger.side_table(write=True) as (db, prefix, _):
        db.execute(_table(prefix))
        counted = f"{clause} AND" if clause else " WHERE"
        n = db.execute(f"SELECT COUNT(*) FROM {prefix}answers{counted} key NOT LIKE ?",
                       (*args, CORE_PREFIX + "%")).fetchone()[0]
        db.execute(f"DELETE FROM {prefix}answers{clause}", tuple(args))
    return n


# -- encoding ---------------------------------------------------------------------------


def _enc(value: Any) -> Any:
    # exact types first: bool is an int, datetime is a date
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return {"f": value.hex()}
    if kind is tuple:
        return {"t": [_enc(v) for v in value]}
    if kind is list:
        return [_enc(v) for v in value]
    if kind is dict:
        return {"d": [[_enc(k), _enc(v)] for k, v in value.items()]}
    if kind is datetime.datetime:
        return {"dt": value.isoformat()}
    if kind is datetime.date:
        return {"date": value.isoformat()}
    if kind is datetime.time:
        return {"time": value.isoformat()}
    if kind is datetime.timedelta:
        return {"td": [value.days, value.seconds, value.microseconds]}
    if kind is Decimal:
        return {"dec": str(value)}
    raise TypeError(f"value of type {kind.__name__}")


def _dec(value: Any) -> Any:
    if isinstance(value, list):
        return [_dec(v) for v in value]
    if not isinstance(value, dict):
        return value
    (tag, body), = value.items()
    if tag == "f":
        return float.fromhex(body)
    if tag == "t":
        return tuple(_dec(v) for v in body)
    if tag == "d":
        return {_dec(k): _dec(v) for k, v in body}
    if tag == "dt":
        return datetime.datetime.fromisoformat(body)
    if tag == "date":
        return datetime.date.fromisoformat(body)
    if tag == "time":
        return datetime.time.fromisoformat(body)
    if tag == "td":
        return datetime.timedelta(days=body[0], seconds=body[1], microseconds=body[2])
    if tag == "dec":
        return Decimal(body)
    raise ValueError(f"unknown tag {tag!r}")


def encode_result(result: Result) -> str:
    """A Result as tagged JSON, every field, types and float bits kept.

    Raises:
        TypeError: a value of a type the encoding does not know.
    """
    return json.dumps({f.name: _enc(getattr(result, f.name))
                       for f in dataclasses.fields(result)}, ensure_ascii=True,
                      allow_nan=False)


def decode_result(text: str) -> Result:
    """The Result :func:`encode_result` wrote."""
    doc = json.loads(text)
    return Result(**{name: _dec(value) for name, value in doc.items()})
