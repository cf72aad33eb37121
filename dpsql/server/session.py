"""One login's session: settings, prepared statements, portals, and how each statement
is answered.

Everything here is synchronous and runs on a worker thread (``server.py`` owns the
socket). A statement is, in this order:

1. a session command (``SET``, ``SHOW``, ``RESET``, ``BEGIN``/``COMMIT``/``ROLLBACK``,
   ``DISCARD``, ``DEALLOCATE``...): answered here, nothing read, nothing spent;
2. a catalog probe (reads only ``pg_catalog``/``information_schema``, or no table):
   answered by :class:`~dpsql.server.catalog_sql.ProbeDB`, free;
3. anything else: dpsql's DB-API cursor (:mod:`dpsql.dbapi`), which answers an
   aggregate query with DP and charges the login's budget, answers a provably empty
   schema probe free, or refuses.

Bound parameters (``$1``...) become SQL literals through the DB-API's own binding
(:func:`dpsql.dbapi.bind_parameters`, via sqlglot's syntax tree), never by string
formatting.
"""

from __future__ import annotations

import ctypes
import decimal
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from dpsql import dbapi
from dpsql import errors as dperr
from dpsql.bigquery_options import lift_dp_options
from dpsql.probe import schema_probe
from dpsql.result import LEVEL_COLUMN, error_layout
from dpsql.server import ProtocolError, ServerError
from dpsql.server import protocol as pg
from dpsql.server.catalog_sql import SERVER_VERSION, ProbeDB, is_probe

#: dpsql error class → SQLSTATE; the nearest class in an error's MRO applies.
SQLSTATES: dict[type, str] = {
    dperr.ParameterValueError: "22023",  # a NaN or infinite parameter
    dperr.ParameterError: "42P02",       # parameters that do not fit the placeholders
    dperr.ParseError: "42601",
    dperr.UnknownTableError: "42P01",
    dperr.UnknownColumnError: "42703",
    dperr.UnsupportedQueryError: "0A000",
    dperr.UnboundedExpressionError: "0A000",
    dperr.AnalysisError: "0A000",
    dperr.PrivacyParameterError: "22023",
    dperr.BudgetExhaustedError: "53400",
    dperr.QueryCancelled: "57014",
    dperr.BackendError: "58000",
    dperr.PostprocessError: "XX000",
    dperr.LedgerError: "58000",
    dperr.CatalogError: "58000",
    ProtocolError: "08P01",
    ServerError: "58000",
    dperr.DpsqlError: "XX000",
    dbapi.DataError: "22023",
    dbapi.NotSupportedError: "0A000",
    dbapi.ProgrammingError: "42P02",
}

_CATALOG_OIDS = {"int": pg.INT8, "float": pg.FLOAT8, "string": pg.TEXT, "bool": pg.BOOL,
                 "date": pg.DATE, "timestamp": pg.TIMESTAMP}
_NUMERIC_OIDS = {pg.INT2, pg.INT4, pg.INT8, pg.FLOAT4, pg.FLOAT8, pg.NUMERIC}


class QueryError(Exception):
    """An error to send as ErrorResponse: SQLSTATE and the service's own message."""

    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


