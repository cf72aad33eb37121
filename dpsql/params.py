"""Query parameters: ``?`` placeholders bound as SQL literals through sqlglot's tree.

One implementation serves :meth:`dpsql.Connection.execute` (``conn.execute(sql,
[18], epsilon=1.0)``), the DB-API (:func:`dpsql.dbapi.bind_parameters`, which
re-raises these errors as PEP 249's ``ProgrammingError`` and ``DataError``) and
``dpsql serve``. Each ``?`` token (found by sqlglot's tokenizer, so not one inside a
string, a quoted name or a comment) is replaced, in text order, by the text sqlglot
writes for the value's literal; the rest of the analyst's text is kept as written.
Values never pass through string formatting, so a quote in a value cannot end its
literal, and the bound text is read back and compared with the query, node type by node
type, so a value can only ever be one literal (never a name, an operator or a second
statement). Nothing here subclasses sqlglot's classes: its compiled build
(``sqlglot[c]``), loaded whenever it is installed, forbids that.

>>> bind_parameters("SELECT COUNT(*) FROM t WHERE a = ? AND b > ?", ["O'Hara", 3])
"SELECT COUNT(*) FROM t WHERE a = 'O''Hara' AND b > 3"
>>> bind_parameters("SELECT COUNT(*) FROM t WHERE a = ?", [])
Traceback (most recent call last):
...
dpsql.errors.ParameterError: the query has 1 '?' placeholder but 0 parameters were given
"""

from __future__ import annotations

import datetime
import decimal
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.tokens import TokenType

from dpsql.errors import ParameterError, ParameterValueError, PrivacyParameterError
from dpsql.parse import parse as _parse
from dpsql.parse import parse_statements

#: The dialect the analyst's SQL is read in (dpsql's own, :mod:`dpsql.parse`).
_DIALECT = DuckDB()


def _qmarks(sql: str) -> list[tuple[int, int]]:
    """The text span ``[start, end)`` of each ``?`` placeholder token, in text order.

    Spans come from sqlglot's tokenizer, so a ``?`` inside a string literal, a quoted
    name or a comment is not one.
    """
    return [(token.start, token.end + 1) for token in _DIALECT.tokenize(sql)
            if token.token_type == TokenType.PLACEHOLDER and token.text == "?"]


#: Characters a literal may directly follow or precede: none of them forms one token
#: with a literal's first character (a digit, a quote, ``(`` or a letter) or its last.
#: Anything else gets a space, so ``x=-?`` cannot become the comment ``x=--3`` and
#: ``'a'?`` cannot join two strings.
_JOINS_LEFT = "(,=<>+-*/%|&^!~["
_JOINS_RIGHT = "),;=<>+-*/%|&^!~]:"


def _spliced(sql: str, spans: list[tuple[int, int]], literals: list[str]) -> str:
    """``sql`` with each span replaced by its literal's text.

    A literal that is more than one token (``-3``, ``CAST('2020-01-02' AS DATE)``) is
    parenthesised when it starts with an operator, so it stays one operand whatever
    surrounds it; a space is put where the neighbouring character could otherwise join
    it into another token (``x=-?`` must not become the comment ``x=--3``).
    """
    out, last = [], 0
    for (start, end), text in zip(spans, literals, strict=True):
        if text.startswith("-"):
            text = f"({text})"
        before, after = sql[start - 1:start], sql[end:end + 1]
        pad_left = " " if before and not before.isspace() and before not in _JOINS_LEFT else ""
        pad_right = " " if after and not after.isspace() and after not in _JOINS_RIGHT else ""
        out += [sql[last:start], pad_left, text, pad_right]
        last = end
    out.append(sql[last:])
    return "".join(out)


