"""How dpsql's errors reach the client: a SQLSTATE and the service's own message.

Every exception a statement raises becomes a :class:`QueryError` before it is sent
(:func:`as_query_error`). Its message is dpsql's own (dpsql's errors never carry backend
text) or a fixed one; a budget refusal names only what the login may see (its own
remaining budget, never the data set's, which would tell others' spending).
"""

from __future__ import annotations

import re

from dpsql import dbapi
from dpsql import errors as dperr
from dpsql.server import ProtocolError, ServerError

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


class QueryError(Exception):
    """An error to send as ErrorResponse: SQLSTATE and the service's own message."""

    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of the nearest class of ``exc`` in :data:`SQLSTATES` (else XX000)."""
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


__all__ = ["SQLSTATES", "QueryError", "as_query_error", "sqlstate"]
