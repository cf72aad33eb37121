"""Spark SQL's dialect transforms: a rewritten (DuckDB-flavoured) AST becomes SQL
Spark runs without a data-dependent error (see :mod:`dpsql.backends.dialects`).

**Spark SQL** runs dpsql's queries with ``spark.sql.ansi.enabled = false`` (set for
the duration of the query, see :mod:`dpsql.backends.spark`) and on the allow-list path
(:data:`dpsql.backends.spark.TOTAL`): what Spark cannot fail on is listed, every guard
placed on Spark's own types becomes a Spark form on the list (``try_add``/
``try_subtract``/``try_multiply``/``try_divide``, ``TRY_CAST``, a CASE on a range
test), and anything else is refused before the charge. Integers are summed as
DECIMAL(38, 0). The L0 order is ``xxhash64(uid, keys, seed)``.

Spark runs on the allow-list path (:data:`dpsql.backends.spark.TOTAL`): the guards
are placed on the tree typed by Spark itself, then :func:`spark_try` turns each guard
into a Spark form that is on the list (Spark has no generic TRY), and the final tree
is checked against the list on Spark's own types. Nothing here decides what is total.
"""

from __future__ import annotations

import re

from sqlglot import exp

from dpsql.backends.dialects import (
    YEARS,
    Context,
    bottom_up,
    copy_node,
    date_literal,
    guard_keys,
    in_years,
    is_constant,
    order_with_tiebreak,
    python_dates,
    replace_all,
    typed_tables,
)
from dpsql.sqlbuild import data_type
from dpsql.types import DATE, DECIMAL, FLOAT, INT, TIMESTAMP
from dpsql.types import family as type_family

#: DuckDB's binary arithmetic → Spark's TRY forms: numeric overflow and a zero divisor
#: give NULL (TRY evaluation); on dates, timestamps and intervals Spark evaluates them
#: under ``TryEval``, which turns any error of the operation into NULL.
_SPARK_TRY = {exp.Add: "TRY_ADD", exp.Sub: "TRY_SUBTRACT", exp.Mul: "TRY_MULTIPLY",
              exp.Div: "TRY_DIVIDE"}
#: Nodes that choose between or compare operands: Spark converts a DATE operand that
#: meets a TIMESTAMP one per row, which fails ("long overflow") for far dates.
_SPARK_MEETS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ, exp.Between, exp.In, exp.Case, exp.Coalesce, exp.Greatest,
                exp.Least, exp.Nullif)


def _spark_arith(node: exp.Expression, ctx: Context) -> exp.Expression:
    """``a op b`` → ``TRY_op(a, b)``; ``a // b`` of non-integers is DuckDB's plain
    division (``5.5 // 2 = 2.75``), of integers Spark's ``DIV`` (listed); ``-x`` of a
    non-literal → ``TRY_SUBTRACT(0, x)``."""
    name = _SPARK_TRY.get(type(node))
    if name is not None:
        return exp.Anonymous(this=name, expressions=[node.this, node.expression])
    if isinstance(node, exp.IntDiv) and not (ctx.family(node.this) == INT
                                             and ctx.family(node.expression) == INT):
        return exp.Anonymous(this="TRY_DIVIDE", expressions=[node.this, node.expression])
    if isinstance(node, exp.Neg) and not is_constant(node.this):
        return exp.Anonymous(this="TRY_SUBTRACT", expressions=[exp.Literal.number(0),
                                                               node.this])
    return node


