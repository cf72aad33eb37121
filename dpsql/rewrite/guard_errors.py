"""Pass: remove data-dependent runtime errors from analyst expressions.

A CAST that fails for some rows, or a division by a zero that occurs only in some
rows, would let an analyst learn about the data from whether the query errors. CASTs
become TRY_CASTs (NULL on failure) and every divisor ``b`` becomes ``NULLIF(b, 0)``;
aggregates ignore the resulting NULLs.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Plan


def guard_errors(expression: exp.Expression, plan: Plan) -> exp.Expression:
    """Rewrites casts to TRY_CAST and guards every division and modulo.

    >>> from sqlglot import parse_one
    >>> guard_errors(parse_one("SELECT CAST(a AS INT) / (b - 1) FROM t"), None).sql()
    'SELECT TRY_CAST(a AS INT) / NULLIF((b - 1), 0) FROM t'
    """

    def guard(node: exp.Expression) -> exp.Expression:
        if type(node) is exp.Cast:
            return exp.TryCast(this=node.this, to=node.to)
        if isinstance(node, exp.Div | exp.IntDiv | exp.Mod):
            divisor = node.expression
            nonzero_literal = (isinstance(divisor, exp.Literal) and not divisor.is_string
                               and float(divisor.this) != 0)
            if not (isinstance(divisor, exp.Nullif) or nonzero_literal):
                node.set("expression", exp.Nullif(this=divisor, expression=exp.Literal.number(0)))
        return node

    return expression.transform(guard)
