"""Output columns: their names in HAVING and ORDER BY, and the functions an error bar
can be derived through."""

from __future__ import annotations

from sqlglot import exp

from dpsql.analyze.plan import Output
from dpsql.errors import UnsupportedQueryError

_INTERVAL_FUNCS = (exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Round,
                   exp.Floor, exp.Ceil, exp.Cast, exp.TryCast, exp.Abs, exp.Least,
                   exp.Greatest, exp.Literal, exp.Column, exp.DataType, exp.Identifier,
                   exp.DataTypeParam, exp.Pow, exp.Sqrt, exp.Exp, exp.Ln)


def check_intervals(outputs: list[Output]) -> None:
    """Every noisy output must get an error bar: only interval-safe functions over cells."""
    for out in outputs:
        if not out.cells:
            continue
        for node in out.expr.walk():
            if isinstance(node, exp.Cast) and not node.to.is_type(
                    *exp.DataType.INTEGER_TYPES, *exp.DataType.REAL_TYPES) or (
                    isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.DECIMAL)):
                raise UnsupportedQueryError(
                    f"output column {out.name!r}: a noisy aggregate can be cast only to an "
                    f"integer or floating-point type, not {node.to.sql()}"
                )
            if isinstance(node, exp.Round) and node.args.get("decimals") is not None and not (
                    isinstance(node.args["decimals"], exp.Literal)
                    and node.args["decimals"].is_int):
                raise UnsupportedQueryError(
                    f"output column {out.name!r}: ROUND over a noisy aggregate needs a "
                    "whole-number literal for its decimals"
                )
            if not isinstance(node, _INTERVAL_FUNCS):
                raise UnsupportedQueryError(
                    f"output column {out.name!r}: {type(node).__name__.upper()} over a noisy "
                    "aggregate is not supported (no error bar can be derived for it)"
                )


class OutputNames:
    """The outputs' post-processing expressions by (lower-case) output name."""

    def __init__(self, outputs: list[Output]):
        self._by_name: dict[str, list[exp.Expression]] = {}
        for o in outputs:
            self._by_name.setdefault(o.name.lower(), []).append(o.expr)

    def get(self, name: str, where: str) -> exp.Expression:
        """The output called ``name``; refused when several outputs have that name."""
        found = self._by_name[name]
        if len(found) > 1:
            raise UnsupportedQueryError(
                f"{name!r} in {where} is ambiguous: {len(found)} output columns have that "
                "name; rename one")
        return found[0].copy()
