"""BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` clause.

BigQuery lets a query carry its own privacy parameters::

    SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5, delta = 1e-6,
                                              max_groups_contributed = 2)
           sex, COUNT(*) FROM pums GROUP BY sex

sqlglot does not parse this clause, so :func:`lift_dp_options` lifts it off the text
before parsing: it looks only right after the statement's leading ``SELECT`` keyword
(after optional whitespace and comments), so the words inside a string literal or
later in the query are never touched. Options are ``key = number`` pairs; the keys are
``epsilon``, ``delta``, ``max_groups_contributed`` (dpsql's ``max_groups``) and
``max_rows_contributed`` (dpsql's ``max_rows``), and dpsql's own ``error_columns``
(``1`` or ``TRUE``: the DB-API, SQLAlchemy and every client over them return each
noisy column's error bar as a column ``<name>_error`` and the level as ``confidence``;
``0`` or ``FALSE``: they do not, whatever the connection says), ``intervals`` (a
switch: each error bar's interval ends as columns ``<name>_low`` and ``<name>_high``
after ``<name>_error``, in ``Result.df`` and through the DB-API) and ``bias_check`` (a
switch: the answer also releases, with DP and a share of the query's ε, how many users
the contribution bounds cut; see :mod:`dpsql.bias`). Keys are case-insensitive.

>>> lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, "
...                 "error_columns = TRUE) COUNT(*) FROM pums")[1]
{'epsilon': 1, 'error_columns': True}

>>> lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5, "
...                 "delta = 1e-6, max_groups_contributed = 2) COUNT(*) FROM pums")
('SELECT COUNT(*) FROM pums', {'epsilon': 0.5, 'delta': 1e-06, 'max_groups': 2})
>>> lift_dp_options("select with differential_privacy count(*) from pums")
('select count(*) from pums', {})
>>> lift_dp_options("SELECT COUNT(*) FROM pums")          # no clause: unchanged
('SELECT COUNT(*) FROM pums', {})
>>> lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (privacy_unit_column = pid) "
...                 "COUNT(*) FROM pums")
Traceback (most recent call last):
...
dpsql.errors.UnsupportedQueryError: unknown differential privacy option 'privacy_unit_column'...
"""

from __future__ import annotations

import math
import re

from dpsql.errors import ParseError, UnsupportedQueryError
from dpsql.limits import DEFAULT, Limits

#: Option name in SQL → keyword argument of ``Connection.execute``.
OPTION_KEYS = {
    "epsilon": "epsilon",
    "delta": "delta",
    "max_groups_contributed": "max_groups",
    "max_rows_contributed": "max_rows",
    "error_columns": "error_columns",
    "intervals": "intervals",
    "bias_check": "bias_check",
}

#: Options that are switches: ``1``/``TRUE`` or ``0``/``FALSE`` (any case), nothing else.
SWITCHES = frozenset({"error_columns", "intervals", "bias_check"})
_SWITCH_VALUES = {"1": True, "true": True, "0": False, "false": False}

#: Longest ``WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` clause accepted (characters, from
#: ``WITH`` to the closing parenthesis): four ``key = number`` pairs fit in ~150.
MAX_CLAUSE_LENGTH = 1_000

# The scanner below reads the text once, left to right, with str.find/startswith only:
# linear whatever the input (the regular expressions it replaces backtracked
# quadratically on a long option value). Only fully anchored patterns over one short
# token remain.
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