def sqlstate(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        if cls in SQLSTATES:
            return SQLSTATES[cls]
    return "XX000"


def as_query_error(exc: BaseException) -> QueryError:
    """Any exception as what the analyst may see: dpsql's own message, never backend
    text (dpsql's errors never carry it; anything else gets a fixed message)."""
    if isinstance(exc, QueryError):
        return exc
    if isinstance(exc, dperr.BudgetExhaustedError):
        # the ledger's message names the bound that stopped the query and what it has
        # left: the data set's remaining would tell the login others' spending
        need = re.match(r"query needs epsilon=\S+, delta=[^\s,]+", str(exc))
        return QueryError("53400", (need.group(0) + ", more than " if need else
                                    "this query needs more than ") +
                          "this login may spend now (SHOW dpsql.budget shows this "
                          "login's own remaining budget; the data set's total also "
                          "limits it)")
    if isinstance(exc, dperr.DpsqlError | dbapi.ProgrammingError | dbapi.DataError |
                  dbapi.NotSupportedError):
        return QueryError(sqlstate(exc), str(exc))
    if isinstance(exc, KeyboardInterrupt):
        return QueryError("57014", str(dperr.QueryCancelled()))
    return QueryError("XX000", "dpsql failed on this statement (an internal error, logged "
                               "for the data owner)")


@dataclass
class Outcome:
    """What a statement produced, ready to send."""

    tag: str
    columns: list[tuple[str, int]] | None = None  # None: no rows (NoData)
    rows: list[tuple] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    status: list[tuple[str, str]] = field(default_factory=list)  # ParameterStatus


@dataclass
class Prepared:
    sql: str
    param_oids: list[int]
    inferred: list[int] = field(default_factory=list)


@dataclass
class Portal:
    statement: Prepared
    params: list[Any]
    result_formats: list[int]
    described: list[tuple[str, int]] | None = None
    outcome: Outcome | None = None
    sent: int = 0


#: Settings reported to the client at start (and again when SET changes them).
REPORTED = ("server_version", "server_encoding", "client_encoding", "DateStyle",
            "TimeZone", "integer_datetimes", "standard_conforming_strings",
            "application_name", "is_superuser", "session_authorization", "IntervalStyle")

_DPSQL_SETTINGS = ("dpsql.epsilon", "dpsql.delta", "dpsql.error_columns",
                   "dpsql.max_groups", "dpsql.max_rows")

_TRUE = {"on", "true", "1", "yes", "t", "y"}
_FALSE = {"off", "false", "0", "no", "f", "n"}


def default_settings(login: str) -> dict[str, str]:
    return {"server_version": SERVER_VERSION, "server_encoding": "UTF8",
            "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "TimeZone": "UTC",
            "integer_datetimes": "on", "standard_conforming_strings": "on",
            "application_name": "", "is_superuser": "off", "session_authorization": login,
            "IntervalStyle": "postgres", "search_path": '"$user", public',
            "transaction_isolation": "read committed", "extra_float_digits": "1",
            "max_identifier_length": "63", "lc_collate": "C", "lc_ctype": "C",
            "default_transaction_isolation": "read committed",
            "default_transaction_read_only": "on", "transaction_read_only": "on",
            "statement_timeout": "0", "server_version_num": "150000"}


class Session:
    """A logged-in session: one dpsql DB-API connection for the login (its analyst),
    its settings, statements and portals.

    Args:
        database, catalog, ledger: the service's pins (from the config).
        login: the authenticated login; the session's analyst.
        options: ``-c name=value`` settings from the startup packet.
        defaults: the config's session defaults (epsilon, delta, error_columns).
    """

    def __init__(self, database: str, catalog: str, ledger, login: str, probe_db: ProbeDB,
                 startup: dict[str, str] | None = None, defaults: dict | None = None):
        self.login = login
        self.probe_db = probe_db
        self.conn = dbapi.connect(database, catalog, ledger=ledger, analyst=login)
        self.ledger = ledger
        self.cursor = self.conn.cursor()
        self.catalog = self.conn.catalog
        self.defaults = dict(default_settings(login))
        for key, value in (defaults or {}).items():
            self.defaults[f"dpsql.{key}"] = str(value).lower() if isinstance(
                value, bool) else str(value)
        self.settings = dict(self.defaults)
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.txn = "I"
        self._run_lock = threading.Lock()
        self._running: int | None = None  # thread id of a DP query that may be cancelled
        for key, value in (startup or {}).items():
            if key in ("application_name", "client_encoding", "DateStyle", "TimeZone",
                       "extra_float_digits", "search_path", "IntervalStyle"):
                self._set(key, value)
        for key, value in parse_options((startup or {}).get("options", "")):
            self._set(key, value)
        self.defaults.update({k: v for k, v in self.settings.items()
                              if k.startswith("dpsql.")})

    def close(self) -> None:
        self.conn.close()

    # -- cancellation ---------------------------------------------------------------

    def cancel(self) -> bool:
        """Stops the DP query this session runs, as Ctrl-C does in process.

        dpsql's pipeline turns a KeyboardInterrupt into :class:`QueryCancelled`: before
        the charge nothing is spent, after it the charge is kept and the ledger logs
        ``cancelled``; DuckDB's wait loop interrupts the engine. The interrupt is
        raised in the worker thread only while it is inside ``execute``.
        """
        with self._run_lock:
            if self._running is None:
                return False
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._running),
                                                       ctypes.py_object(KeyboardInterrupt))
            return True

    def _execute_dp(self, sql: str, params: list[Any]):
        cur = self.cursor
        cur.epsilon = self._float("dpsql.epsilon")
        cur.delta = self._float("dpsql.delta") or 0.0
        cur.max_groups = self._int("dpsql.max_groups")
        cur.max_rows = self._int("dpsql.max_rows")
        cur.error_columns = self._bool("dpsql.error_columns")
        done = False
        try:
            try:
                with self._run_lock:
                    self._running = threading.get_ident()
                try:
                    cur.execute(sql, params)
                except dperr.PrivacyParameterError as exc:
                    if str(exc).startswith("no epsilon"):  # in the service's own words
                        raise QueryError(
                            "22023", "no epsilon for this query: SET dpsql.epsilon = ..., "
                            "or write SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = "
                            "...) ...") from None
                    raise
                done = True
            finally:
                with self._run_lock:
                    self._running = None
        except KeyboardInterrupt:
            if not done:  # else: the answer came first; it stands (and was charged)
                raise dperr.QueryCancelled() from None
        return cur

    # -- settings -------------------------------------------------------------------

    def _float(self, key: str) -> float | None:
        value = self.settings.get(key)
        return None if value in (None, "", "default") else float(value)

    def _int(self, key: str) -> int | None:
        value = self.settings.get(key)
        return None if value in (None, "", "default") else int(value)

    def _bool(self, key: str) -> bool:
        return str(self.settings.get(key, "off")).lower() in _TRUE

    def _set(self, name: str, value: str) -> list[tuple[str, str]]:
        key = _canonical(name)
        low = key.lower()
        if low.startswith("dpsql."):
            if low not in _DPSQL_SETTINGS:
                raise QueryError("42704", f'unrecognized configuration parameter "{name}"; '
                                 f"dpsql's are {', '.join(_DPSQL_SETTINGS)}")
            value = value.strip()
            try:
                if low == "dpsql.error_columns":
                    if value.lower() not in _TRUE | _FALSE:
                        raise ValueError
                    value = "on" if value.lower() in _TRUE else "off"
                elif low in ("dpsql.epsilon", "dpsql.delta"):
                    x = float(value)
                    if (low == "dpsql.epsilon" and not 0 < x < float("inf")) or \
                            (low == "dpsql.delta" and not 0 <= x < 1):
                        raise ValueError
                else:
                    if int(value) < 1:
                        raise ValueError
            except ValueError:
                raise QueryError("22023", f"invalid value for {low}: {value!r}") from None
            self.settings[low] = value
            return []
        if low == "client_encoding" and _unquote(value.strip()).upper().replace(
                "-", "") not in ("UTF8", "UNICODE"):
            raise QueryError("22023", "only client_encoding UTF8 is supported")
        if low == "client_encoding":
            value = "UTF8"
        self.settings[key] = value
        return [(key, value)] if key in REPORTED else []

    # -- statements -----------------------------------------------------------------

    def run(self, sql: str, params: list[Any] | None = None,
            described: list[tuple[str, int]] | None = None) -> Outcome:
        """Answers one statement (runs on a worker thread).

        Raises:
            QueryError: to be sent as ErrorResponse.
        """
        params = params or []
        try:
            text = sql.strip().rstrip(";").strip()
            if not text:
                return Outcome("EMPTY")
            command = self._command(text)
            if command is not None:
                return command
            if self.txn == "E":
                raise QueryError("25P02", "current transaction is aborted, commands "
                                 "ignored until end of transaction block")
            if is_probe(text, self.catalog):
                _trace(text)
                cols, rows = self.probe_db.run(text, self.login, params)
                return Outcome(f"SELECT {len(rows)}", [(n, pg.oid_of(t)) for n, t in cols],
                               rows)
            return self._dp(text, params, described)
        except QueryError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every error becomes an ErrorResponse
            raise as_query_error(exc) from None

    def _dp(self, text: str, params: list[Any], described) -> Outcome:
        qmark, order = to_qmark(text)
        values = [params[i] for i in order] if params else []
        if order and max(order) >= len(params):
            raise QueryError("08P01", f"the statement needs {max(order) + 1} parameters, "
                             f"{len(params)} were bound")
        cur = self._execute_dp(qmark, values)
        oids = [pg.oid_of(d[1]) for d in cur.description]
        columns = [(d[0], oid) for d, oid in zip(cur.description, oids, strict=True)]
        rows = cur.fetchall()
        if described is not None and len(described) == len(columns):
            columns = described  # the types promised at Describe
        notes = list(cur.result.notes) if cur.result is not None else []
        eps, delta = cur.cost or (0.0, 0.0)
        if eps or delta:
            notes.append(f"dpsql: this answer spent epsilon={eps:g}, delta={delta:g}")
        return Outcome(f"SELECT {len(rows)}", columns, rows, notes)

    def describe(self, sql: str, params: list[Any] | None) -> list[tuple[str, int]] | None:
        """The row description of a statement, without spending anything.

        ``params`` None: not bound yet (Describe of a statement): NULLs stand in.
        Returns None for a statement that returns no rows.

        Raises:
            QueryError: the statement would be refused.
        """
        text = sql.strip().rstrip(";").strip()
        try:
            if not text:
                return None
            low = _first_words(text)
            if low[:1] == ["show"]:
                return self._show(text).columns
            if low[:1] and low[0] in _COMMANDS:
                return None
            if is_probe(text, self.catalog):
                n = count_params(text)
                values = params if params is not None else [None] * n
                _trace(text)
                cols, _ = self.probe_db.run(text, self.login, values)
                return [(name, pg.oid_of(t)) for name, t in cols]
            return self._describe_dp(text, params)
        except QueryError:
            raise
        except BaseException as exc:  # noqa: BLE001
            raise as_query_error(exc) from None

    def _describe_dp(self, text: str, params: list[Any] | None) -> list[tuple[str, int]]:
        body, options = lift_dp_options(text)
        qmark, order = to_qmark(body)
        if params is None:
            values = [None] * len(order)
        else:
            values = [params[i] if i < len(params) else None for i in order]
        bound = dbapi.bind_parameters(qmark, values)
        probe = schema_probe(bound, self.catalog)
        if probe is not None:
            return [(name, _CATALOG_OIDS.get(t, pg.TEXT)) for name, t in probe]
        eps = options.get("epsilon", self._float("dpsql.epsilon")) or 1.0
        delta = options.get("delta", self._float("dpsql.delta")) or 0.0
        conn = self.conn._open()
        explanation = conn.explain(bound, epsilon=eps, delta=delta,
                                   max_groups=options.get("max_groups",
                                                          self._int("dpsql.max_groups")),
                                   max_rows=options.get("max_rows",
                                                        self._int("dpsql.max_rows")))
        names = [o["column"] for o in explanation.outputs]
        noisy = [o["role"] == "noisy" for o in explanation.outputs]
        static = dbapi._static_type_codes(bound, self.catalog)
        if len(static) != len(names):
            static = [None] * len(names)
        oids = [pg.oid_of(t) if t else (pg.FLOAT8 if n else pg.TEXT)
                for t, n in zip(static, noisy, strict=True)]
        intervals = options.get("intervals", False)  # the DB-API's rule: implies errors
        if not (options.get("error_columns", self._bool("dpsql.error_columns")) or intervals):
            return list(zip(names, oids, strict=True))
        extra = (LEVEL_COLUMN,) if any(noisy) else ()
        out = []
        for kind, name, what in error_layout(names, noisy, extra, intervals):
            out.append((name, oids[what] if kind == "value" else pg.FLOAT8))
        return out

    def param_types(self, sql: str, declared: list[int]) -> list[int]:
        """OIDs for ParameterDescription: the declared ones, else inferred from the
        column a parameter is compared with (text when nothing tells)."""
        n = count_params(sql)
        out = [declared[i] if i < len(declared) and declared[i] not in (0, pg.UNKNOWN)
               else 0 for i in range(n)]
        if 0 in out:
            inferred = infer_param_types(sql, self.catalog)
            out = [o or inferred.get(i, pg.TEXT) for i, o in enumerate(out)]
        return out

    # -- session commands -----------------------------------------------------------

    def _command(self, text: str) -> Outcome | None:
        words = _first_words(text)
        if not words or words[0] not in _COMMANDS:
            return None
        head = words[0]
        if self.txn == "E" and head not in ("rollback", "abort", "commit", "end"):
            raise QueryError("25P02", "current transaction is aborted, commands ignored "
                             "until end of transaction block")
        if head in ("begin", "start"):
            self.txn = "T"
            return Outcome("BEGIN")
        if head in ("commit", "end"):
            tag = "ROLLBACK" if self.txn == "E" else "COMMIT"
            self.txn = "I"
            return Outcome(tag)
        if head in ("rollback", "abort"):
            if len(words) > 1 and words[1] == "to":
                if self.txn == "E":
                    self.txn = "T"
                return Outcome("ROLLBACK")
            self.txn = "I"
            return Outcome("ROLLBACK")
        if head == "savepoint":
            return Outcome("SAVEPOINT")
        if head == "release":
            return Outcome("RELEASE")
        if head == "set":
            return self._set_command(text)
        if head == "show":
            return self._show(text)
        if head == "reset":
            name = text.split(None, 1)[1].strip() if len(words) > 1 else ""
            if name.lower() == "all":
                changed = [(k, v) for k, v in self.defaults.items()
                           if k in REPORTED and self.settings.get(k) != v]
                self.settings = dict(self.defaults)
                return Outcome("RESET", status=changed)
            key = _canonical(name)
            if key in self.defaults:
                self.settings[key] = self.defaults[key]
            else:
                self.settings.pop(key, None)
            status = [(key, self.settings[key])] if key in REPORTED else []
            return Outcome("RESET", status=status)
        if head == "discard":
            if self.txn != "I":
                raise QueryError("25001", "DISCARD ALL cannot run inside a transaction block")
            self.settings = dict(self.defaults)
            self.statements.clear()
            self.portals.clear()
            return Outcome("DISCARD ALL")
        if head == "deallocate":
            rest = [w for w in words[1:] if w != "prepare"]
            if rest and rest[0] == "all":
                self.statements.clear()
            elif rest:
                self.statements.pop(text.split()[-1].strip('"'), None)
            return Outcome("DEALLOCATE")
        if head == "close":
            return Outcome("CLOSE CURSOR")
        if head in ("listen", "unlisten", "notify", "lock", "vacuum", "analyze"):
            raise QueryError("0A000", f"{head.upper()} is not supported: dpsql answers "
                             "aggregate SELECTs with differential privacy")
        return None

    def _set_command(self, text: str) -> Outcome:
        m = re.match(r"(?is)^set\s+(?:session\s+|local\s+)?(.*)$", text)
        rest = (m.group(1) if m else "").strip()
        low = rest.lower()
        if low.startswith(("transaction", "session characteristics")):
            return Outcome("SET")
        if low.startswith("time zone"):
            value = rest[len("time zone"):].strip()
            return Outcome("SET", status=self._set("TimeZone", _unquote(value)))
        m = re.match(r'(?s)^("?[\w.]+"?)\s*(?:=|\s+to\s+|\s)\s*(.*)$', rest, re.IGNORECASE)
        if not m:
            raise QueryError("42601", "cannot read this SET: write SET name = value")
        name, value = m.group(1).strip('"'), m.group(2).strip()
        if value.lower() == "default":
            key = _canonical(name)
            self.settings[key] = self.defaults.get(key, "")
            return Outcome("SET", status=[(key, self.settings[key])] if key in REPORTED
                           else [])
        value = ",".join(_unquote(v.strip()) for v in _split_commas(value))
        return Outcome("SET", status=self._set(name, value))

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

    def _show(self, text: str) -> Outcome:
        name = text.split(None, 1)[1].strip().rstrip(";").strip() if " " in text else ""
        low = name.lower().strip('"')
        if low == "dpsql.budget":
            (se, sd), (re_, rd), (te, td) = self.own_budget()
            cols = [("analyst", pg.TEXT), ("epsilon_spent", pg.FLOAT8),
                    ("delta_spent", pg.FLOAT8), ("epsilon_remaining", pg.FLOAT8),
                    ("delta_remaining", pg.FLOAT8), ("epsilon_total", pg.FLOAT8),
                    ("delta_total", pg.FLOAT8)]
            return Outcome("SHOW", cols, [(self.login, float(se), float(sd), float(re_),
                                           float(rd), float(te), float(td))])
        if low == "all":
            rows = [(k, v, "") for k, v in sorted(self.settings.items())]
            return Outcome("SHOW", [("name", pg.TEXT), ("setting", pg.TEXT),
                                    ("description", pg.TEXT)], rows)
        if low in ("transaction isolation level", "transaction_isolation"):
            return Outcome("SHOW", [("transaction_isolation", pg.TEXT)],
                           [("read committed",)])
        key = _canonical(low)
        if key not in self.settings:
            if key.lower() in _DPSQL_SETTINGS:
                return Outcome("SHOW", [(key, pg.TEXT)], [("",)])
            raise QueryError("42704", f'unrecognized configuration parameter "{name}"')
        return Outcome("SHOW", [(key, pg.TEXT)], [(self.settings[key],)])


