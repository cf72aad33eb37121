"""dpsql: differentially private answers to ordinary aggregate SQL.

>>> import dpsql
>>> issubclass(dpsql.BudgetExhaustedError, dpsql.DpsqlError)
True
"""

import logging as _logging

from dpsql.catalog import Catalog, load_catalog
from dpsql.engine import Connection, connect
from dpsql.errors import (
    AnalysisError,
    BackendError,
    BudgetExhaustedError,
    CatalogError,
    DpsqlError,
    LedgerError,
    ParameterError,
    ParseError,
    PostprocessError,
    PrivacyParameterError,
    QueryCancelled,
    UnboundedExpressionError,
    UnknownColumnError,
    UnknownTableError,
    UnsupportedQueryError,
)
from dpsql.ledger import Ledger
from dpsql.result import Explanation, Result

__version__ = "0.1.0"

# The owner's log (backend error texts, refused rewritten SQL) must never fall through to
# Python's last-resort handler, which prints to the stderr of whoever runs the query:
# the data owner attaches a handler to the "dpsql.owner" logger to keep it.
_logging.getLogger("dpsql.owner").addHandler(_logging.NullHandler())

__all__ = [
    "AnalysisError",
    "BackendError",
    "BudgetExhaustedError",
    "Catalog",
    "CatalogError",
    "Connection",
    "DpsqlError",
    "LedgerError",
    "Ledger",
    "Explanation",
    "ParameterError",
    "ParseError",
    "PostprocessError",
    "PrivacyParameterError",
    "QueryCancelled",
    "Result",
    "UnboundedExpressionError",
    "UnknownColumnError",
    "UnknownTableError",
    "UnsupportedQueryError",
    "__version__",
    "connect",
    "load_catalog",
]