def _spark_guard(node: exp.Expression, ctx: Context) -> exp.Expression:
    """The Spark form of ``TRY(node)`` (``node``'s operands already in Spark form).

    Arithmetic → its TRY function; date truncation → ``CASE WHEN x BETWEEN <year 1> AND
    <year 9999> THEN trunc(x) END``; a comparison or choice of DATEs with TIMESTAMPs →
    each DATE operand as ``TRY_CAST(d AS TIMESTAMP)``. Anything else is left as it is:
    the final check refuses it (before the charge) unless it is on the list."""
    if isinstance(node, (*_SPARK_TRY, exp.IntDiv, exp.Neg)):
        return _spark_arith(node, ctx)
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        family = ctx.family(node.this)
        if family in YEARS:
            return _in_years_of(node.this, node, family)
        return node
    if isinstance(node, _SPARK_MEETS):
        slots = [("this", None)] if not isinstance(node, exp.Case) else []
        for key in ("expression", "low", "high"):
            if node.args.get(key) is not None:
                slots.append((key, None))
        for key in ("expressions", "ifs"):
            for i, _ in enumerate(node.args.get(key) or []):
                slots.append((key, i))
        if isinstance(node, exp.Case) and node.args.get("default") is not None:
            slots.append(("default", None))
        values = []
        for key, i in slots:
            value = node.args[key] if i is None else node.args[key][i]
            values.append((value.args["true"] if isinstance(value, exp.If) else value,
                           value if isinstance(value, exp.If) else None, key, i))
        families = {ctx.family(v) for v, *_ in values}
        if not {DATE, TIMESTAMP} <= families:
            return node
        for value, branch, key, i in values:
            if ctx.family(value) != DATE or is_constant(value):
                continue
            cast = exp.TryCast(this=value, to=data_type("TIMESTAMP"), safe=True)
            if branch is not None:
                branch.set("true", cast)
            elif i is None:
                node.set(key, cast)
            else:
                node.args[key][i] = cast
                cast.parent, cast.arg_key, cast.index = node, key, i
        return node
    return node


def _in_years_of(value: exp.Expression, result: exp.Expression,
                 family: str) -> exp.Expression:
    """``CASE WHEN value BETWEEN <year 1> AND <year 9999> THEN result END``."""
    lo, hi = (date_literal(t, family) for t in YEARS[family])
    return exp.Case(ifs=[exp.If(this=exp.Between(this=copy_node(value), low=lo, high=hi),
                                true=result)])


