"""Comparisons that can never be true: a mistake, refused for free.

``WHERE sex = 'M'`` over an integer column compares numbers with a text that is no
number. The backends disagree on what that means (DuckDB fails on the cast, which the
error guards turn into NULL, so no row matches; PostgreSQL refuses the query; SQLite
compares storage classes and matches nothing), and no reading gives the analyst what
they meant. Answering it would charge the budget for a query that can only return
empty groups, so it is refused before the charge, naming the column and both types.

Refused, each with what to write instead:

* a number column against a text that is not a number, a boolean column against a
  text that is no truth value, a date or timestamp column against a number or a text
  without a digit;
* a text column of a catalog table against a number, in either direction
  (``department = 1``, ``1 < department``): DuckDB fails on the cast for every row
  that is no number (or refuses to bind an ordering), PostgreSQL has no such operator,
  SQLite compares it as text; write the number as a text (``department = '1'``);
* a date or timestamp column against a text that no engine reads as one
  (``visit_date < '2024-02-30'``), and ``DATE '2024-02-30'`` anywhere: DuckDB's own
  cast (``TRY_CAST`` in a scratch database, over the literal alone) decides;
* ``=``, ``IS NOT DISTINCT FROM`` and ``IN`` of a column that has a ``values`` list
  against literals all outside it (``department = 'Cardiology'`` when the public
  values are lower-case): the message names the nearest public values. (``<>`` and
  ``NOT IN`` match every declared value then, and an ``IN`` list with one declared
  value can match: both are answered.)

``age = '30'`` is left alone: every backend reads that text as the number 30.

**Privacy**: every decision reads the query text and the catalog (types and ``values``
lists, which are public: ``GROUP BY`` releases them) and nothing else; the date check
casts the analyst's own literal in a fresh scratch DuckDB that holds no data. So
whether a query is refused, and the message, are the same on every database with
this catalog: no refusal is an oracle on the rows. Columns of derived tables (whose
types dpsql guesses for expressions) are checked only where a type mismatch is
certain, and the text-against-number and ``values`` rules apply to catalog tables
only.

>>> from sqlglot import parse_one
>>> from dpsql.analyze.scope import build_scope
>>> from dpsql.datasets import pums_catalog
>>> q = parse_one("SELECT COUNT(*) FROM pums WHERE sex = 'M'")
>>> try:
...     check_comparisons(q, build_scope(q, pums_catalog())[0])
... except AnalysisError as exc:
...     print(str(exc)[:69])
sex = 'M' compares column 'sex' (int) with the text 'M', which is not
>>> q = parse_one("SELECT COUNT(*) FROM pums WHERE race IN (0, 7)")
>>> try:
...     check_comparisons(q, build_scope(q, pums_catalog())[0])
... except AnalysisError as exc:
...     print(str(exc))  # doctest: +ELLIPSIS
race IN (0, 7) compares column 'race' with 0, which is not one of its public values...
"""

from __future__ import annotations

import datetime
import difflib
import re

import duckdb
import pyarrow as pa
from sqlglot import exp

from dpsql.analyze.scope import Scope
from dpsql.catalog import Column
from dpsql.errors import AnalysisError, UnknownColumnError, UnknownTableError
from dpsql.sqlbuild import data_type

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ)
#: Comparisons true only for one of their literals: outside a ``values`` list, never.
_MEMBERSHIP = (exp.EQ, exp.NullSafeEQ, exp.In)
_NUMBER = re.compile(r"\s*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*")
_FLOAT_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan"}
_TRUTH = {"true", "false", "t", "f", "yes", "no", "y", "n", "1", "0", "on", "off"}
_TEMPORAL_WORDS = {"infinity", "-infinity", "epoch"}
_EXAMPLE = {"int": "1", "float": "1.5", "bool": "TRUE", "date": "DATE '2000-01-31'",
            "timestamp": "TIMESTAMP '2000-01-31 12:00:00'", "string": "'text'"}
