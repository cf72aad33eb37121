"""Parse stage: SQL text to one sqlglot expression.

>>> parse("SELECT COUNT(*) FROM pums").sql()
'SELECT COUNT(*) FROM pums'
>>> parse("SELECT 1; SELECT 2")
Traceback (most recent call last):
...
dpsql.errors.UnsupportedQueryError: several statements in one string; send one SELECT per call
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from dpsql.errors import ParseError, UnsupportedQueryError
from dpsql.limits import DEFAULT

#: Longest SQL text accepted by default; longer input is refused before tokenizing.
MAX_SQL_LENGTH = DEFAULT.max_sql_length
#: The dialect analyst SQL is read in (DuckDB's is a superset of most analytic SQL).
READ_DIALECT = "duckdb"


def parse(sql: str, max_length: int = MAX_SQL_LENGTH) -> exp.Expression:
    """Parses exactly one SQL statement (of at most ``max_length`` characters).

    Raises:
        ParseError: the text does not parse; carries line and column.
        UnsupportedQueryError: empty input, several statements, or an over-long text.
    """
    if not isinstance(sql, str):
        raise UnsupportedQueryError(f"SQL must be a string, got {type(sql).__name__}")
    if len(sql) > max_length:
        raise UnsupportedQueryError(
            f"SQL text is {len(sql)} characters; the limit is {max_length} (max_sql_length)"
        )
    try:
        statements = [s for s in sqlglot.parse(sql, read=READ_DIALECT) if s is not None]
    except sqlglot.errors.ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        desc = first.get("description", str(exc)).split(" <Token")[0]
        raise ParseError(
            f"cannot parse SQL: {desc}", line=first.get("line"), column=first.get("col")
        ) from None
    except sqlglot.errors.TokenError as exc:
        raise ParseError(f"cannot tokenize SQL: {exc}") from None
    except RecursionError:
        raise UnsupportedQueryError("SQL is nested too deeply to parse") from None
    if not statements:
        raise UnsupportedQueryError("empty SQL: send one SELECT statement")
    if len(statements) > 1:
        raise UnsupportedQueryError(
            "several statements in one string; send one SELECT per call"
        )
    return statements[0]
