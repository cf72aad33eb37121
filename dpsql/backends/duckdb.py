"""DuckDB, embedded: the default backend.

dpsql opens its own connection with the least rights DuckDB offers: the data file
attached read-only, with ``enable_external_access = false`` (no files, no network, no
extensions), no Python replacement scans, no extension autoloading, no progress bar,
and the configuration locked so the rewritten SQL cannot change it.
When handed an open ``DuckDBPyConnection`` it works on a cursor of it (same database, its
own state) and cannot lock that connection's settings; prefer a path for deployments.

**Its own DuckDB instance.** DuckDB shares one database instance per file among the
connections of a process, and refuses a second connection whose configuration differs
("Can't open a connection to same database file with a different configuration"). So a
data owner's own ``duckdb.connect('pums.duckdb', read_only=True)`` and dpsql's
locked-down connection could not both be open in one process (a notebook). dpsql
therefore never opens the file through that shared instance: it starts an in-memory
instance of its own (external access still on, extension autoloading off), attaches the
file ``READ_ONLY`` (``TYPE duckdb``, by its absolute path, so no ``s3://`` or ``md:``
prefix can be read into it), makes it the default database, detaches the in-memory one,
and only then switches external access off and locks the configuration. Nothing runs on
it in between, so the analyst's SQL only ever meets the locked instance. The result has
every protection of the old ``connect(path, read_only=True, config=_LOCKED)``: the data
file is read-only, files, network and extensions are refused, settings are locked; like
before, only ``TEMP`` objects are writable (and dpsql runs nothing but output-checked
SELECTs). DuckDB keeps a process-wide registry of attached files: read-only attachments
coexist (the owner's read-only connection, in either order), while a writer (the owner's
read-write connection, or :func:`dpsql.datasets.load_pums`) and dpsql's attachment
exclude each other with a clear error, never a stale read.

One statement, bound not executed: every SQL text is first split by DuckDB's own parser
(``extract_statements``) and must be exactly one SELECT. The pre-charge check binds that
one statement into a lazy relation (names and types, nothing runs) and plans it
(``EXPLAIN`` of that statement: constant folding, nothing runs); only ``execute``
runs it, watched: dpsql interrupts it at the owner's statement timeout
(``limits: statement_timeout_seconds``) or on Ctrl-C. Engine error texts go to
the owner's log (:mod:`dpsql.backends._boundary`), never to the analyst.

**Cancelling.** DuckDB looks for Ctrl-C only between the tasks it runs on the calling
thread, so a long query could keep running for many seconds after it. ``execute`` runs
the statement on the calling thread while the process's watchdog
(:mod:`dpsql.backends.watchdog`) watches it: it interrupts DuckDB (``interrupt()``,
which stops every worker) at the deadline, and at once on Ctrl-C (a notebook's
interrupt, ``_thread.interrupt_main``), whose signal reaches it through Python's wakeup
fd while the main thread is inside DuckDB. Where that fd or SIGINT's handler is the
application's own, a statement of the main thread runs instead on the connection's
query thread (:mod:`dpsql.backends.query_thread`) while the main thread waits in Python,
where the ``KeyboardInterrupt`` interrupts DuckDB. Either way the interrupt raises
:class:`~dpsql.errors.QueryCancelled`, as does DuckDB's own interrupt error.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from dpsql.backends import _boundary, watchdog
from dpsql.backends.base import Backend
from dpsql.backends.duckdb_total import TOTAL
from dpsql.backends.query_thread import Job, QueryThread
from dpsql.errors import BackendError, QueryCancelled
from dpsql.limits import Limits

#: The configuration dpsql's DuckDB instance ends up with (a connection opened with it,
#: read-only, can share an in-memory instance's settings in tests).
_LOCKED = {"enable_external_access": False, "python_enable_replacements": False,
           "lock_configuration": True}
#: Set when dpsql's own instance starts (before the file is attached): nothing may be
#: installed or loaded behind dpsql's back, and nothing replaces a table by a Python object.
_START = {"python_enable_replacements": False, "autoinstall_known_extensions": False,
          "autoload_known_extensions": False}
#: Session settings of dpsql's connection: no progress bar printed into the caller's
#: output on long queries; DuckDB's ``common_subplan`` optimizer off (:data:`_NO_SUBPLANS`).
_SESSION = ("SET enable_progress_bar = false", "SET enable_progress_bar_print = false",
            "SET disabled_optimizers = 'common_subplan'")
#: Why ``common_subplan`` is off. It finds subtrees a query repeats and computes them once;
#: dpsql's rewrite repeats the analyst's FROM by design (the per-user CTE beside the values
#: a COUNT(DISTINCT) keeps, the L0 step's subqueries), and the optimizer's canonical form
#: maps two aliases of one table onto one (upstream: duckdb/duckdb#25819, #24624, #25170,
#: #24781, #23679). On DuckDB 2.0.1 two LEFT JOINs of one public table with different ON
#: conditions came out as one: the neighbour fuzzer (seed 12) found a COUNT(DISTINCT)
#: whose group moved by 2 > L∞ 1 between neighbours, because the optimizer merged them
#: only when the added user's rows (NULL user ids, joined by nothing) changed the table's
#: statistics. A wrong answer that depends on other rows is not bounded by any
#: sensitivity, so the optimizer is off on every instance dpsql opens (the regression case
#: ``main-class4-common-subplan`` in ``tests/privacy/test_regressions.py``). The setting is
#: GLOBAL in DuckDB: on a connection the caller passes in, it changes that instance too
#: (and where the instance's configuration is locked, the owner's log says it stayed on).
_NO_SUBPLANS = _SESSION[-1]
#: Statements that lock dpsql's instance down, run last.
_LOCK = ("SET enable_external_access = false", "SET lock_configuration = true")
#: How many split statements a backend keeps (the plan cache keeps 256 plans).
_STATEMENTS_KEPT = 256

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_RESERVED_ALIASES = {"memory", "system", "temp", "main"}

#: Why an open failed, in words the analyst may see (the engine's text goes to the log).
_IN_USE = ("it is open for writing in this Python process (a duckdb.connect(...) without "
           "read_only=True, or load_pums running): close that connection, or open it "
           "with duckdb.connect(path, read_only=True), which can stay open beside dpsql")
_LOCKED_BY_OTHER = ("another process has it open for writing (DuckDB allows one writer "
                    "and no readers beside it): close that process's connection")

def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DuckDBBackend(Backend):
    dialect = "duckdb"
    allow = None  # set below, after the allow-list is defined
    supports_hash = True
    supports_no_external_access = True
    supports_grid_sums = True  # BIGINT sums accumulate in HUGEINT: exact (dpsql.grid_units)
    supports_decimal_sums = True  # DECIMAL sums accumulate in 128 bits: exact

    def __init__(self, database: str | Path | duckdb.DuckDBPyConnection,
                 limits: Limits | None = None):
        self.limits = limits or Limits()
        if isinstance(database, duckdb.DuckDBPyConnection):
            self._con = database.cursor()
            self.name = "duckdb connection"
            for statement in _SESSION:
                try:  # the caller's instance may have locked its settings: then keep them
                    self._con.execute(statement)
                except duckdb.Error as exc:
                    if statement == _NO_SUBPLANS:
                        _boundary.log_failure(
                            "the caller's DuckDB connection", "switching off the "
                            "common_subplan optimizer (wrong answers: duckdb.py)", exc)
        elif str(database) == ":memory:":
            self._con = duckdb.connect(":memory:", config=dict(_START))
            for statement in (*_SESSION, *_LOCK):
                self._con.execute(statement)
            self.name = ":memory:"
        else:
            self._con = self._open_file(Path(database))
            self.name = str(database)
        self._lock = threading.Lock()
        self._worker = QueryThread("dpsql-duckdb-query")
        self._on_thread = False  # the last statement ran on the query thread
        self._watch: watchdog.Watch | None = None  # the running statement's watch
        self._bases: set[str] | None = None  # frozen_row's base tables
        self._collations: dict[str, set[str]] = {}
        self._schema_version: str | None = None
        self._columns: dict[str, dict[str, str] | None] = {}
        # SQL text -> its one SELECT statement as DuckDB's parser split it: a cached plan
        # runs the same text again, and a statement binds afresh each time it runs
        self._statements: dict[str, Any] = {}
        # (SQL text, schema version) -> the columns check() bound and planned it to
        self._checked: dict[tuple[str, str], list[tuple[str, str]]] = {}

    @staticmethod
    def _open_file(path: Path) -> duckdb.DuckDBPyConnection:
        """dpsql's own instance with ``path`` attached read-only (see the module docstring).

        Raises:
            BackendError: the file does not exist, is no DuckDB file, or is open for
                writing (in this process or another one); the message says what to close.
        """
        if not path.exists():
            raise BackendError(f"DuckDB database file {str(path)!r} does not exist")
        absolute = path.expanduser().resolve()
        if not path.is_file() or any(ord(c) < 32 or c in "\x7f" for c in str(absolute)):
            raise BackendError(f"{str(path)!r} is not a DuckDB database file")
        alias = path.stem if _PLAIN.fullmatch(path.stem) and \
            path.stem.lower() not in _RESERVED_ALIASES else "dpsql_database"
        failure = None
        con = None
        try:
            con = duckdb.connect(":memory:", config={
                **_START, "temp_directory": str(absolute) + ".tmp"})
            con.execute(f"ATTACH {_literal(str(absolute))} AS {_quote(alias)} "
                        "(READ_ONLY, TYPE duckdb)")
            con.execute(f"USE {_quote(alias)}")
            con.execute("DETACH memory")
            for statement in (*_SESSION, *_LOCK):
                con.execute(statement)
            return con
        except duckdb.Error as exc:
            failure = exc
        if con is not None:
            con.close()
        if isinstance(failure, duckdb.ResourceInUseException):
            reason = _IN_USE
        elif isinstance(failure, duckdb.IOException) and "lock" in str(failure).lower():
            reason = _LOCKED_BY_OTHER
        else:  # the engine's text to the owner's log, a fixed message to the caller
            raise _boundary.open_failed(f"DuckDB database {str(path)!r}", failure)
        _boundary.log_failure(f"DuckDB database {str(path)!r}", "opening the connection",
                              failure)
        err = BackendError(f"cannot open DuckDB database {str(path)!r}: {reason}")
        err.charged = False
        raise err

    # -- metadata ---------------------------------------------------------------------------

    def _metadata(self, table: str, sql: str, params: list) -> list[tuple]:
        failure = None
        with self._lock:
            try:
                return self._con.execute(sql, params).fetchall()
            except duckdb.Error as exc:
                failure = exc
        raise _boundary.schema_failed(self.name, table, failure)

    def columns(self, table: str) -> dict[str, str] | None:
        # a schema that cannot change (see schema_version) is read once per table
        frozen = self.name != "duckdb connection"
        if frozen and table.lower() in self._columns:
            found = self._columns[table.lower()]
            return None if found is None else dict(found)
        rows = self._metadata(
            table,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND lower(table_name) = ? "
            "ORDER BY ordinal_position",
            [table.lower()],
        )
        out = {name.lower(): dtype for name, dtype in rows} or None
        if frozen:
            self._columns[table.lower()] = None if out is None else dict(out)
        return out

    def schema_version(self) -> str:
        """SHA-256 of the current schema's DDL: every table's and view's ``CREATE``
        text as DuckDB keeps it (column types, NOT NULL, PRIMARY KEY/UNIQUE, COLLATE),
        the current schema and the ``default_collation`` setting. Metadata only.

        A file dpsql opened itself is attached read-only and DuckDB's file lock keeps
        writers out while it is open, and dpsql's own ``:memory:`` database has no
        other handle: their schema cannot change, so it is read once. A connection the
        caller passed in can change at any time (its owner holds it): read every time
        (about 0.7 ms).
        """
        frozen = self.name != "duckdb connection"
        if frozen and self._schema_version is not None:
            return self._schema_version
        rows = self._metadata(
            "(schema)",
            "SELECT 't', schema_name, table_name, sql FROM duckdb_tables() "
            "WHERE database_name = current_database() "
            "UNION ALL SELECT 'v', schema_name, view_name, sql FROM duckdb_views() "
            "WHERE database_name = current_database() AND NOT internal "
            "UNION ALL SELECT 's', current_schema(), current_setting('default_collation'), "
            "NULL ORDER BY ALL", [])
        version = hashlib.sha256(repr(rows).encode()).hexdigest()
        if version != self._schema_version:
            self._collations.clear()  # measured from the old schema
        self._schema_version = version
        return version

    def frozen_row(self, expression: exp.Expression) -> tuple | None:
        """A file dpsql attached read-only (DuckDB's file lock keeps writers out while
        it is open) and dpsql's own ``:memory:`` cannot change; a caller's connection
        can (None)."""
        if self.name == "duckdb connection":
            return None
        # a view is computed afresh by every statement (random(), now(), another
        # table): only base tables hold what was counted (attack review), and only
        # those without a generated column (_base_tables)
        read = {t.name for t in expression.find_all(exp.Table)}
        # ASCII only: Python's lower() folds all of Unicode, DuckDB's names do not (a
        # view "i̇x" passed as the base table "İx"; attack review)
        if not read or not all(n.isascii() for n in read) \
                or not {n.lower() for n in read} <= self._base_tables():
            return None
        _, rows = self.execute(expression)
        return tuple(rows[0])

    def _base_tables(self) -> set[str]:
        """The current schema's base tables (not views) with no generated column,
        lower-cased; read once, as the schema of a frozen instance cannot change.

        A VIRTUAL generated column is computed on every read, and DuckDB takes
        ``now()`` or ``random()`` there (attack review: a segment that turned into a
        value outside its domain some seconds after the check, and a one-per-user
        column that split every user in two, on the same connection). Such a table is
        a view by another name. Only ASCII names, none that a view's name folds to
        (:meth:`frozen_row` compares them lower-cased).
        """
        if self._bases is None:
            views = {name.lower() for (name,) in self._metadata(
                "(views)", "SELECT view_name FROM duckdb_views() WHERE database_name = "
                "current_database() AND schema_name = current_schema()", [])}
            self._bases = {name.lower() for (name,) in self._metadata(
                "(schema)", "SELECT table_name FROM duckdb_tables() WHERE database_name = "
                "current_database() AND schema_name = current_schema() AND table_name NOT "
                "IN (SELECT table_name FROM information_schema.columns WHERE table_catalog "
                "= current_database() AND table_schema = current_schema() AND "
                "is_generated <> 'NEVER')", []) if name.isascii()} - views
        return self._bases

    def _finals_version(self) -> str | None:
        """The schema version read once, for a file or database whose schema cannot
        change behind dpsql (:meth:`schema_version`); None for a connection the caller
        passed in."""
        return self._schema_version if self.name != "duckdb connection" else None

    def unique_columns(self, table: str) -> set[tuple[str, ...]]:
        """PRIMARY KEY and UNIQUE column sets whose columns are all NOT NULL.

        A UNIQUE constraint lets any number of rows hold NULL, so it proves one row per
        key only on NOT NULL columns (a PRIMARY KEY's columns are NOT NULL implicitly).
        """
        keys = self._metadata(
            table,
            "SELECT constraint_column_names FROM duckdb_constraints() "
            "WHERE database_name = current_database() AND schema_name = current_schema() "
            "AND lower(table_name) = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
            [table.lower()])
        not_null = {name.lower() for (name,) in self._metadata(
            table,
            "SELECT column_name FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = current_schema() "
            "AND lower(table_name) = ? AND NOT is_nullable", [table.lower()])}
        out = set()
        for (cols,) in keys:
            cols = tuple(c.lower() for c in cols)
            if cols and all(c in not_null for c in cols):
                out.add(cols)
        return out

    def nonbinary_collation_columns(self, table: str) -> set[str]:
        """String columns of ``table`` whose equality and grouping are not byte-exact.

        DuckDB keeps a column's collation in its type but shows it in no metadata view,
        so it is measured: each string column's values (none: ``WHERE false``) are
        unioned with the probes of :data:`~dpsql.backends._boundary.COLLATION_PROBES`
        (pairwise different bytes); a column under which fewer of them stay distinct
        compares some different strings as equal. The union takes the column's
        collation (and a ``default_collation`` setting applies to every column). Reads
        no rows.
        """
        key = table.lower()
        if key in self._collations:
            return set(self._collations[key])
        names = self._metadata(
            table,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND lower(table_name) = ? "
            "ORDER BY ordinal_position", [key])
        strings = [(t, c) for t, c, dtype in names if dtype.upper() == "VARCHAR"]
        out: set[str] = set()
        if strings:
            actual = strings[0][0]
            columns = ", ".join(_quote(c) for _, c in strings)
            probes = ", ".join("(" + ", ".join([_literal(p)] * len(strings)) + ")"
                               for p in _boundary.COLLATION_PROBES)
            counts = ", ".join(f"count(DISTINCT {_quote(c)})" for _, c in strings)
            rows = self._metadata(
                table,
                f"SELECT {counts} FROM (SELECT {columns} FROM {_quote(actual)} WHERE false "
                f"UNION ALL SELECT * FROM (VALUES {probes}))", [])
            out = {c.lower() for (_, c), n in zip(strings, rows[0], strict=True)
                   if n != len(_boundary.COLLATION_PROBES)}
        self._collations[key] = out
        return set(out)

    # -- queries -----------------------------------------------------------------------------

    def _one_select(self, sql: str, stage: str):
        """The single SELECT statement of ``sql``, as split by DuckDB's own parser."""
        failure = None
        try:
            statements = self._con.extract_statements(sql)
        except duckdb.Error as exc:
            failure = exc
        if failure is not None:
            if stage == "check":
                raise _boundary.plan_failed(self.name, failure, sql)
            raise _boundary.run_failed(self.name, failure, sql)
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            kinds = ", ".join(s.type.name for s in statements) or "none"
            raise _boundary.not_one_select(self.name, stage, f"statements: {kinds}", sql)
        return statements[0]

    def bind_types(self, sql: str) -> list[str]:
        """The output types of one SELECT, bound over no data (the totality check's
        probes: :func:`dpsql.backends.probe_types.expression_types`)."""
        with self._lock:
            statements = self._con.extract_statements(sql)
            if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
                raise ValueError("a probe is one SELECT")
            return [str(t) for t in self._con.sql(statements[0]).types]

    def check(self, expression: exp.Expression) -> list[tuple[str, str]]:
        """Binds and plans the tree's SQL (reads nothing); its (name, type) columns.

        The totality and output checks of :meth:`to_sql` run on every call. What DuckDB
        says of the text (one SELECT; its columns; that it binds and plans) is
        remembered per text and schema version, for the instances whose schema cannot
        change behind dpsql (:meth:`schema_version` reads it once): DuckDB's binder and
        planner read nothing but the text, the catalog's schema and the locked settings,
        and none of the text's functions is volatile at planning, so a text that bound
        and planned once binds and plans again to the same columns. Only successes are
        kept (a refusal is not a function of the text alone if DuckDB ran out of memory);
        the L0 step's seed is stable per connection and query
        (:func:`dpsql.asking.l0_seed`), so a query asked again writes the same text.
        """
        sql = self.to_sql(expression)  # may refuse a construct (not charged)
        frozen = self.name != "duckdb connection" and self._schema_version is not None
        key = (sql, self._schema_version) if frozen else None
        failure = None
        with self._lock:
            known = self._checked.get(key) if key is not None else None
            if known is not None:
                return list(known)
            statement = self._one_select(sql, "check")
            try:
                # a relation over one SELECT statement is bound (names, types), not run
                relation = self._con.sql(statement)
                schema = [(name, str(dtype))
                          for name, dtype in zip(relation.columns, relation.types, strict=True)]
                # planning folds constants (a literal the type cannot hold fails here,
                # free); EXPLAIN runs nothing. It plans the split statement's own text
                # (one SELECT), exactly what execute runs (relation.explain() planned it
                # wrapped in SELECT * FROM (...)), and writes the plan as JSON: the
                # same planning in about half the time of the text boxes
                self._con.execute("EXPLAIN (FORMAT json) " + statement.query).fetchall()
            except duckdb.Error as exc:
                failure = exc
            else:
                if key is not None:
                    if len(self._checked) >= _STATEMENTS_KEPT:
                        self._checked.pop(next(iter(self._checked)))
                    self._checked[key] = schema
                    if len(self._statements) >= _STATEMENTS_KEPT:
                        self._statements.pop(next(iter(self._statements)))
                    self._statements[sql] = statement  # execute() runs this text next
                return list(schema)
        raise _boundary.plan_failed(self.name, failure, sql)

    def execute(self, expression: exp.Expression) -> tuple[list[str], list[tuple]]:
        sql = self.to_sql(expression)
        with self._lock:
            statement = self._statements.get(sql)
            if statement is None:
                statement = self._one_select(sql, "execute")
                if len(self._statements) >= _STATEMENTS_KEPT:
                    self._statements.pop(next(iter(self._statements)))
                self._statements[sql] = statement
            outcome, timed_out = self._run_watched(statement)
        if timed_out:
            raise _boundary.run_failed(
                self.name, f"statement timeout ({self.limits.statement_timeout_seconds:g} s)",
                sql)
        if isinstance(outcome, BaseException):
            if isinstance(outcome, duckdb.InterruptException | KeyboardInterrupt) or (
                    type(outcome) is RuntimeError and str(outcome) == "Query interrupted"):
                raise QueryCancelled()  # interrupted by someone else, or DuckDB's own check
            raise _boundary.run_failed(self.name, outcome, sql)
        return outcome

    def _run(self, statement) -> tuple[list[str], list[tuple]] | BaseException:
        """Runs one statement; returns (columns, rows), or the exception it raised; marks
        the statement's watch done as it returns (:mod:`.watchdog`)."""
        watch = self._watch
        try:
            cur = self._con.execute(statement)
            return [d[0] for d in cur.description], cur.fetchall()
        except BaseException as exc:  # noqa: BLE001 - returned, never printed by a thread
            return exc
        finally:
            if watch is not None:
                watch.done = True

    def _run_watched(self, statement):
        """:meth:`_run` on this thread, watched (:mod:`.watchdog`: the statement timeout,
        another thread's cancel and Ctrl-C interrupt it); returns (outcome, timed out).
        Where Ctrl-C cannot be watched so (the main thread under the application's own
        SIGINT handler or wakeup fd), on the query thread (:meth:`_run_on_thread`).

        A statement interrupted at its deadline is timed out; one that ended with rows
        is not, however late the watchdog looked. The cleanup is written inline: a
        ``KeyboardInterrupt`` can land on entry to any Python function, and what it would
        leave undone is harmless (see the watchdog's docstring).
        """
        main = threading.current_thread() is threading.main_thread()
        if main and not watchdog.catch_sigint():
            self._on_thread = True
            return self._run_on_thread(statement)
        self._on_thread = False
        watch = None
        try:
            watch = self._watch = watchdog.begin(
                self, self.limits.statement_timeout_seconds, main)
            outcome = self._run(statement)
        finally:
            self._watch = None
            # without a watch (a Ctrl-C inside begin): whatever begin registered for this
            # connection, whose statements run one at a time under its lock
            watchdog.end(self, watch)
        return outcome, watch.timed_out and isinstance(outcome, BaseException)

    def interrupt_statement(self) -> None:
        """Stops the statement running on this connection (the watchdog's call)."""
        self._con.interrupt()

    def _run_on_thread(self, statement):
        """:meth:`_run` on the connection's query thread (:mod:`.query_thread`, started
        by :meth:`ready` before the charge) while this thread waits for it; returns
        (outcome, timed out).

        The wait ends the query (``interrupt()``) when the owner's statement timeout
        passes, and on ``KeyboardInterrupt`` (DuckDB stops within milliseconds; then
        :class:`QueryCancelled`). Whatever ends the wait — Ctrl-C before the job began,
        a second Ctrl-C, ``SystemExit`` — the job is cancelled if it has not begun, else
        interrupted until it has stopped, before this returns or raises: no query runs
        on after its charge is settled, and the connection is free for the next one.
        The thread returns
        every exception instead of raising it (``threading.excepthook`` would print it,
        backend text included, on the analyst's terminal).
        """
        timeout = self.limits.statement_timeout_seconds
        deadline = time.monotonic() + timeout if timeout > 0 else float("inf")
        ended: BaseException | None = None
        timed_out = False
        job = Job(lambda: self._run(statement))  # before the try: _stop always has it
        try:
            self._worker.put(job)
            # a timed wait: _thread.interrupt_main() sets Python's flag without a signal,
            # so an untimed one would not notice it until the query ended
            while not job.done.wait(0.05):
                if time.monotonic() > deadline:
                    timed_out = True
                    break
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the cleanup
            ended = exc
        self._stop(job)
        if ended is not None:
            if isinstance(ended, KeyboardInterrupt):
                raise QueryCancelled() from None
            raise ended
        return job.result, timed_out

    def _stop(self, job: Job) -> None:
        """Interrupts the job until it has finished (a job not yet begun never will)."""
        while not job.done.is_set():
            try:
                if job.cancel():
                    return
                # again and again: an interrupt() that lands before the statement
                # begins is not kept for it
                self._con.interrupt()
                job.done.wait(0.05)
            except KeyboardInterrupt:  # another Ctrl-C: keep stopping it
                continue

    def ready(self) -> None:
        """Starts the watchdog and, where the statement will run on the query thread
        (the main thread under the application's SIGINT handler or wakeup fd,
        :func:`~dpsql.backends.watchdog.catch_sigint`), that thread: nothing starts a
        thread after the charge."""
        try:
            watchdog.ready()
            if threading.current_thread() is threading.main_thread() \
                    and not watchdog.catch_sigint():
                self._worker.ready()
        except RuntimeError as exc:  # the process is out of threads
            raise _boundary.not_ready(self.name, exc) from None

    def close(self) -> None:
        with self._lock:
            watchdog.end(self)
            self._worker.close()
            self._con.close()


# -- totality: DuckDB's allow-list ------------------------------------------------------------

DuckDBBackend.allow = TOTAL


# -- how ``dpsql.connect`` reaches this engine (the registry: :mod:`dpsql.backends`) --------


def from_url(url, limits: Limits | None = None) -> DuckDBBackend:
    """``duckdb:///file.duckdb`` (no file: an in-memory database)."""
    return DuckDBBackend(url.database or ":memory:", limits)


def from_object(database, limits: Limits | None = None) -> DuckDBBackend | None:
    """A DuckDB file path, ``":memory:"`` or a ``duckdb.DuckDBPyConnection``; None for
    anything else."""
    if isinstance(database, duckdb.DuckDBPyConnection | str | Path):
        return DuckDBBackend(database, limits)
    return None
