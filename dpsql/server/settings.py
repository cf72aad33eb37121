"""A session's settings: their defaults, names, the values SET may give them, and
libpq's ``options``.

PostgreSQL's own settings are kept as text and reported back (those in
:data:`REPORTED`); dpsql's (``dpsql.epsilon``...) are checked here, before they can
reach a query.
"""

from __future__ import annotations

import re

from dpsql.server.catalog_db import SERVER_VERSION
from dpsql.server.sqlstate import QueryError

#: Settings reported to the client at start (and again when SET changes them).
REPORTED = ("server_version", "server_encoding", "client_encoding", "DateStyle",
            "TimeZone", "integer_datetimes", "standard_conforming_strings",
            "application_name", "is_superuser", "session_authorization", "IntervalStyle")

#: dpsql's own settings (``SET dpsql.epsilon = 0.5``...).
DPSQL_SETTINGS = ("dpsql.epsilon", "dpsql.delta", "dpsql.error_columns",
                  "dpsql.max_groups", "dpsql.max_rows")

#: The spellings of on and off.
TRUE = {"on", "true", "1", "yes", "t", "y"}
_FALSE = {"off", "false", "0", "no", "f", "n"}


def default_settings(login: str) -> dict[str, str]:
    """The settings a session of ``login`` starts with (as PostgreSQL 15 reports them)."""
    return {"server_version": SERVER_VERSION, "server_encoding": "UTF8",
            "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "TimeZone": "UTC",
            "integer_datetimes": "on", "standard_conforming_strings": "on",
            "application_name": "", "is_superuser": "off", "session_authorization": login,
            "IntervalStyle": "postgres", "search_path": '"$user", public',
            "transaction_isolation": "read committed", "extra_float_digits": "1",
            "max_identifier_length": "63", "lc_collate": "C", "lc_ctype": "C",
            "default_transaction_isolation": "read committed",
            "default_transaction_read_only": "on", "transaction_read_only": "on",
            "statement_timeout": "0", "server_version_num": "150000"}



def checked_setting(name: str, value: str) -> tuple[str, str]:
    """``SET name = value`` as (the setting's name, the value to keep).

    Raises:
        QueryError: an unknown ``dpsql.`` setting, a value it may not take, or a
            client encoding other than UTF8.
    """
    key = canonical(name)
    low = key.lower()
    if low.startswith("dpsql."):
        return low, _dpsql_value(name, low, value)
    if low == "client_encoding" and unquote(value.strip()).upper().replace(
            "-", "") not in ("UTF8", "UNICODE"):
        raise QueryError("22023", "only client_encoding UTF8 is supported")
    if low == "client_encoding":
        value = "UTF8"
    return key, value


def _dpsql_value(name: str, low: str, value: str) -> str:
    """The value to keep for dpsql's setting ``low`` (written ``name``): epsilon
    positive and finite, delta in [0, 1), error_columns on or off, the limits whole
    numbers of at least 1."""
    if low not in DPSQL_SETTINGS:
        raise QueryError("42704", f'unrecognized configuration parameter "{name}"; '
                         f"dpsql's are {', '.join(DPSQL_SETTINGS)}")
    value = value.strip()
    try:
        if low == "dpsql.error_columns":
            if value.lower() not in TRUE | _FALSE:
                raise ValueError
            value = "on" if value.lower() in TRUE else "off"
        elif low in ("dpsql.epsilon", "dpsql.delta"):
            x = float(value)
            if (low == "dpsql.epsilon" and not 0 < x < float("inf")) or \
                    (low == "dpsql.delta" and not 0 <= x < 1):
                raise ValueError
        else:
            if int(value) < 1:
                raise ValueError
    except ValueError:
        raise QueryError("22023", f"invalid value for {low}: {value!r}") from None
    return value


_CANONICAL = {k.lower(): k for k in (*REPORTED, "search_path", "extra_float_digits")}


def canonical(name: str) -> str:
    """A setting's name as PostgreSQL spells it (``datestyle`` → ``DateStyle``)."""
    name = name.strip().strip('"')
    return _CANONICAL.get(name.lower(), name.lower())


def unquote(value: str) -> str:
    """A value without its quotes (``'it''s'`` → ``it's``)."""
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value



def split_commas(value: str) -> list[str]:
    """A list value split at the commas outside quotes."""
    out, cur, quote = [], "", None
    for ch in value:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote, cur = ch, cur + ch
        elif ch == ",":
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def parse_options(options: str) -> list[tuple[str, str]]:
    """``-c name=value --name=value`` (libpq's ``options``) → pairs.

    >>> parse_options("-c dpsql.error_columns=on --dpsql.epsilon=0.5")
    [('dpsql.error_columns', 'on'), ('dpsql.epsilon', '0.5')]
    """
    out = []
    words = re.findall(r"(?:\\.|\S)+", options or "")
    i = 0
    while i < len(words):
        w = words[i].replace("\\ ", " ")
        if w == "-c" and i + 1 < len(words):
            w, i = "--" + words[i + 1].replace("\\ ", " "), i + 1
        elif w.startswith("-c"):
            w = "--" + w[2:]
        if w.startswith("--") and "=" in w:
            k, v = w[2:].split("=", 1)
            out.append((k.replace("-", "_") if not k.startswith("dpsql") else k, v))
        i += 1
    return out




__all__ = ["DPSQL_SETTINGS", "REPORTED", "TRUE", "canonical", "checked_setting",
           "default_settings", "parse_options", "split_commas", "unquote"]