def _trace(sql: str) -> None:
    """Appends a probe's SQL to the file named by ``DPSQL_SERVE_TRACE`` (how the test
    fixtures of each client's probes were recorded); nothing when it is unset."""
    path = os.environ.get("DPSQL_SERVE_TRACE")
    if path:
        with _TRACE_LOCK, open(path, "a", encoding="utf-8") as f:
            f.write(sql.strip() + "\n;;\n")


_TRACE_LOCK = threading.Lock()

_COMMANDS = {"begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release",
             "set", "show", "reset", "discard", "deallocate", "close", "listen", "unlisten",
             "notify", "lock", "vacuum", "analyze"}

_CANONICAL = {k.lower(): k for k in (*REPORTED, "search_path", "extra_float_digits")}


def _canonical(name: str) -> str:
    name = name.strip().strip('"')
    return _CANONICAL.get(name.lower(), name.lower())


def _first_words(text: str) -> list[str]:
    text = re.sub(r"(?s)^\s*(--[^\n]*\n\s*|/\*.*?\*/\s*)*", "", text)
    return [w.lower() for w in re.findall(r"[A-Za-z_]+", text[:80])[:3]]


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _split_commas(value: str) -> list[str]:
    out, cur, quote = [], "", None
    for ch in value:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote, cur = ch, cur + ch
        elif ch == ",":
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def parse_options(options: str) -> list[tuple[str, str]]:
    """``-c name=value --name=value`` (libpq's ``options``) → pairs.

    >>> parse_options("-c dpsql.error_columns=on --dpsql.epsilon=0.5")
    [('dpsql.error_columns', 'on'), ('dpsql.epsilon', '0.5')]
    """
    out = []
    words = re.findall(r"(?:\\.|\S)+", options or "")
    i = 0
    while i < len(words):
        w = words[i].replace("\\ ", " ")
        if w == "-c" and i + 1 < len(words):
            w, i = "--" + words[i + 1].replace("\\ ", " "), i + 1
        elif w.startswith("-c"):
            w = "--" + w[2:]
        if w.startswith("--") and "=" in w:
            k, v = w[2:].split("=", 1)
            out.append((k.replace("-", "_") if not k.startswith("dpsql") else k, v))
        i += 1
    return out


