"""A DB-API 2.0 (PEP 249) interface to dpsql.

Every ``execute`` answers one aggregate query with differential privacy and charges the
connection's budget, exactly as :meth:`dpsql.Connection.execute` does. The privacy
parameters of a query come, in this order of precedence, from the query's own BigQuery
clause ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = ..., delta = ...,
max_groups_contributed = ..., max_rows_contributed = ...)``, from the cursor's
attributes ``epsilon``, ``delta``, ``max_groups`` and ``max_rows``, which a new cursor
copies from its connection, and from :func:`connect`'s keyword arguments of the same
names.

Error bars as columns: with ``connect(..., error_columns=True)`` (the cursor attribute
``error_columns``), or per query with ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS
(error_columns = 1) ...`` (``= 0`` turns them off), each output column that carries an
error bar is followed by ``<name>_error``, the half-width of its ``1 − alpha``
interval, and a last column ``confidence`` holds ``1 − alpha`` (0.95; only when some
column has an error bar): the layout of
:meth:`dpsql.Result.error_table`. :attr:`Cursor.description` describes them, so every
client over this module (SQLAlchemy, pandas, polars, jupysql) shows them. Values are
never rounded. With ``connect(..., intervals=True)`` or ``OPTIONS (intervals = 1)``,
each ``<name>_error`` is followed by ``<name>_low`` and ``<name>_high``, the ends of
the interval (honest where bounds make it asymmetric, e.g. a count near 0); this
implies the error columns. ``OPTIONS (bias_check = 1)`` runs the bias check of
:mod:`dpsql.bias` (its result in ``cursor.result.bias`` and notes).

>>> import duckdb
>>> from dpsql import dbapi
>>> from dpsql.datasets import load_pums, catalog_path
>>> db = duckdb.connect(); load_pums(db)
>>> conn = dbapi.connect(db, catalog_path("pums"), ledger=":memory:", epsilon=0.5)
>>> cur = conn.cursor()
>>> cur.execute("SELECT sex, COUNT(*) AS n FROM pums WHERE age >= ? GROUP BY sex", [18])
<dpsql.dbapi.Cursor rowcount=2>
>>> [d[0] for d in cur.description], cur.cost
(['sex', 'n'], (0.5, 0.0))
>>> [row[0] for row in cur.fetchall()]
[0, 1]
>>> cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25) COUNT(*) FROM pums")
<dpsql.dbapi.Cursor rowcount=1>
>>> conn.budget.spent
(0.75, 0.0)
>>> cur.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25, error_columns = 1) "
...             "sex, COUNT(*) AS n FROM pums GROUP BY sex")
<dpsql.dbapi.Cursor rowcount=2>
>>> [d[0] for d in cur.description]
['sex', 'n', 'n_error', 'confidence']

Transactions do not exist: :meth:`Connection.commit` and :meth:`Connection.rollback` do
nothing, and in particular **a rollback never refunds budget** — every answered query
has been released, so its charge is final.

Errors are the PEP 249 classes below. Each error dpsql raises is re-raised as an
instance of both its PEP 249 class and its original :mod:`dpsql.errors` class, so
``except dbapi.OperationalError`` and ``except dpsql.BudgetExhaustedError`` both catch
an exhausted budget. The mapping (:data:`ERROR_MAP`):

* ``ParseError``, ``UnsupportedQueryError``, ``AnalysisError`` (``UnknownTableError``,
  ``UnknownColumnError``, ``UnboundedExpressionError``) and ``PrivacyParameterError``
  → :class:`ProgrammingError`: the query or its parameters must change;
* ``BudgetExhaustedError``, ``BackendError``, ``QueryCancelled`` and ``LedgerError`` →
  :class:`OperationalError`: the query was fine, the situation was not;
* ``CatalogError`` → :class:`InterfaceError`: the catalog is the interface's own
  description of the database, set by the data owner, not by the query;
* any other ``DpsqlError`` → :class:`DatabaseError`; an unexpected non-dpsql exception
  from the engine → :class:`InternalError`.

>>> try:
...     cur.execute("SELECT COUNT(*) FROM nowhere")
... except dbapi.ProgrammingError as exc:
...     print(type(exc).__name__, isinstance(exc, dbapi.ProgrammingError))
UnknownTableError True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import exp

from dpsql import errors as _errors
from dpsql import params as _params
from dpsql.bigquery_options import lift_dp_options
from dpsql.catalog import Catalog
from dpsql.engine import Connection as _DpsqlConnection
from dpsql.pep249 import (  # noqa: F401 - PEP 249 names, re-exported
    BINARY,
    CATALOG_TYPE_CODES,
    DATETIME,
    ERROR_MAP,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    DatabaseError,
    DataError,
    Date,
    DateFromTicks,
    DBAPITypeObject,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
    Warning,
    _translate,
    _translating,
    _value_type_code,
    error_class,
)
from dpsql.result import Result

#: PEP 249: the DB-API level supported.
apilevel = "2.0"
#: PEP 249: threads may share the module, but not connections.
threadsafety = 1
#: PEP 249: parameters are question marks, ``WHERE age > ?``.
paramstyle = "qmark"


# -- parameters -----------------------------------------------------------------------


def bind_parameters(sql: str, parameters: Sequence[Any] | None) -> str:
    """Binds qmark parameters as SQL literals, through sqlglot's syntax tree.

    :func:`dpsql.params.bind_parameters` (the one implementation, shared with
    :meth:`dpsql.Connection.execute`), its errors raised as PEP 249's classes.

    Raises:
        ProgrammingError: wrong number of parameters, a mapping or string given as the
            parameters, named or numbered placeholders, a value of an unsupported type.
        DataError: a NaN or infinite number.

    >>> bind_parameters("SELECT COUNT(*) FROM t WHERE a = ? AND b > ?", ["O'Hara", 3])
    "SELECT COUNT(*) FROM t WHERE a = 'O''Hara' AND b > 3"
    >>> bind_parameters("SELECT COUNT(*) FROM t WHERE a = ?", [])
    Traceback (most recent call last):
    ...
    dpsql.dbapi.ParameterError: the query has 1 '?' placeholder but 0 parameters were given
    """
    with _translating():
        return _params.bind_parameters(sql, parameters)


# -- connection -----------------------------------------------------------------------


def connect(
    database: Any,
    catalog: Any = None,
    budget: tuple[float, float] | None = None,
    *,
    ledger: Any = None,
    analyst: str | None = None,
    alpha: float = 0.05,
    epsilon: float | None = None,
    delta: float = 0.0,
    max_groups: int | None = None,
    max_rows: int | None = None,
    error_columns: bool = False,
    intervals: bool = False,
) -> Connection:
    """Opens a DB-API connection; the arguments are those of :func:`dpsql.connect` plus
    per-query defaults for its cursors.

    Args:
        database, catalog, budget, ledger, analyst, alpha: as for :func:`dpsql.connect`
            (including the owner's pins: a connection naming another catalog, ledger or
            analyst than the pinned one is refused with an ``OperationalError`` that is
            also a :class:`dpsql.LedgerError`).
        epsilon: default epsilon of each query (None: every query must set one).
        delta: default delta of each query.
        max_groups: default override of the tables' ``max_groups``.
        max_rows: default override of the tables' ``max_rows``.
        error_columns: whether results carry each error bar as a column
            ``<name>_error`` and the level as ``confidence`` (see the module's
            docstring); a query's ``error_columns`` option overrides it.
        intervals: whether results also carry each interval's ends as columns
            ``<name>_low`` and ``<name>_high`` (with the error columns); a query's
            ``intervals`` option overrides it.

    Raises:
        InterfaceError: the catalog is malformed (also a ``CatalogError``).
        OperationalError: the database or the ledger cannot be opened, or a pin refuses
            the connection's catalog, ledger or analyst.
        ProgrammingError: no budget anywhere, or an invalid one.
    """
    return Connection(database, catalog, budget, ledger=ledger, analyst=analyst, alpha=alpha,
                      epsilon=epsilon, delta=delta, max_groups=max_groups, max_rows=max_rows,
                      error_columns=error_columns, intervals=intervals)


class Connection:
    """A PEP 249 connection around one :class:`dpsql.Connection`.

    Attributes:
        epsilon, delta, max_groups, max_rows, error_columns: defaults copied by each new
            cursor.

    The PEP 249 exception classes are also attributes (``conn.ProgrammingError``...).
    Closing the connection (or leaving its ``with`` block) closes the dpsql connection;
    every later operation on it or its cursors raises :class:`InterfaceError`.
    """

    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(self, database: Any, catalog: Any = None, budget=None, *, ledger=None,
                 analyst: str | None = None, alpha: float = 0.05,
                 epsilon: float | None = None, delta: float = 0.0,
                 max_groups: int | None = None, max_rows: int | None = None,
                 error_columns: bool = False, intervals: bool = False):
        for name, flag in (("error_columns", error_columns), ("intervals", intervals)):
            if not isinstance(flag, bool):
                raise ProgrammingError(f"{name} must be True or False, got {flag!r}")
        with _translating():
            self._conn: _DpsqlConnection | None = _DpsqlConnection(
                database, catalog, budget, ledger=ledger, analyst=analyst, alpha=alpha)
        self.epsilon = epsilon
        self.delta = delta
        self.max_groups = max_groups
        self.max_rows = max_rows
        self.error_columns = error_columns
        self.intervals = intervals

    def _open(self) -> _DpsqlConnection:
        if self._conn is None:
            raise InterfaceError("connection is closed")
        return self._conn

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    @property
    def budget(self):
        """The analyst's budget view: ``.spent`` and ``.remaining`` (epsilon, delta)."""
        return self._open().budget

    @property
    def catalog(self) -> Catalog:
        """The catalog: the public description of the tables (never the data)."""
        return self._open().catalog

    @property
    def analyst(self) -> str:
        return self._open().analyst

    def cursor(self) -> Cursor:
        """A new cursor, with this connection's privacy defaults."""
        self._open()
        return Cursor(self)

    def commit(self) -> None:
        """Does nothing: each query's charge is recorded in the ledger when it runs."""
        self._open()

    def rollback(self) -> None:
        """Does nothing, and in particular refunds no budget: released answers stay spent."""
        self._open()

    def close(self) -> None:
        """Closes the dpsql connection; closing again does nothing."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with _translating():
                conn.close()

    def __enter__(self) -> Connection:
        self._open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dpsql.dbapi.Connection {'closed' if self.closed else 'open'}>"


# -- cursor ---------------------------------------------------------------------------


class Cursor:
    """A PEP 249 cursor: each :meth:`execute` is one private, charged query.

    Attributes:
        epsilon, delta, max_groups, max_rows: this cursor's privacy options (copied from
            the connection when the cursor is made); a query's ``WITH
            DIFFERENTIAL_PRIVACY OPTIONS`` clause overrides them for that query.
        error_columns: whether rows carry the error bars as columns (copied from the
            connection; a query's ``error_columns`` option overrides it).
        intervals: whether rows also carry each interval's ends (``<name>_low``,
            ``<name>_high``; copied from the connection; the ``intervals`` option
            overrides it).
        arraysize: rows fetched by :meth:`fetchmany` by default (1).
        accuracy: after execute, per row the half-widths of the cells' confidence
            intervals (None for exact cells), as ``Result.accuracy``; parallel to the
            fetched rows (None in the error and level columns).
        cost: after execute, the (epsilon, delta) the query spent.
        result: after execute, the whole :class:`dpsql.Result`.
    """

    def __init__(self, connection: Connection):
        self.connection = connection
        self.arraysize = 1
        self.epsilon = connection.epsilon
        self.delta = connection.delta
        self.max_groups = connection.max_groups
        self.max_rows = connection.max_rows
        self.error_columns = connection.error_columns
        self.intervals = connection.intervals
        self.lastrowid = None
        self._closed = False
        self._reset()

    def _reset(self) -> None:
        self.result: Result | None = None
        self.description: tuple[tuple, ...] | None = None
        self.rowcount = -1
        self.accuracy: list[tuple] | None = None
        self.cost: tuple[float, float] | None = None
        self._rows: list[tuple] = []
        self._next = 0

    def _check(self) -> _DpsqlConnection:
        if self._closed:
            raise InterfaceError("cursor is closed")
        return self.connection._open()

    @property
    def closed(self) -> bool:
        return self._closed or self.connection.closed

    def execute(self, operation: str, parameters: Sequence[Any] | None = None) -> Cursor:
        """Answers one query with differential privacy and charges its cost.

        Args:
            operation: one aggregate SELECT, optionally with BigQuery's ``WITH
                DIFFERENTIAL_PRIVACY OPTIONS (...)`` after ``SELECT``.
            parameters: values for the query's ``?`` placeholders, in order.

        Returns:
            This cursor.

        Raises:
            ProgrammingError, OperationalError, ...: see the module's error mapping.
        """
        conn = self._check()
        self._reset()
        if not isinstance(operation, str):
            raise ProgrammingError(f"the query must be a string, not {type(operation).__name__}")
        with _translating():
            sql, options = lift_dp_options(operation)
        sql = bind_parameters(sql, parameters)
        epsilon = options.get("epsilon", self.epsilon)
        if epsilon is None and not self._probe(sql, conn):
            raise error_class(_errors.PrivacyParameterError)(
                "no epsilon for this query: set cursor.epsilon, connect(epsilon=...), or "
                "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = ...)"
            )
        delta = options.get("delta", self.delta)
        with _translating():
            result = conn.execute(
                sql, epsilon=epsilon, delta=0.0 if delta is None else delta,
                max_groups=options.get("max_groups", self.max_groups),
                max_rows=options.get("max_rows", self.max_rows),
                bias_check=options.get("bias_check", False),
            )
        self.result = result
        self.cost = result.cost
        intervals = options.get("intervals", self.intervals)
        if options.get("error_columns", self.error_columns) or intervals:
            columns, rows = result.error_table(intervals=intervals)
            layout = result.layout(intervals=intervals)
            self.accuracy = [tuple(acc[what] if kind == "value" else None
                                   for kind, _, what in layout) for acc in result.accuracy]
        else:
            columns, rows = list(result.columns), result.rows
            layout = None
            self.accuracy = list(result.accuracy)
        self._rows = [tuple(r) for r in rows]
        self.rowcount = len(self._rows)
        self.description = self._describe(sql, result, conn.catalog, columns, self._rows,
                                          layout)
        return self

    @staticmethod
    def _probe(sql: str, conn: _DpsqlConnection) -> bool:
        """A query that provably returns no rows needs no epsilon (see :mod:`dpsql.probe`)."""
        from dpsql.probe import schema_probe

        with _translating():
            return schema_probe(sql, conn.catalog) is not None

    def executemany(self, operation: str, seq_of_parameters: Any) -> None:
        """Refused: each parameter set would be a separate private query with its own cost.

        Raises:
            NotSupportedError: always.
        """
        self._check()
        raise NotSupportedError(
            "executemany is not supported: every execution is a separate private query "
            "charged to the budget; call execute once per query you mean to pay for"
        )

    def fetchone(self) -> tuple | None:
        """The next row, or None when no rows are left."""
        self._results()
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        """Up to ``size`` (default :attr:`arraysize`) next rows."""
        self._results()
        size = self.arraysize if size is None else size
        rows = self._rows[self._next:self._next + max(int(size), 0)]
        self._next += len(rows)
        return rows

    def fetchall(self) -> list[tuple]:
        """All remaining rows."""
        self._results()
        rows = self._rows[self._next:]
        self._next = len(self._rows)
        return rows

    def _results(self) -> None:
        self._check()
        if self.result is None:
            raise ProgrammingError("no result set: execute a query first")

    def setinputsizes(self, sizes: Any) -> None:
        """Does nothing (PEP 249)."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """Does nothing (PEP 249)."""

    setoutputsizes = setoutputsize

    def close(self) -> None:
        """Closes the cursor; closing again does nothing."""
        self._closed = True
        self._rows = []

    def __iter__(self) -> Cursor:
        return self

    def __next__(self) -> tuple:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def __enter__(self) -> Cursor:
        self._check()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"rowcount={self.rowcount}"
        return f"<dpsql.dbapi.Cursor {state}>"

    @staticmethod
    def _describe(sql: str, result: Result, catalog: Catalog, columns: list[str],
                  rows: list[tuple], layout: list | None) -> tuple[tuple, ...]:
        """7-tuples (name, type_code, None, None, None, None, None) for the rows.

        ``layout`` (:func:`dpsql.result.error_layout`) places the error and level
        columns, None when there are none. An error column without values is DOUBLE.
        """
        codes: list[str | None] = []
        for i in range(len(columns)):
            values = (row[i] for row in rows if row[i] is not None)
            codes.append(_value_type_code(next(values, None)))
        if None in codes:  # a column without values: its type from the query and catalog
            static = _static_type_codes(sql, catalog)
            if len(static) == len(result.columns):
                if layout is None:
                    codes = [c or s for c, s in zip(codes, static, strict=True)]
                else:
                    codes = [c or (static[what] if kind == "value" else "DOUBLE")
                             for c, (kind, _, what) in zip(codes, layout, strict=True)]
            elif layout is not None:
                codes = [c or (None if kind == "value" else "DOUBLE")
                         for c, (kind, _, _) in zip(codes, layout, strict=True)]
        return tuple((name, code, None, None, None, None, None)
                     for name, code in zip(columns, codes, strict=True))


def _static_type_codes(sql: str, catalog: Catalog) -> list[str | None]:
    """The select list's types by sqlglot's type inference over the catalog's types."""
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    schema = {name: {c.name: CATALOG_TYPE_CODES[c.type] for c in table.columns.values()}
              for name, table in catalog.tables.items()}
    try:
        tree = qualify(sqlglot.parse_one(sql, read="duckdb"), schema=schema, dialect="duckdb")
        tree = annotate_types(tree, schema=schema, dialect="duckdb")
    except Exception:  # inference is a nicety; the answer itself stands
        return []
    codes: list[str | None] = []
    for e in tree.expressions:
        kind = e.type.this if e.type is not None else exp.DataType.Type.UNKNOWN
        codes.append(None if kind == exp.DataType.Type.UNKNOWN else kind.value)
    return codes


__all__ = [
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "Connection", "Cursor",
    "DataError", "DatabaseError", "Date", "DateFromTicks", "Error", "IntegrityError",
    "InterfaceError", "InternalError", "NotSupportedError", "OperationalError",
    "ProgrammingError", "Time", "TimeFromTicks", "Timestamp", "TimestampFromTicks", "Warning",
    "apilevel", "bind_parameters", "connect", "error_class", "paramstyle", "threadsafety",
]