#: Date and timestamp texts every engine reads alike (checked in Python, no scratch).
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ISO_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2}(:[0-9]{2}"
                            r"(\.[0-9]{1,6})?)?)?")
_TEMPORAL_TYPES = {"date": exp.DataType.Type.DATE, "timestamp": exp.DataType.Type.TIMESTAMP}


def check_comparisons(select: exp.Select, scope: Scope) -> None:
    """Refuses a comparison of a catalog column with a literal it can never equal.

    ``select`` is the analysed SELECT (columns resolved against ``scope``); the JOIN
    conditions in ``scope`` are checked too. Derived tables and IN subqueries are
    checked by their own analysis.

    Raises:
        AnalysisError: names the comparison, the column, its type and the literal,
            and what to write instead; nothing has been charged.
    """
    roots = [select] + [s.on for s in scope.sources if s.on is not None and not s.hidden]
    trusted = _catalog_columns(scope)
    dates: list[tuple[exp.Expression, str, str, str | None]] = []
    memberships = []
    for root in roots:
        for node in root.find_all(*_COMPARISONS, exp.Between, exp.In):
            if node.find_ancestor(exp.Subquery) is not None:
                continue
            if isinstance(node, exp.In):
                if node.args.get("query") is not None:
                    continue
                pairs = [(node.this, e) for e in node.expressions]
            elif isinstance(node, exp.Between):
                pairs = [(node.this, node.args.get("low")), (node.this, node.args.get("high"))]
            else:
                pairs = [(node.this, node.expression), (node.expression, node.this)]
            for side, other in pairs:
                column = _catalog_column(side, scope)
                literal = _literal(other)
                if column is None or literal is None:
                    continue
                catalog = any(column is c for c in trusted)
                if not _can_match(column, literal, catalog):
                    _refuse(node, side.unnest(), column, literal)
                if catalog and column.type in _TEMPORAL_TYPES and literal.is_string \
                        and not _plain_temporal(literal.this, column.type):
                    dates.append((node, literal.this, column.type, column.name))
                if catalog and column.values and isinstance(node, _MEMBERSHIP) \
                        and column.type in ("int", "float", "string") and not _negated(node):
                    memberships.append((node, column, literal))
        for cast in root.find_all(exp.Cast):
            literal = cast.this.unnest()
            if isinstance(literal, exp.Literal) and literal.is_string \
                    and cast.find_ancestor(exp.Subquery) is None:
                for kind, dtype in _TEMPORAL_TYPES.items():
                    if cast.to.is_type(dtype) and not _plain_temporal(literal.this, kind):
                        dates.append((cast, literal.this, kind, None))
    _check_dates(dates)
    outside: dict[int, list] = {}
    for node, column, literal in memberships:
        if not _is_member(column, literal):
            outside.setdefault(id(node), []).append((node, column, literal))
    for found in outside.values():
        node = found[0][0]
        # IN matches if any of its values can: refused only when none of them can
        if not isinstance(node, exp.In) or len(found) == len(node.expressions):
            _refuse_member(*found[0])