def _literal(value: Any, position: int) -> str:
    """The DuckDB text of ``value`` as a literal of the value DuckDB's own binding gives.

    Floats are written with an exponent (``0.1e0``), which DuckDB reads as DOUBLE (a
    plain ``0.1`` would be a DECIMAL, and ``0.1 + 0.2 = 0.3`` would hold); ``repr`` keeps
    every bit, and ``-0.0`` keeps its sign. A Decimal is its exact value cast to the
    DECIMAL type DuckDB's binding gives it, or, past 38 digits, the DOUBLE DuckDB binds
    it to. A time with a time zone keeps it (TIMETZ). Integers are exact;
    their DuckDB type can differ where DuckDB's binding picks an unsigned type.
    """
    if isinstance(value, datetime.time) and value.tzinfo is not None:
        return f"CAST('{value.isoformat()}' AS TIMETZ)"
    if value is None or isinstance(value, bool | str | datetime.date | datetime.time):
        return exp.convert(value).sql(dialect="duckdb")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, decimal.Decimal | numbers.Real):
        finite = value.is_finite() if isinstance(value, decimal.Decimal) else math.isfinite(value)
        if not finite:
            raise ParameterValueError(f"parameter {position}: {value!r} is not a finite number")
        if isinstance(value, decimal.Decimal):
            width, scale = _decimal_type(value)
            if width <= 38:
                return f"CAST({format(value, 'f')} AS DECIMAL({width}, {scale}))"
            value = float(value)
        text = repr(float(value))
        return text if "e" in text else text + "e0"
    raise ParameterError(
        f"parameter {position}: values of type {type(value).__name__} cannot be bound; "
        "use None, bool, int, float, Decimal, str, date, time or datetime"
    )


def _decimal_type(value: decimal.Decimal) -> tuple[int, int]:
    """The DECIMAL(width, scale) DuckDB's own binding gives ``value`` (read off DuckDB
    2.0: ``0.5`` is (1, 1), ``0.05`` (3, 2), ``0.1000`` (4, 4), ``1E+2`` (3, 0)); past a
    width of 38 DuckDB binds a DOUBLE.

    >>> _decimal_type(decimal.Decimal("0.05")), _decimal_type(decimal.Decimal("12.5"))
    ((3, 2), (3, 1))
    """
    digits, exponent = len(value.as_tuple().digits), value.as_tuple().exponent
    if exponent >= 0:
        return digits + exponent, 0
    scale = -exponent
    return (digits if digits >= scale else scale + 1), scale


def bind_parameters(sql: str, parameters: Sequence[Any] | None) -> str:
    """Binds qmark parameters as SQL literals, through sqlglot's syntax tree.

    Each ``?`` is replaced, in text order, by the literal of its value; the SQL is then
    regenerated. Without parameters and without a placeholder the text is returned as
    it is.

    Raises:
        ParameterError: wrong number of parameters, a mapping or string given as the
            parameters, named or numbered placeholders, a value of an unsupported type.
        ParameterValueError: a NaN or infinite number.
        ParseError, UnsupportedQueryError: the SQL itself does not parse.
    """
    if parameters is None:
        parameters = ()
    if isinstance(parameters, str | bytes | Mapping) or not isinstance(parameters, Sequence):
        raise ParameterError(
            f"parameters must be a sequence (paramstyle 'qmark'), not {type(parameters).__name__}"
        )
    if not parameters and "?" not in sql and "$" not in sql and ":" not in sql:
        return sql
    _parse(sql)  # length, syntax and one statement, checked with dpsql's messages
    try:
        tree = parse_statements(sql, _DIALECT)[0]
    except sqlglot.errors.SqlglotError as exc:
        raise ParameterError(f"cannot parse SQL: {str(exc).splitlines()[0][:200]}") from None
    holders = list(tree.find_all(exp.Placeholder, exp.Parameter))
    named = [h for h in holders if not isinstance(h, exp.Placeholder) or h.this is not None]
    if named:
        raise ParameterError(
            f"placeholder {named[0].sql(dialect='duckdb')!r}: only '?' parameters are "
            "supported (paramstyle 'qmark')"
        )
    if len(holders) != len(parameters):
        plural = "" if len(holders) == 1 else "s"
        raise ParameterError(
            f"the query has {len(holders)} '?' placeholder{plural} but {len(parameters)} "
            "parameters were given"
        )
    if not holders:
        return sql
    _refuse_non_values(holders)
    spans = _qmarks(sql)
    if len(spans) != len(holders):
        raise ParameterError(
            f"cannot bind parameters: {len(spans)} '?' tokens but {len(holders)} placeholders "
            "in the parsed query")
    literals = [_literal(value, position) for position, value in enumerate(parameters, 1)]
    bound = _spliced(sql, spans, literals)
    _check_binding(tree, bound)
    return bound


