"""Query parameters: ``?`` placeholders bound as SQL literals through sqlglot's tree.

One implementation serves :meth:`dpsql.Connection.execute` (``conn.execute(sql,
[18], epsilon=1.0)``), the DB-API (:func:`dpsql.dbapi.bind_parameters`, which
re-raises these errors as PEP 249's ``ProgrammingError`` and ``DataError``) and
``dpsql serve``. Each ``?`` is replaced, in text order, by the literal of its value
and the SQL is regenerated from the tree: values never pass through string
formatting, so a quote in a value cannot end its literal, and a value can only ever be
a literal (never a name, an operator or a second statement).

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


class QmarkDuckDB(DuckDB):
    """DuckDB's dialect, with the text position of each ``?`` kept on its node."""

    class Parser(DuckDB.Parser):
        PLACEHOLDER_PARSERS = {
            **DuckDB.Parser.PLACEHOLDER_PARSERS,
            TokenType.PLACEHOLDER:
                lambda self: self.expression(exp.Placeholder()).update_positions(self._prev),
        }

    class Generator(DuckDB.Generator):
        def withingroup_sql(self, expression: exp.WithinGroup) -> str:
            # DuckDB's generator writes PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x) as
            # QUANTILE_CONT(x, q ORDER BY x), which dpsql does not read back: keep the
            # standard spelling the analyst wrote
            func = expression.this
            if isinstance(func, exp.PercentileCont | exp.PercentileDisc) and not func.args.get(
                    "expression"):
                name = "PERCENTILE_CONT" if isinstance(func, exp.PercentileCont) else \
                    "PERCENTILE_DISC"
                order = self.sql(expression, "expression").lstrip()
                return f"{name}({self.sql(func, 'this')}) WITHIN GROUP ({order})"
            return super().withingroup_sql(expression)


def _literal(value: Any, position: int) -> exp.Expression:
    if value is None or isinstance(value, bool | str | datetime.date | datetime.time):
        return exp.convert(value)
    if isinstance(value, numbers.Integral):
        return exp.convert(int(value))
    if isinstance(value, decimal.Decimal | numbers.Real):
        finite = value.is_finite() if isinstance(value, decimal.Decimal) else math.isfinite(value)
        if not finite:
            raise ParameterValueError(f"parameter {position}: {value!r} is not a finite number")
        return exp.convert(value if isinstance(value, decimal.Decimal) else float(value))
    raise ParameterError(
        f"parameter {position}: values of type {type(value).__name__} cannot be bound; "
        "use None, bool, int, float, Decimal, str, date, time or datetime"
    )


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
        tree = parse_statements(sql, QmarkDuckDB)[0]
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
    holders.sort(key=lambda h: h.meta["start"])
    for position, (holder, value) in enumerate(zip(holders, parameters, strict=True), 1):
        holder.replace(_literal(value, position))
    return tree.sql(dialect=QmarkDuckDB)


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
