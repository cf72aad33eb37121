"""Bound parameters: ``$n`` placeholders, their types, and their values.

``$n`` placeholders become the DB-API's ``?`` (:func:`to_qmark`), so the values are
bound by the DB-API's own binding through sqlglot's syntax tree, never by string
formatting. A parameter the client sent without a type gets one from the catalog
column it is compared with (:func:`infer_param_types`), and its text is read as that
type (:func:`coerce`).
"""

from __future__ import annotations

import decimal
import re
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from dpsql.bigquery_options import lift_dp_options
from dpsql.server import protocol as pg

#: The catalog's column types → their PostgreSQL type OIDs.
CATALOG_OIDS = {"int": pg.INT8, "float": pg.FLOAT8, "string": pg.TEXT, "bool": pg.BOOL,
                "date": pg.DATE, "timestamp": pg.TIMESTAMP}
_NUMERIC_OIDS = {pg.INT2, pg.INT4, pg.INT8, pg.FLOAT4, pg.FLOAT8, pg.NUMERIC}


def _tokens(sql: str):
    """PostgreSQL's tokens of ``sql``, by sqlglot."""
    return sqlglot.tokenize(sql, read="postgres")


def to_qmark(sql: str) -> tuple[str, list[int]]:
    """``$n`` placeholders → ``?`` in text order, and which parameter each one is.

    >>> to_qmark("SELECT COUNT(*) FROM t WHERE a > $2 AND b = '$1' AND c < $1")
    ("SELECT COUNT(*) FROM t WHERE a > ? AND b = '$1' AND c < ?", [1, 0])
    """
    if "$" not in sql:
        return sql, []
    spans: list[tuple[int, int, int]] = []
    try:
        tokens = _tokens(sql)
    except sqlglot.errors.SqlglotError:
        return sql, []
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.PARAMETER and i + 1 < len(tokens) and \
                tokens[i + 1].token_type == TokenType.NUMBER and tokens[i + 1].start == \
                tok.end + 1 and tokens[i + 1].text.isdigit():
            spans.append((tok.start, tokens[i + 1].end + 1, int(tokens[i + 1].text) - 1))
        elif tok.token_type == TokenType.PARAMETER and re.fullmatch(r"\$\d+", tok.text):
            spans.append((tok.start, tok.end + 1, int(tok.text[1:]) - 1))
    if not spans:
        return sql, []
    out, last, order = [], 0, []
    for start, end, index in spans:
        out.append(sql[last:start] + "?")
        last = end
        order.append(index)
    out.append(sql[last:])
    return "".join(out), order


def count_params(sql: str) -> int:
    """How many parameters a statement takes (its highest ``$n``)."""
    _, order = to_qmark(sql)
    return max(order) + 1 if order else 0


def infer_param_types(sql: str, catalog) -> dict[int, int]:
    """Parameter index → OID, from the catalog column each ``$n`` is compared with."""
    columns: dict[str, str] = {}
    for table in catalog.tables.values():
        for c in table.columns.values():
            columns.setdefault(c.name.lower(), c.type)
    try:
        body, _ = lift_dp_options(sql)
        tree = sqlglot.parse_one(body, read="postgres")
    except Exception:  # noqa: BLE001 - inference is a nicety: text when it fails
        return {}
    out: dict[int, int] = {}
    for node in tree.find_all(exp.Parameter):
        try:
            index = int(node.name) - 1
        except ValueError:
            continue
        parent = node.parent
        if isinstance(parent, exp.Limit | exp.Offset):
            out[index] = pg.INT8
            continue
        scope = parent.parent if isinstance(parent, exp.Tuple | exp.Paren) else parent
        for col in (scope.find_all(exp.Column) if scope is not None else ()):
            kind = columns.get(col.name.lower())
            if kind is not None:
                out[index] = CATALOG_OIDS.get(kind, pg.TEXT)
                break
    return out


def coerce(value: Any, oid: int) -> Any:
    """A text parameter of unspecified type, read as the type its context needs."""
    if not isinstance(value, str) or oid not in _NUMERIC_OIDS | {pg.BOOL, pg.DATE,
                                                                 pg.TIMESTAMP}:
        return value
    try:
        if oid in (pg.INT2, pg.INT4, pg.INT8) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
            return int(value)
        if oid in _NUMERIC_OIDS:
            d = decimal.Decimal(value.strip())
            return float(d) if oid in (pg.FLOAT4, pg.FLOAT8) else d
        return pg.parse_text(value, oid)
    except (ValueError, decimal.InvalidOperation):
        return value


__all__ = ["CATALOG_OIDS", "coerce", "count_params", "infer_param_types", "to_qmark"]