#: Where a ``?`` would not stand for a value: a name's part (``t.?``, which sqlglot reads
#: as a column named by the value), a GROUP BY or ORDER BY item (a literal there is an
#: output's position). DuckDB refuses a parameter in all of these.
_NOT_VALUES = (exp.Column, exp.Dot, exp.Table, exp.Group, exp.Ordered)


def _refuse_non_values(holders: list[exp.Expression]) -> None:
    for holder in holders:
        if isinstance(holder.parent, _NOT_VALUES):
            raise ParameterError(
                "a '?' can only stand for a value, not for a name or a GROUP BY or ORDER "
                "BY item; write the name or the position in the SQL")


def _check_binding(tree: exp.Expression, bound: str) -> None:
    """Checks that the bound text reads as the query with a literal at each ``?``.

    The bound text is the analyst's own text with each ``?`` token replaced by the text
    sqlglot writes for the value's literal, so the analyst's spelling is kept (nothing is
    regenerated). This check makes the construction's claim a fact for each query: the
    bound text parses to a tree with no placeholder left and, placeholders aside, the same
    nodes as the analyst's query, so a value cannot have become a name, an operator or
    a second statement.
    """
    try:
        read = parse_statements(bound, _DIALECT)
    except sqlglot.errors.SqlglotError as exc:
        raise ParameterError(
            f"a parameter value does not read back as a literal: {str(exc).splitlines()[0][:200]}"
        ) from None
    if len(read) != 1 or any(True for _ in read[0].find_all(exp.Placeholder, exp.Parameter)):
        raise ParameterError("a parameter value does not read back as a literal")
    if _shape(read[0]) != _shape(tree):
        raise ParameterError("a parameter value does not read back as a literal")


def _shape(tree: exp.Expression) -> list[str]:
    """The node types of ``tree`` in order, with each literal or placeholder as one
    leaf: what must agree between the query and its bound text."""
    shape, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Placeholder | exp.Literal | exp.Null | exp.Boolean) or (
                isinstance(node, exp.Cast | exp.Neg | exp.Paren) and _is_literal(node)):
            shape.append("literal")
            continue
        shape.append(type(node).__name__)
        stack.extend(reversed(list(node.iter_expressions())))
    return shape


def _is_literal(node: exp.Expression) -> bool:
    while isinstance(node, exp.Paren | exp.Neg | exp.Cast):
        node = node.this
    return isinstance(node, exp.Literal | exp.Null | exp.Boolean | exp.Placeholder)


def refuse_number(params: Any, method: str, keyword: str = "epsilon") -> None:
    """Refuses a number where the query's parameters go (``conn.execute(sql, 30)``).

    The second positional argument of ``execute``, ``explain`` and ``epsilon_for`` is
    the query's parameters; ε (and ``half_width``) are keyword-only. A bare number
    there is the old spelling ``execute(sql, epsilon)``: taking it as ε would spend
    what the analyst may not have meant, and taking it as a parameter would answer
    another question, so it is neither, and the refusal names the keyword.

    Raises:
        PrivacyParameterError: ``params`` is a number (bool, int, float, Decimal, numpy).

    >>> refuse_number(30, "execute")
    Traceback (most recent call last):
    ...
    dpsql.errors.PrivacyParameterError: conn.execute(sql, 30): ...conn.execute(sql, epsilon=30)...
    """
    if isinstance(params, numbers.Number):
        raise PrivacyParameterError(
            f"conn.{method}(sql, {params!r}): the second argument is the query's parameters "
            f"(values for its '?' placeholders, e.g. [18]), and {keyword} is a keyword "
            f"argument: write conn.{method}(sql, {keyword}={params!r}); nothing was charged"
        )
