"""The exception hierarchy: one root, one subclass per stage of the pipeline.

Every error dpsql raises derives from :class:`DpsqlError`. The stage tells the caller
whether budget was spent: errors raised before the ``charge`` stage (catalog, parse,
validation, analysis, privacy parameters, budget) never charge anything; a
:class:`BackendError` is raised after the charge and keeps it, because a failure that
depends on the data is itself information about the data; so does a
:class:`QueryCancelled` raised after the charge.

>>> issubclass(UnsupportedQueryError, DpsqlError)
True
>>> err = ParseError("unexpected token", line=1, column=8)
>>> str(err)
'unexpected token (line 1, column 8)'
"""

from __future__ import annotations


class DpsqlError(Exception):
    """Root of all dpsql errors."""

    #: Pipeline stage that raised the error.
    stage = "dpsql"
    #: Whether the query that raised it was charged against the budget.
    charged = False

    def _render_traceback_(self) -> list[str]:
        """What IPython and Jupyter show for this error: its one-line message.

        IPython's protocol for exceptions that carry their own display: a refusal is a
        message to the analyst, not a bug, and a notebook cell that raised it (jupysql's
        ``%sqlcmd profile``, ``%sqlplot``) shows that line instead of a traceback
        through the client's code. Python's own traceback printing is unchanged.
        """
        return [f"{type(self).__name__}: {self}"]


class CatalogError(DpsqlError):
    """The catalog is malformed or inconsistent (names the table, column and problem)."""

    stage = "catalog"


class ParseError(DpsqlError):
    """The SQL text is not one parseable statement."""

    stage = "parse"

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.line = line
        self.column = column
        if line is not None:
            message = f"{message} (line {line}, column {column})"
        super().__init__(message)


class ParameterError(ParseError):
    """The query's ``?`` parameters do not fit it (count, type, named placeholders)."""


class ParameterValueError(ParameterError, ValueError):
    """A parameter's value cannot be a literal (a NaN or infinite number)."""


class UnsupportedQueryError(DpsqlError):
    """The query uses a construct dpsql refuses (names the construct, says why)."""

    stage = "validate"


class AnalysisError(DpsqlError):
    """The query is well-formed SQL but cannot be answered against the catalog."""

    stage = "analyze"


class UnknownTableError(AnalysisError):
    """A table that the catalog does not describe."""


class UnknownColumnError(AnalysisError):
    """A column that the catalog does not describe."""


class UnboundedExpressionError(AnalysisError):
    """An aggregated expression whose bounds cannot be derived from the catalog."""


class PrivacyParameterError(DpsqlError, ValueError):
    """Invalid privacy parameters (epsilon, delta, contribution bounds)."""

    stage = "analyze"


class BudgetExhaustedError(DpsqlError):
    """The query's cost does not fit into the remaining budget; nothing was charged."""

    stage = "charge"


class LedgerError(DpsqlError):
    """The budget ledger cannot be used (missing, corrupted or not a dpsql ledger)."""

    stage = "charge"


class PostprocessError(DpsqlError):
    """Post-processing the noisy answer failed; the query keeps its charge."""

    stage = "post-process"
    charged = True


class BackendError(DpsqlError):
    """The backend failed while running the rewritten query.

    Raised after the charge, which is kept. The message never carries data values.
    """

    stage = "execute"
    charged = True


class QueryCancelled(DpsqlError):
    """The query was cancelled (Ctrl-C, a notebook's interrupt) while it ran.

    Raised instead of ``KeyboardInterrupt`` (or the database's own interrupt error) by
    :meth:`dpsql.Connection.execute`. A query cancelled after its charge keeps the charge
    and is logged as ``cancelled`` in the ledger: the database may already have read the
    data, and how far it got can depend on the data. One cancelled before the charge
    (``charged`` is False) spent nothing.
    """

    stage = "execute"
    charged = True

    def __init__(self, message: str | None = None, charged: bool = True):
        if message is None:
            message = ("query cancelled; its charge is kept (the database may already "
                       "have read the data)" if charged
                       else "query cancelled before anything was charged")
        super().__init__(message)
        self.charged = charged