def lift_dp_options(sql: str, limits: Limits = DEFAULT
                    ) -> tuple[str, dict[str, int | float | bool]]:
    """Removes a leading ``WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` clause from ``sql``.

    Args:
        sql: the query text.
        limits: the data owner's resource limits (``max_sql_length``).

    Returns:
        The text without the clause (unchanged when there is none; newlines inside the
        clause are kept so later line numbers still match the original text), and the
        options as ``Connection.execute`` keyword arguments (``epsilon``, ``delta``,
        ``max_groups``, ``max_rows``): an int for an integer literal, else a float;
        ``error_columns`` (read by :mod:`dpsql.dbapi`), ``intervals`` and
        ``bias_check`` as bools.

    Raises:
        UnsupportedQueryError: an unknown option key (the message names it), or a text
            or clause over its length limit.
        ParseError: a malformed clause: no parenthesised options after ``OPTIONS``, a
            value that is not a finite number (for ``error_columns``: not 0, 1, TRUE or
            FALSE), or a key given twice.

    >>> lift_dp_options("/* hi */ SELECT\\n  WITH DIFFERENTIAL_PRIVACY\\n"
    ...                 "  OPTIONS(EPSILON=1, max_rows_contributed=3)\\nSUM(age) FROM pums")
    ('/* hi */ SELECT \\n\\n\\nSUM(age) FROM pums', {'epsilon': 1, 'max_rows': 3})
    >>> lift_dp_options("SELECT 'WITH DIFFERENTIAL_PRIVACY' AS x FROM t")[1]
    {}
    >>> lift_dp_options("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 'a') 1")
    Traceback (most recent call last):
    ...
    dpsql.errors.ParseError: differential privacy option epsilon: 'a' is not a finite number
    """
    if not isinstance(sql, str):
        return sql, {}
    if len(sql) > limits.max_sql_length:
        raise UnsupportedQueryError(
            f"SQL text is {len(sql)} characters; the limit is {limits.max_sql_length} "
            "(max_sql_length)")
    head = _word(sql, _gap(sql, 0), "SELECT")
    if head is None:
        return sql, {}
    start = head
    with_end = _word(sql, _gap(sql, start), "WITH")
    if with_end is None:
        return sql, {}
    end = _word(sql, _gap(sql, with_end), "DIFFERENTIAL_PRIVACY")
    if end is None:
        return sql, {}
    body = None
    options_end = _word(sql, _gap(sql, end), "OPTIONS")
    if options_end is not None:
        open_at = _gap(sql, options_end)
        close_at = sql.find(")", open_at) if sql.startswith("(", open_at) else -1
        if close_at < 0 or "(" in sql[open_at + 1:close_at]:
            raise ParseError("WITH DIFFERENTIAL_PRIVACY OPTIONS needs (key = number, ...) "
                             "without nested parentheses")
        body, end = sql[open_at + 1:close_at], close_at + 1
    if end - start > MAX_CLAUSE_LENGTH:
        raise UnsupportedQueryError(
            f"the WITH DIFFERENTIAL_PRIVACY clause is {end - start} characters long; the "
            f"limit is {MAX_CLAUSE_LENGTH}")
    options = _parse_options(body) if body is not None else {}
    filler = " " + "\n" * sql.count("\n", start, end)
    return sql[:start] + filler + sql[end:].lstrip(" \t"), options


def _gap(sql: str, i: int) -> int:
    """The position after the whitespace and complete SQL comments starting at ``i``."""
    n = len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            newline = sql.find("\n", i)
            i = n if newline < 0 else newline + 1
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            if close < 0:  # an unclosed comment is no gap (the parser refuses it later)
                return i
            i = close + 2
        else:
            break
    return i


def _word(sql: str, i: int, word: str) -> int | None:
    """The end of the keyword ``word`` (ASCII, any case) at ``i``, or None.

    Like the regular expression ``\\bWORD\\b``: the next character must not continue a
    name. Only ASCII letters match (no case folding of ``ſ`` or ``K`` into keywords).
    """
    end = i + len(word)
    text = sql[i:end]
    if not (text.isascii() and text.upper() == word):
        return None
    if end < len(sql) and (sql[end].isalnum() or sql[end] == "_"):
        return None
    return end


def _parse_options(body: str) -> dict[str, int | float | bool]:
    options: dict[str, int | float | bool] = {}
    if not body.strip():
        return options
    for item in body.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value or _KEY.fullmatch(key) is None:
            raise ParseError(
                f"differential privacy options must be 'key = number' pairs, got "
                f"{item.strip()[:40]!r}"
            )
        key = key.lower()
        if key not in OPTION_KEYS:
            raise UnsupportedQueryError(
                f"unknown differential privacy option {key[:40]!r}; known options: "
                + ", ".join(OPTION_KEYS)
            )
        name = OPTION_KEYS[key]
        if name in options:
            raise ParseError(f"differential privacy option {key} is given twice")
        if name in SWITCHES:
            switch = _SWITCH_VALUES.get(value.lower()) if value.isascii() else None
            if switch is None:
                raise ParseError(f"differential privacy option {key}: {value[:40]!r} is not "
                                 "0, 1, TRUE or FALSE")
            options[name] = switch
        else:
            options[name] = _number(key, value)
    return options


def _number(key: str, text: str) -> int | float:
    if _INTEGER.fullmatch(text):
        return int(text)  # at most MAX_CLAUSE_LENGTH digits: far below int()'s limit
    if _NUMBER.fullmatch(text):
        value = float(text)
        if math.isfinite(value):
            return value
    raise ParseError(f"differential privacy option {key}: {text[:40]} is not a finite number")


__all__ = ["OPTION_KEYS", "SWITCHES", "lift_dp_options"]