def spark_typed_tables(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every table is read with its dates and timestamps kept to years 1..9999 (NULL
    otherwise).

    Spark stores dates up to about year ±5,800,000 and timestamps up to ±290,000, but
    its DATE to TIMESTAMP conversion, interval arithmetic and ``DATE_TRUNC`` raise "long
    overflow" near those limits, with ANSI mode off: values the driver cannot return
    either. Reading such a value as NULL is row by row and data-independent (a
    comparison of dates cannot fail) and keeps every ordinary value as it is. The
    allow-list does not rely on it: operations that fail on far dates are guarded
    where they are.
    """
    def value(ref: exp.Column, dtype: str) -> exp.Expression | None:
        family = type_family(dtype)
        return in_years(ref, family) if family in YEARS else None
    return typed_tables(expression, ctx, value)


_CANONICAL_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9:.]*)?")


def spark_date_casts(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every cast to DATE or TIMESTAMP (``TRY_CAST`` too, and the literals ``DATE '...'``,
    which are casts) gives NULL outside years 1..9999, as :func:`spark_typed_tables`
    does for stored values (dates the driver could not return). Literals of four-digit
    years are in range already and kept as they are."""
    def fix(node: exp.Cast) -> exp.Expression:
        family = type_family(node.to.sql(dialect="duckdb"))
        if family not in YEARS:
            return node
        if isinstance(node.this, exp.Literal) and node.this.is_string \
                and _CANONICAL_DATE.fullmatch(node.this.this):
            return node
        return in_years(node, family)
    return replace_all(expression, exp.Cast, fix)


def spark_date_diffs(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``a - b`` of two dates → ``DATEDIFF(a, b)``: a number of days, as DuckDB and
    PostgreSQL compute it. Spark's own ``a - b`` is an interval, which overflows
    ("long overflow") for far dates. Run before typing: it translates a meaning."""
    def fix(node: exp.Sub) -> exp.Expression:
        if ctx.family(node.this) == DATE and ctx.family(node.expression) == DATE:
            return exp.Anonymous(this="DATEDIFF", expressions=[node.this, node.expression])
        return node
    return replace_all(expression, exp.Sub, fix)


def spark_try(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """``TRY(x)`` → the Spark form of ``x`` (:func:`_spark_guard`); and every other
    ``+ - * /`` (dpsql's own arithmetic over aggregates included) → its TRY function,
    which is the same operation with NULL instead of an overflow."""
    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Try):
            inner = node.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
            return _spark_guard(inner, ctx)
        if isinstance(node, tuple(_SPARK_TRY)):
            return _spark_arith(node, ctx)
        return node
    return bottom_up(expression, fix)


def spark_casts(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """A cast to an integer type rounds (half to even from DOUBLE, half away from zero
    from DECIMAL) in DuckDB; Spark truncates, so round first."""
    def fix(node):
        if type_family(node.to.sql(dialect="duckdb")) != INT:
            return node
        src = ctx.family(node.this)
        if src == FLOAT:
            node.set("this", exp.Anonymous(this="BROUND", expressions=[node.this]))
        elif src == DECIMAL:
            node.set("this", exp.Round(this=node.this))
        return node
    return replace_all(expression, exp.Cast, fix)


def spark_sums(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Integers are summed as DECIMAL(38, 0): Spark's BIGINT sum wraps past 2**63 with
    ANSI off (a statistic moved far beyond its sensitivity), while 38 digits hold any
    sum of 64-bit values over fewer than 2**48 rows. Run before typing (the family is
    dpsql's guess; the allow-list accepts the sum only if Spark types the argument as
    an integer, and anything else is summed as DOUBLE by the guard placement)."""
    def widen(node):
        if ctx.family(node.this) == INT and not isinstance(node.this, exp.Distinct):
            node.set("this", exp.Cast(this=node.this, to=data_type("DECIMAL(38, 0)")))
        return node
    return replace_all(expression, exp.Sum, widen)


def spark_hash(expression: exp.Expression, ctx: Context) -> exp.Expression:
    return order_with_tiebreak(expression, lambda uid, keys, seed: exp.Anonymous(
        this="XXHASH64", expressions=[uid, *keys, seed]))


def spark_try_casts(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Every cast → ``TRY_CAST`` (marked safe: sqlglot writes an unmarked one as Spark's
    plain CAST). With ANSI mode off the two give the same value wherever CAST does not
    raise, and CAST still raises on some values (a far DATE to TIMESTAMP: "long
    overflow"); TRY_CAST gives NULL there. So no plain CAST is left to judge."""
    def fix(node: exp.Cast) -> exp.Expression:
        if type(node) is exp.Cast:
            return exp.TryCast(this=node.this, to=node.args["to"], safe=True)
        node.set("safe", True)
        return node
    return replace_all(expression, exp.Cast, fix)


def spark_text_keys(expression: exp.Expression, ctx: Context) -> exp.Expression:
    """Text group keys that are not valid UTF-8 become NULL before Spark groups them.

    A Spark string can hold any bytes (a Parquet file written elsewhere); Spark groups
    them by their bytes, but the driver decodes ``0xFF`` as ``'\\ufffd'``, the same text
    as a real U+FFFD: two groups would come back as one key, and one person's group
    would overwrite another's statistics. NULL is decided per row, before grouping, so
    such rows simply join the NULL group. Only keys are guarded: the text is read as it
    is everywhere else (a user key of such bytes stays its own user). Every key is
    guarded, whatever its inferred type: the inference reads columns by name, and a
    derived column named like an integer column (``name AS age``) or an unmodelled
    function would pass for a number; of any other type, ``is_valid_utf8`` reads its
    text, which is always valid."""
    def guard(body: exp.Expression, family: str | None) -> exp.Expression | None:
        valid = exp.Anonymous(this="IS_VALID_UTF8", expressions=[copy_node(body)])
        return exp.Case(ifs=[exp.If(this=valid, true=copy_node(body))])
    return guard_keys(expression, ctx, guard)



#: Functions sqlglot does not model that these transforms write, or that Spark's SQL reads
#: back as such (each on :data:`dpsql.output_check.FUNCTIONS`).
FUNCTIONS = frozenset({"datediff", "is_valid_utf8", "xxhash64", "try_add", "try_subtract",
                       "try_multiply", "try_divide", "try_sum", "bround"})

#: Spark's transforms before typing: translations of DuckDB's meanings.
SPARK_PRE = (spark_date_diffs, spark_sums, spark_hash)
#: ... and after the guards are placed.
SPARK = (spark_try, spark_typed_tables, spark_date_casts, spark_casts, python_dates,
         spark_text_keys, spark_try_casts)
