"""Small AST builders shared by the analysis (derived tables' caps) and the rewrite passes.

A module below both stages, so that the analysis needs nothing of the rewrite.
"""

from __future__ import annotations

import datetime
import functools

import sqlglot
from sqlglot import exp


def table(name: str) -> exp.Table:
    """The table ``name`` (a plain name: dpsql's own, such as ``__per_user``), built as
    sqlglot's parser builds it from the text, without parsing it.

    >>> from sqlglot import parse_one
    >>> table("__per_user") == parse_one("SELECT * FROM __per_user").find(exp.Table)
    True
    """
    return exp.Table(this=exp.to_identifier(name))


def table_alias(name: str) -> exp.TableAlias:
    """The alias ``name`` of a table or CTE (a plain name), as the parser builds it."""
    return exp.TableAlias(this=exp.to_identifier(name))


#: The keys sqlglot's parser writes into a node's ``meta``: where its token stood.
_POSITIONS = ("line", "col", "start", "end")


def unplaced(tree: exp.Expression) -> exp.Expression:
    """``tree`` (changed in place) without the source positions the parser keeps in its
    nodes' ``meta``; other meta entries stay (:mod:`dpsql.parse` keeps the names the
    analyst spelled there).

    No message of dpsql's reads a position, and every copy of a node deep-copies its
    meta dict through :func:`copy.deepcopy` (sqlglot's ``Expression.__deepcopy__``),
    which made a parsed tree two to three times slower to copy than a built one, and
    dpsql copies trees many times a query (the rewrite's passes, each written text).

    >>> tree = unplaced(exp.condition("a = 1"))
    >>> [n for n in tree.walk() if n._meta is not None]
    []
    >>> tree.sql()
    'a = 1'
    """
    for node in tree.walk():
        meta = node._meta
        if meta:
            for key in _POSITIONS:
                meta.pop(key, None)
            if not meta:
                node._meta = None
    return tree


@functools.lru_cache(maxsize=256)
def _condition(text: str) -> exp.Expression:
    return unplaced(exp.condition(text))


def condition(text: str) -> exp.Expression:
    """``sqlglot.condition(text)`` for dpsql's own fixed texts: parsed once per text,
    then a copy each time (sqlglot parses deterministically: the same tree).

    >>> condition("__rank <= 1") == exp.condition("__rank <= 1")
    True
    """
    return _condition(text).copy()


@functools.lru_cache(maxsize=256)
def _data_type(name: str) -> exp.DataType:
    return unplaced(exp.DataType.build(name))


def data_type(name: str) -> exp.DataType:
    """``exp.DataType.build(name)``: parsed once per name, then a copy each time (the
    same tree; callers may change it).

    >>> data_type("DOUBLE") == exp.DataType.build("DOUBLE")
    True
    """
    return _data_type(name).copy()


@functools.lru_cache(maxsize=1024)
def _temporal(value) -> exp.Expression:
    if type(value) is datetime.date:
        # ISO text, four-digit years included: sqlglot's own writes year 999 as
        # '999-01-02', which SQLite's DATE() and Spark read as NULL (attack review)
        text = f"CAST('{value.isoformat()}' AS DATE)"
    else:
        text = exp.convert(value).sql(dialect="duckdb")
    return unplaced(sqlglot.parse_one(text, read="duckdb"))


def constant(value) -> exp.Expression:
    """``exp.convert(value)``, but a date, timestamp or time is the tree sqlglot reads
    from its own text (``CAST('2020-01-02' AS DATE)``), not the DateStrToDate node
    ``exp.convert`` builds: dpsql's memos are keyed by text, and a tree must be judged
    (typed, guarded) exactly as the parse of its text is.

    >>> import datetime, sqlglot
    >>> tree = constant(datetime.date(2020, 1, 2))
    >>> tree == sqlglot.parse_one(tree.sql(dialect="duckdb"), read="duckdb")
    True
    >>> constant(3).sql()
    '3'
    >>> constant(datetime.date(999, 1, 2)).sql()  # four digits, as every engine reads
    "CAST('0999-01-02' AS DATE)"
    """
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return _temporal(value).copy()
    return exp.convert(value)


