"""Pass: remove data-dependent runtime errors from analyst expressions.

An expression that fails for some rows only — a CAST of a bad string, a division by a
zero in one row, an integer overflow in ``age * K`` for large ages, a string column
compared with a number — would let an analyst learn about the data from *whether* the
query fails, for almost no budget (``CASE WHEN pid = 5 THEN age * K ELSE 0 END``
binary-searches one person's age). So:

* CASTs become TRY_CASTs and every divisor ``b`` becomes ``NULLIF(b, 0)``;
* every analyst expression that is not obviously error-free (the WHERE predicate,
  each group key, each aggregate's argument) is wrapped in ``TRY(...)``, which turns
  any runtime error into NULL. Obviously error-free means: only columns, literals,
  boolean logic and comparisons between a column and a literal (or column) of the
  same type family per the catalog — those are left bare so the backend can still
  push filters down.

Aggregates ignore the NULLs; a NULL key becomes a group of its own; a NULL predicate
drops the row.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan
from dpsql.errors import UnknownTableError, UnsupportedQueryError
from dpsql.rewrite.statistics_query import argument, bin_argument, bin_count, value_expression

_SIMPLE = (exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.And,
           exp.Or, exp.Not, exp.Is, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In,
           exp.Between, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Like, exp.ILike, exp.Tuple)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between,
                exp.NullSafeEQ, exp.NullSafeNEQ, exp.Like, exp.ILike)
_FAMILY = {"int": "number", "float": "number", "string": "string", "bool": "bool",
           "date": "date", "timestamp": "timestamp"}


def guard_errors(expression: exp.Select, plan: Plan) -> exp.Select:
    """Makes every analyst expression in the statistics query error-free.

    >>> from dpsql.engine import _demo_plan
    >>> from dpsql.rewrite.statistics_query import statistics_query
    >>> plan = _demo_plan("SELECT SUM(age * 2) FROM pums WHERE CAST(educ AS INT) / age > 1")
    >>> print(guard_errors(statistics_query(plan), plan).sql(pretty=True))
    SELECT
      SUM(TRY(age * 2)) AS __s0
    FROM pums
    WHERE
      TRY(TRY_CAST(educ AS INT) / NULLIF(age, 0) > 1)
    """
    columns = plan.scope.column_type
    expression = expression.transform(_cast_and_divide, copy=False)  # a fresh tree

    def guard(e: exp.Expression) -> exp.Expression:
        try:
            return e if _error_free(e, columns) else exp.Try(this=e)
        except (KeyError, UnknownTableError):  # a derived table's or hidden table's column
            return exp.Try(this=e)

    def guard_condition(cond: exp.Expression) -> exp.Expression:
        # conjunct by conjunct: the simple ones stay bare, so filters still push down
        conjuncts = cond.flatten() if isinstance(cond, exp.And) else [cond]
        guarded = [_guard_in_subquery(c, columns) if c.find(exp.Subquery) else guard(c)
                   for c in conjuncts]
        return exp.and_(*guarded) if len(guarded) > 1 else guarded[0]

    # every WHERE and JOIN condition, derived tables' included
    for select in list(expression.find_all(exp.Select)):
        where = select.args.get("where")
        if where is not None:
            where.set("this", guard_condition(where.this))
        for join in select.args.get("joins") or []:
            if join.args.get("on") is not None:
                join.set("on", guard_condition(join.args["on"]))
    group = expression.args.get("group")
    if group is not None:  # GROUP BY lists the keys in order, as the select list does
        group.set("expressions", [guard(k.copy()) for k in group.expressions])
    for item in expression.expressions:
        name = item.alias_or_name
        if name.startswith("__k"):
            item.set("this", guard(item.this))
        elif name.startswith("__s"):
            agg = item.this
            stat = plan.stat(name)
            if stat.kind in ("sum", "sumsq"):  # guard the analyst's argument only
                agg.set("this", value_expression(stat, guard(argument(stat, agg).copy())))
            elif stat.kind == "hist":
                j = int(name.rsplit("_", 1)[1])
                item.set("this", bin_count(stat, j, guard(bin_argument(agg).copy())))
            elif isinstance(agg.this, exp.Distinct):
                agg.this.set("expressions", [guard(e) for e in agg.this.expressions])
            elif agg.this is not None and not isinstance(agg.this, exp.Star):
                agg.set("this", guard(agg.this))
    return expression


def _guard_in_subquery(e: exp.Expression, columns) -> exp.Expression:
    """``column IN (SELECT column FROM public ...)``, same type family: cannot fail per row."""
    inner = e.unnest()
    if isinstance(inner, exp.In) and isinstance(inner.this, exp.Column) \
            and inner.args.get("query") is not None:
        return e
    raise UnsupportedQueryError(
        "a subquery in WHERE must be a bare `column IN (SELECT column FROM public_table ...)` "
        "condition, joined to the rest with AND")


def _cast_and_divide(node: exp.Expression) -> exp.Expression:
    if type(node) is exp.Cast:
        return exp.TryCast(this=node.this, to=node.to)
    if isinstance(node, exp.Div | exp.IntDiv | exp.Mod):
        divisor = node.expression
        nonzero_literal = (isinstance(divisor, exp.Literal) and not divisor.is_string
                           and float(divisor.this) != 0)
        if not (isinstance(divisor, exp.Nullif) or nonzero_literal):
            node.set("expression", exp.Nullif(this=divisor, expression=exp.Literal.number(0)))
    return node


def _family(e: exp.Expression, columns) -> str | None:
    if isinstance(e, exp.Column):
        return _FAMILY[columns(e)]
    if isinstance(e, exp.Literal):
        return "string" if e.is_string else "number"
    if isinstance(e, exp.Boolean):
        return "bool"
    return None  # NULL compares with anything


def _error_free(e: exp.Expression, columns) -> bool:
    for node in e.walk():
        if not isinstance(node, _SIMPLE):
            return False
        if isinstance(node, _COMPARISONS):
            operands = [node.this, *(node.args.get(k) for k in ("expression", "low", "high")),
                        *node.expressions]
            families = {_family(o, columns) for o in operands if o is not None}
            families.discard(None)
            if len(families) > 1:
                return False
            if isinstance(node, exp.Like | exp.ILike) and families != {"string"}:
                return False
            if not all(isinstance(o, exp.Column | exp.Literal | exp.Boolean | exp.Null)
                       for o in operands if o is not None):
                return False
    return True