def _negated(node: exp.Expression) -> bool:
    """Whether ``node`` sits right under NOT (``NOT x IN (...)`` matches, it does not miss)."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return isinstance(parent, exp.Not)


def _catalog_columns(scope: Scope) -> list[Column]:
    """The Column entries of the catalog tables in ``scope`` (derived ones excluded)."""
    found = []
    for s in scope.sources:
        if not s.table.derived:
            found.extend(s.table.columns.values())
        if s.inner is not None:
            found.extend(_catalog_columns(s.inner))
    return found


def _literal(node: exp.Expression | None) -> exp.Literal | None:
    """A literal operand (``-5`` as the number literal ``-5``), or None."""
    node = node.unnest() if node is not None else None
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) \
            and not node.this.is_string:
        # built directly: Literal.number("-5") is Neg(5) again in sqlglot 30
        return exp.Literal(this="-" + node.this.this, is_string=False)
    return node if isinstance(node, exp.Literal) else None


def _catalog_column(side: exp.Expression, scope: Scope) -> Column | None:
    side = side.unnest()
    if not isinstance(side, exp.Column) or side.name.startswith("__"):
        return None
    try:
        return scope.column(side)
    except (KeyError, UnknownTableError, UnknownColumnError):
        return None


def _can_match(column: Column, literal: exp.Literal, catalog: bool = True) -> bool:
    """Whether a value of ``column``'s type can ever equal ``literal``.

    ``catalog``: the column belongs to a catalog table (its type is the owner's, not
    dpsql's guess for a derived table's expression), so a text column against a number
    is refused too.
    """
    text = literal.this
    if not literal.is_string:
        if column.type == "string":
            return not catalog
        return column.type not in ("date", "timestamp")
    if column.type in ("int", "float"):
        return bool(_NUMBER.fullmatch(text)) or (
            column.type == "float" and text.strip().lower() in _FLOAT_WORDS)
    if column.type == "bool":
        return text.strip().lower() in _TRUTH
    if column.type in ("date", "timestamp"):
        return any(ch.isdigit() for ch in text) or text.strip().lower() in _TEMPORAL_WORDS
    return True  # a text column against a text


def _refuse(node: exp.Expression, side: exp.Column, column: Column,
            literal: exp.Literal) -> None:
    shown = _shown(node)
    value = literal.sql(dialect="duckdb")
    value = value if len(value) <= 30 else value[:30] + "..."
    kind = f"the text {value}" if literal.is_string else f"the number {value}"
    what = {"int": "number", "float": "number", "bool": "truth value",
            "date": "date", "timestamp": "timestamp", "string": "text"}[column.type]
    example = _EXAMPLE[column.type]
    if column.type == "string":  # the number as a text: what the analyst likely meant
        example = exp.Literal.string(literal.this).sql(dialect="duckdb")[:32]
    raise AnalysisError(
        f"{shown} compares column {column.name!r} ({column.type}) with {kind}, which is "
        f"not a {what}: it can never be true; nothing was charged. Compare it with a "
        f"{what} (e.g. {side.sql(dialect='duckdb')} = {example})")


def _shown(node: exp.Expression, limit: int = 60) -> str:
    shown = node.sql(dialect="duckdb")
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _quoted(text: str, limit: int = 40) -> str:
    shown = exp.Literal.string(text).sql(dialect="duckdb")
    return shown if len(shown) <= limit else shown[:limit] + "..."


# -- texts that are no date ------------------------------------------------------------

def _plain_temporal(text: str, kind: str) -> bool:
    """Whether ``text`` is a strict ISO date (or timestamp) that exists.

    These are read alike by every engine, so no scratch database is opened for them.
    """
    pattern = _ISO_DATE if kind == "date" else _ISO_TIMESTAMP
    if not pattern.fullmatch(text):
        return False
    try:
        if kind == "date":
            datetime.date.fromisoformat(text)
        else:
            datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _check_dates(found: list[tuple[exp.Expression, str, str, str | None]]) -> None:
    """Refuses the first text DuckDB cannot read as the date (or timestamp) it meets.

    All of a query's texts are cast at once, in one fresh scratch database
    (:func:`dpsql.scratch.scratch`) that holds only them: the texts go in as a table,
    never as SQL. DuckDB casts such a literal to the column's type when it compares, so
    a text its ``TRY_CAST`` makes NULL fails (or, guarded, matches nothing) for every
    row whatever the data hold.
    """
    if not found:
        return
    from dpsql.scratch import checked_sql, scratch

    texts = [text for _, text, _, _ in found]
    query = exp.select(*(
        exp.TryCast(this=exp.column("__c0"), to=data_type(kind.upper()))
        for kind in ("date", "timestamp"))).from_("__in0")
    with scratch() as con:
        try:
            con.register("__in0", pa.table({"__c0": texts}))
            rows = con.execute(checked_sql(query)).fetchall()
        except (duckdb.Error, pa.ArrowException):
            return  # not decided here: left to the backend's own check
    for (node, text, kind, name), (as_date, as_timestamp) in zip(found, rows, strict=True):
        if (as_date if kind == "date" else as_timestamp) is not None:
            continue
        subject = f"compares column {name!r} ({kind}) with" if name else "casts"
        example = "DATE '2024-02-29'" if kind == "date" else \
            "TIMESTAMP '2024-02-29 12:00:00'"
        raise AnalysisError(
            f"{_shown(node)} {subject} the text {_quoted(text)}, which is not a valid "
            f"{kind}, so it can never be true; nothing was charged. Write a {kind} that "
            f"exists, as YYYY-MM-DD{' HH:MM:SS' if kind == 'timestamp' else ''} "
            f"(e.g. {example})")


# -- literals outside a public domain --------------------------------------------------

def _is_member(column: Column, literal: exp.Literal) -> bool:
    """Whether ``literal`` is one of ``column``'s public ``values`` (as the engines compare)."""
    values = [v for v in column.values if v is not None]
    if column.type == "string":
        # (CHAR(n) in PostgreSQL ignores trailing spaces)
        return not literal.is_string or literal.this in values or literal.this.rstrip() in values
    try:
        wanted = float(literal.this)
    except ValueError:
        return True  # not decided here
    return any(wanted == v for v in values)