def number(value: float) -> exp.Expression:
    """A numeric literal; whole floats are written as integers.

    >>> number(-2.0).sql(), number(0.5).sql(), number(1e-05).sql()
    ('-2', '0.5e0', '1e-05')
    """
    if float(value).is_integer() and abs(value) < 2**53:
        text = str(abs(int(value)))
    else:
        # a huge whole bound as float text (1e+300), not a 301-digit integer that
        # engines would type beyond their widest integer; a fraction as a DOUBLE
        # literal (0.5e0), not a DECIMAL one (0.5): DuckDB and Spark compare a
        # DECIMAL(38, s) column with a decimal literal in the column's scale, rounding
        # the literal, so LEAST(GREATEST(x, 0), 0.5) clamped a DECIMAL(38,0) to 1,
        # twice the bound (attack review); against a DOUBLE the column is compared as
        # a DOUBLE, and the bound is exactly the float the analysis used
        text = repr(abs(float(value)))
        if "e" not in text:
            # a fraction, or a whole float from 2^53 to 1e16 ('9007199254740992.0',
            # which Spark types as DECIMAL(17,1): the clamp's BROUND was then refused)
            text += "e0"
    literal = exp.Literal.number(text)
    return exp.Neg(this=literal) if value < 0 else literal


def power_of_two(e: int) -> exp.Literal:
    """``2^e`` as a DOUBLE literal (the ``e`` notation), which parses back to exactly
    ``2^e``: the shortest ``repr`` of a double round-trips, and the engines parse
    decimal text to the nearest double.

    >>> power_of_two(-3).sql(), power_of_two(4).sql()
    ('0.125e0', '16.0e0')
    """
    text = repr(2.0**e)
    if "e" not in text:
        text += "e0"
    return exp.Literal.number(text)


def scaled(value: exp.Expression, j: int) -> exp.Expression:
    """``CAST(value AS DOUBLE) * 2^-j``: ``value`` in units of ``2^j`` (exact: a
    scaling by a power of two), for :func:`fine_sum` and the grid sums.

    >>> scaled(exp.column("x"), -3).sql()
    'CAST(x AS DOUBLE) * 8.0e0'
    """
    return exp.Mul(this=exp.Cast(this=value.copy(), to=data_type("DOUBLE")),
                   expression=power_of_two(-j))


def fine_sum(value: exp.Expression, j: int) -> exp.Expression:
    """``(CAST(SUM(CAST(CAST(value AS DOUBLE) * 2^-j AS BIGINT)) AS DOUBLE) * 2^j)``.

    A sum that depends on its values alone, not on the order the engine adds them in: each
    value is rounded to a multiple of ``2^j`` (the cast rounds, or truncates on
    SQLite; which way does not matter, only that it is a function of the value) and the
    multiples are added as integers, exactly (DuckDB: HUGEINT; PostgreSQL: NUMERIC;
    Spark: DECIMAL(38, 0) by its transforms; SQLite: dpsql's own exact aggregate,
    ``dpsql_isum``), then scaled back. NULL where every value is NULL, as
    ``SUM``. The caller picks ``j`` so that a value's units fit a BIGINT.

    >>> fine_sum(exp.column("x"), -3).sql()
    '(CAST(SUM(CAST(CAST(x AS DOUBLE) * 8.0e0 AS BIGINT)) AS DOUBLE) * 0.125e0)'
    """
    units = exp.Sum(this=exp.Cast(this=scaled(value, j), to=data_type("BIGINT")))
    return exp.paren(exp.Mul(this=exp.Cast(this=units, to=data_type("DOUBLE")),
                             expression=power_of_two(j)), copy=False)


def clamp(
    value: exp.Expression, lower: float | exp.Expression, upper: float | exp.Expression,
    keep_null: bool = False,
) -> exp.Expression:
    """``LEAST(GREATEST(value, lower), upper)``; NULL stays NULL when ``keep_null``.

    GREATEST and LEAST skip NULL arguments (DuckDB, PostgreSQL), so a NULL value would
    become ``lower``; where the value may be NULL and aggregates must ignore it,
    ``keep_null`` guards the clamp with a CASE. A bound is written by :func:`number`
    unless it is given as an expression already.

    >>> clamp(exp.column("x"), 0, 10).sql()
    'LEAST(GREATEST(x, 0), 10)'
    >>> clamp(exp.column("x"), 0, 10, keep_null=True).sql()
    'CASE WHEN x IS NULL THEN NULL ELSE LEAST(GREATEST(x, 0), 10) END'
    """
    low, high = (b if isinstance(b, exp.Expression) else number(b) for b in (lower, upper))
    clamped = exp.Least(
        this=exp.Greatest(this=value, expressions=[low], ignore_nulls=True),
        expressions=[high],
        ignore_nulls=True,
    )
    if not keep_null:
        return clamped
    return exp.Case(
        ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null())],
        default=clamped,
    )