def _tokens(sql: str):
    return sqlglot.tokenize(sql, read="postgres")


def to_qmark(sql: str) -> tuple[str, list[int]]:
    """``$n`` placeholders → ``?`` in text order, and which parameter each one is.

    >>> to_qmark("SELECT COUNT(*) FROM t WHERE a > $2 AND b = '$1' AND c < $1")
    ("SELECT COUNT(*) FROM t WHERE a > ? AND b = '$1' AND c < ?", [1, 0])
    """
    if "$" not in sql:
        return sql, []
    spans: list[tuple[int, int, int]] = []
    try:
        tokens = _tokens(sql)
    except sqlglot.errors.SqlglotError:
        return sql, []
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.PARAMETER and i + 1 < len(tokens) and \
                tokens[i + 1].token_type == TokenType.NUMBER and tokens[i + 1].start == \
                tok.end + 1 and tokens[i + 1].text.isdigit():
            spans.append((tok.start, tokens[i + 1].end + 1, int(tokens[i + 1].text) - 1))
        elif tok.token_type == TokenType.PARAMETER and re.fullmatch(r"\$\d+", tok.text):
            spans.append((tok.start, tok.end + 1, int(tok.text[1:]) - 1))
    if not spans:
        return sql, []
    out, last, order = [], 0, []
    for start, end, index in spans:
        out.append(sql[last:start] + "?")
        last = end
        order.append(index)
    out.append(sql[last:])
    return "".join(out), order


