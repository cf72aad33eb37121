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
import os
import threading
from typing import Any

from dpsql import dbapi
from dpsql import errors as dperr
from dpsql.backends import watchdog
from dpsql.bigquery_options import lift_dp_options
from dpsql.probe import schema_probe
from dpsql.result import LEVEL_COLUMN, error_layout
from dpsql.server import protocol as pg
from dpsql.server.catalog_sql import ProbeDB, is_probe
from dpsql.server.commands import SessionCommands, first_words, is_command
from dpsql.server.parameters import (
    CATALOG_OIDS,
    coerce,
    count_params,
    infer_param_types,
    to_qmark,
)
from dpsql.server.settings import TRUE, default_settings, parse_options
from dpsql.server.sqlstate import QueryError, as_query_error
from dpsql.server.statements import Outcome, Portal, Prepared


class Session(SessionCommands):
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
        """Closes the session's DB-API connection."""
        self.conn.close()

    # -- cancellation ---------------------------------------------------------------

    def cancel(self) -> bool:
        """Stops the DP query this session runs, as Ctrl-C does in process.

        dpsql's pipeline turns a KeyboardInterrupt into :class:`QueryCancelled`: before
        the charge nothing is spent, after it the charge is kept and the ledger logs
        ``cancelled``. The statement itself, which runs in the worker thread's call into
        DuckDB where no Python runs, is interrupted by the watchdog
        (:func:`dpsql.backends.watchdog.cancel_thread`). The interrupt is raised in the
        worker thread only while it is inside ``execute``.
        """
        with self._run_lock:
            if self._running is None:
                return False
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._running),
                                                       ctypes.py_object(KeyboardInterrupt))
            watchdog.cancel_thread(self._running)
            return True

    def _execute_dp(self, sql: str, params: list[Any]):
        """Runs a DP query on the session's cursor with its settings; cancellable
        (:meth:`cancel`) while it runs. Returns the cursor."""
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
        """A number setting (None: not set)."""
        value = self.settings.get(key)
        return None if value in (None, "", "default") else float(value)

    def _int(self, key: str) -> int | None:
        """A whole-number setting (None: not set)."""
        value = self.settings.get(key)
        return None if value in (None, "", "default") else int(value)

    def _bool(self, key: str) -> bool:
        """An on/off setting."""
        return str(self.settings.get(key, "off")).lower() in TRUE

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
        """A statement for dpsql's pipeline: answered with DP (the notes say what it
        spent), answered free, or refused."""
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
            low = first_words(text)
            if low[:1] == ["show"]:
                return self._show(text, low).columns
            if is_command(low):
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
        """The columns a statement for dpsql's pipeline would answer with, from its
        explanation (nothing is spent), with the error columns it asks for."""
        body, options = lift_dp_options(text)
        qmark, order = to_qmark(body)
        if params is None:
            values = [None] * len(order)
        else:
            values = [params[i] if i < len(params) else None for i in order]
        bound = dbapi.bind_parameters(qmark, values)
        probe = schema_probe(bound, self.catalog)
        if probe is not None:
            return [(name, CATALOG_OIDS.get(t, pg.TEXT)) for name, t in probe]
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


def _trace(sql: str) -> None:
    """Appends a probe's SQL to the file named by ``DPSQL_SERVE_TRACE`` (how the test
    fixtures of each client's probes were recorded); nothing when it is unset."""
    path = os.environ.get("DPSQL_SERVE_TRACE")
    if path:
        with _TRACE_LOCK, open(path, "a", encoding="utf-8") as f:
            f.write(sql.strip() + "\n;;\n")


_TRACE_LOCK = threading.Lock()


__all__ = ["Outcome", "Portal", "Prepared", "QueryError", "Session", "as_query_error",
           "coerce", "default_settings", "parse_options", "to_qmark"]
