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
``max_rows_contributed`` (dpsql's ``max_rows``). Keys are case-insensitive.

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

#: Option name in SQL → keyword argument of ``Connection.execute``.
OPTION_KEYS = {
    "epsilon": "epsilon",
    "delta": "delta",
    "max_groups_contributed": "max_groups",
    "max_rows_contributed": "max_rows",
}

# Whitespace and SQL comments, any number of them.
# one whitespace character per repetition: a nested \s+ inside * backtracks exponentially
_GAP = r"(?:\s|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*"
_HEAD = re.compile(r"\A(" + _GAP + r"SELECT\b)", re.IGNORECASE | re.DOTALL)
_CLAUSE = re.compile(
    _GAP + r"WITH" + _GAP + r"\bDIFFERENTIAL_PRIVACY\b"
    r"(?P<options>" + _GAP + r"\bOPTIONS" + _GAP + r"\((?P<body>[^()]*)\))?",
    re.IGNORECASE | re.DOTALL,
)
_PAIR = re.compile(r"\A\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>\S.*?)\s*\Z", re.DOTALL)
_NUMBER = re.compile(r"\A[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z", re.ASCII)
_INTEGER = re.compile(r"\A[+-]?\d+\Z", re.ASCII)


def lift_dp_options(sql: str) -> tuple[str, dict[str, int | float]]:
    """Removes a leading ``WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` clause from ``sql``.

    Args:
        sql: the query text.

    Returns:
        The text without the clause (unchanged when there is none; newlines inside the
        clause are kept so later line numbers still match the original text), and the
        options as ``Connection.execute`` keyword arguments (``epsilon``, ``delta``,
        ``max_groups``, ``max_rows``): an int for an integer literal, else a float.

    Raises:
        UnsupportedQueryError: an unknown option key (the message names it).
        ParseError: a malformed clause: no parenthesised options after ``OPTIONS``, a
            value that is not a finite number, or a key given twice.

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
    from dpsql.parse import MAX_SQL_LENGTH

    if isinstance(sql, str) and len(sql) > MAX_SQL_LENGTH:
        raise UnsupportedQueryError(
            f"SQL text is {len(sql)} characters; the limit is {MAX_SQL_LENGTH}")
    if not isinstance(sql, str):
        return sql, {}
    head = _HEAD.match(sql)
    if head is None:
        return sql, {}
    start = head.end()
    clause = _CLAUSE.match(sql, start)
    if clause is None:
        return sql, {}
    if clause.group("options") is None and re.match(_GAP + r"\bOPTIONS\b", sql[clause.end():],
                                                     re.IGNORECASE | re.DOTALL):
        raise ParseError("WITH DIFFERENTIAL_PRIVACY OPTIONS needs (key = number, ...) "
                         "without nested parentheses")
    options = _parse_options(clause.group("body")) if clause.group("options") else {}
    filler = " " + "\n" * sql.count("\n", start, clause.end())
    return sql[:start] + filler + sql[clause.end():].lstrip(" \t"), options


def _parse_options(body: str) -> dict[str, int | float]:
    options: dict[str, int | float] = {}
    if not body.strip():
        return options
    for item in body.split(","):
        pair = _PAIR.match(item)
        if pair is None:
            raise ParseError(
                f"differential privacy options must be 'key = number' pairs, got {item.strip()!r}"
            )
        key, value = pair.group("key").lower(), pair.group("value")
        if key not in OPTION_KEYS:
            raise UnsupportedQueryError(
                f"unknown differential privacy option {key!r}; known options: "
                + ", ".join(OPTION_KEYS)
            )
        name = OPTION_KEYS[key]
        if name in options:
            raise ParseError(f"differential privacy option {key} is given twice")
        options[name] = _number(key, value)
    return options


def _number(key: str, text: str) -> int | float:
    if _INTEGER.match(text):
        return int(text)
    if _NUMBER.match(text):
        value = float(text)
        if math.isfinite(value):
            return value
    raise ParseError(f"differential privacy option {key}: {text[:40]} is not a finite number")


__all__ = ["OPTION_KEYS", "lift_dp_options"]