def count_params(sql: str) -> int:
    _, order = to_qmark(sql)
    return max(order) + 1 if order else 0


def infer_param_types(sql: str, catalog) -> dict[int, int]:
    """Parameter index → OID, from the catalog column each ``$n`` is compared with."""
    columns: dict[str, str] = {}
    for table in catalog.tables.values():
        for c in table.columns.values():
            columns.setdefault(c.name.lower(), c.type)
    try:
        body, _ = lift_dp_options(sql)
        tree = sqlglot.parse_one(body, read="postgres")
    except Exception:  # noqa: BLE001 - inference is a nicety: text when it fails
        return {}
    out: dict[int, int] = {}
    for node in tree.find_all(exp.Parameter):
        try:
            index = int(node.name) - 1
        except ValueError:
            continue
        parent = node.parent
        if isinstance(parent, exp.Limit | exp.Offset):
            out[index] = pg.INT8
            continue
        scope = parent.parent if isinstance(parent, exp.Tuple | exp.Paren) else parent
        for col in (scope.find_all(exp.Column) if scope is not None else ()):
            kind = columns.get(col.name.lower())
            if kind is not None:
                out[index] = _CATALOG_OIDS.get(kind, pg.TEXT)
                break
    return out


def coerce(value: Any, oid: int) -> Any:
    """A text parameter of unspecified type, read as the type its context needs."""
    if not isinstance(value, str) or oid not in _NUMERIC_OIDS | {pg.BOOL, pg.DATE,
                                                                 pg.TIMESTAMP}:
        return value
    try:
        if oid in (pg.INT2, pg.INT4, pg.INT8) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
            return int(value)
        if oid in _NUMERIC_OIDS:
            d = decimal.Decimal(value.strip())
            return float(d) if oid in (pg.FLOAT4, pg.FLOAT8) else d
        return pg.parse_text(value, oid)
    except (ValueError, decimal.InvalidOperation):
        return value


__all__ = ["Outcome", "Portal", "Prepared", "QueryError", "Session", "as_query_error",
           "coerce", "parse_options", "to_qmark"]