def _refuse_member(node: exp.Expression, column: Column, literal: exp.Literal) -> None:
    """Refuses ``literal`` compared for equality with a column whose values lack it.

    The column's ``values`` list is its public domain: ``GROUP BY`` releases exactly
    these keys and leaves other rows out. A literal outside it is almost always a typo
    (a case, a plural, a code), and the query would be charged for a comparison that
    no declared value satisfies, so it is refused, naming the nearest public values.
    """
    values = [v for v in column.values if v is not None]
    wanted = literal.this if literal.is_string else float(literal.this)
    nearest = _nearest(wanted, values)
    shown = ", ".join(_value(v) for v in nearest)
    listing = ""
    if len(values) <= 12:
        listing = f" (its public values: {', '.join(_value(v) for v in values)})"
    raise AnalysisError(
        f"{_shown(node)} compares column {column.name!r} with "
        f"{_quoted(literal.this) if literal.is_string else literal.this}, which is not one "
        f"of its public values{listing}, so no declared value can match; nothing was "
        f"charged. The nearest public value{'s' if len(nearest) > 1 else ''}: {shown}")


#: Most public values compared by spelling with a literal outside them.
_MAX_SPELLING = 2000


def _nearest(wanted, values: list) -> list:
    """Up to three public values closest to ``wanted`` (by spelling, or by distance).

    >>> _nearest("Cardiology", ["cardiology", "emergency", "neurology", "oncology"])
    ['cardiology']
    >>> _nearest(7, [1, 2, 3, 4, 5, 6])
    [6, 5]
    """
    if isinstance(wanted, str):
        texts = [v for v in values if isinstance(v, str)]
        folded = [v for v in texts if v.casefold() == wanted.casefold()]
        if folded:
            return folded[:3]
        if len(texts) > _MAX_SPELLING or len(wanted) > 100:
            return texts[:3]  # comparing spellings costs len² per value: bounded work
        by_fold = {v.casefold(): v for v in texts}
        close = difflib.get_close_matches(wanted.casefold(), list(by_fold), n=3, cutoff=0.5)
        return [by_fold[c] for c in close] or texts[:3]
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return sorted(numbers, key=lambda v: (abs(v - wanted), v))[:2]


def _value(v) -> str:
    return _quoted(v) if isinstance(v, str) else str(v)
