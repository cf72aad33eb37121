"""PEP 249's exceptions, type objects and constructors for :mod:`dpsql.dbapi`.

:mod:`dpsql.dbapi` re-exports every name here: a DB-API module must have them at its
top level (``dpsql.dbapi.ProgrammingError``, ``dpsql.dbapi.STRING``, ...). The mapping
from dpsql's error classes onto PEP 249's is documented in :mod:`dpsql.dbapi`.
"""

from __future__ import annotations

import datetime
import decimal
import numbers
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dpsql import errors as _errors
from dpsql import types as sqltypes

#: Where analysts meet these names: tracebacks and reprs say ``dpsql.dbapi.Error``.
_PUBLIC = "dpsql.dbapi"

# -- exceptions (PEP 249) -------------------------------------------------------------


class Warning(Exception):  # the name is PEP 249's (it shadows the builtin here)
    """Important warnings (PEP 249). dpsql raises none at present."""


class Error(Exception):
    """Base class of all other PEP 249 errors."""


class InterfaceError(Error):
    """An error of the interface rather than the database (closed objects, the catalog)."""


class DatabaseError(Error):
    """An error related to the database."""


class DataError(DatabaseError):
    """A problem with a value, e.g. a NaN or infinite query parameter."""


class OperationalError(DatabaseError):
    """The query cannot run now: budget exhausted, ledger unusable, backend failure."""


class IntegrityError(DatabaseError):
    """Relational integrity is affected (never raised: dpsql does not write)."""


class InternalError(DatabaseError):
    """An unexpected internal failure of the engine."""


class ProgrammingError(DatabaseError):
    """The query, its parameters or its privacy options must change."""


class NotSupportedError(DatabaseError):
    """A method or feature that dpsql does not support (e.g. ``executemany``)."""


#: dpsql error class → PEP 249 class; the nearest entry in an error's MRO applies.
ERROR_MAP: dict[type[_errors.DpsqlError], type[Error]] = {
    _errors.ParameterValueError: DataError,
    _errors.ParseError: ProgrammingError,
    _errors.UnsupportedQueryError: ProgrammingError,
    _errors.AnalysisError: ProgrammingError,
    _errors.PrivacyParameterError: ProgrammingError,
    _errors.BudgetExhaustedError: OperationalError,
    _errors.BackendError: OperationalError,
    _errors.QueryCancelled: OperationalError,
    _errors.LedgerError: OperationalError,
    _errors.CatalogError: InterfaceError,
    _errors.DpsqlError: DatabaseError,
}

_BOTH: dict[type[_errors.DpsqlError], type] = {}


def error_class(dpsql_class: type[_errors.DpsqlError]) -> type:
    """The class raised for ``dpsql_class``: a subclass of it and of its PEP 249 class.

    >>> cls = error_class(_errors.BudgetExhaustedError)
    >>> issubclass(cls, OperationalError), issubclass(cls, _errors.BudgetExhaustedError)
    (True, True)
    """
    cls = _BOTH.get(dpsql_class)
    if cls is None:
        pep = next(ERROR_MAP[c] for c in dpsql_class.__mro__ if c in ERROR_MAP)
        cls = type(dpsql_class.__name__, (dpsql_class, pep), {
            "__module__": _PUBLIC,
            "__doc__": f"{dpsql_class.__doc__ or ''} (PEP 249: {pep.__name__})",
        })
        _BOTH[dpsql_class] = cls
    return cls


def _translate(exc: _errors.DpsqlError) -> Exception:
    """The same error (message, attributes, traceback) as an instance of both classes."""
    cls = error_class(type(exc))
    new = cls.__new__(cls, *exc.args)
    new.args = exc.args
    new.__dict__.update(exc.__dict__)
    return new.with_traceback(exc.__traceback__)


@contextmanager
def _translating() -> Iterator[None]:
    try:
        yield
    except Error:
        raise
    except _errors.DpsqlError as exc:
        raise _translate(exc) from exc.__cause__
    except Exception as exc:
        raise InternalError(f"unexpected {type(exc).__name__} in dpsql: {exc}") from exc


# -- types and constructors (PEP 249) -------------------------------------------------


class DBAPITypeObject:
    """A PEP 249 type object: equal to every type code of its group.

    Type codes in :attr:`Cursor.description` are DuckDB type names such as ``"BIGINT"``.

    >>> NUMBER == "BIGINT", "VARCHAR" == STRING, DATETIME == "DOUBLE"
    (True, True, False)
    """

    def __init__(self, *values: str):
        self.values = frozenset(values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DBAPITypeObject):
            return self.values == other.values
        return isinstance(other, str) and other.upper() in self.values

    def __hash__(self) -> int:
        return hash(self.values)

    def __repr__(self) -> str:
        return f"DBAPITypeObject{tuple(sorted(self.values))}"


STRING = DBAPITypeObject(*sqltypes.STRING_NAMES, "UUID")
BINARY = DBAPITypeObject("BLOB", "VARBINARY", "BINARY", "BYTEA")
NUMBER = DBAPITypeObject(*sqltypes.NUMBER_NAMES, "UINT")
DATETIME = DBAPITypeObject("DATE", "TIME", "TIMESTAMP", "TIMESTAMPTZ", "DATETIME", "INTERVAL")
ROWID = DBAPITypeObject()

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:
    """PEP 249: the local date of a Unix time."""
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    """PEP 249: the local time of day of a Unix time."""
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    """PEP 249: the local date and time of a Unix time."""
    return Timestamp(*time.localtime(ticks)[:6])


#: Catalog type → the DuckDB type name used as a type code.
CATALOG_TYPE_CODES = {t: sqltypes.DUCKDB_TYPE[t] for t in sqltypes.CATALOG_COMPATIBLE}


def _value_type_code(value: Any) -> str | None:
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, numbers.Integral):
        return "BIGINT"
    if isinstance(value, decimal.Decimal):
        return "DECIMAL"
    if isinstance(value, numbers.Real):
        return "DOUBLE"
    if isinstance(value, str):
        return "VARCHAR"
    if isinstance(value, datetime.datetime):
        return "TIMESTAMP"
    if isinstance(value, datetime.date):
        return "DATE"
    if isinstance(value, datetime.time):
        return "TIME"
    if isinstance(value, bytes | bytearray):
        return "BLOB"
    return None


for _cls in (Warning, Error, InterfaceError, DatabaseError, DataError, OperationalError,
             IntegrityError, InternalError, ProgrammingError, NotSupportedError,
             DBAPITypeObject):
    _cls.__module__ = _PUBLIC
