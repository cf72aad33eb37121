"""The AST builders of :mod:`dpsql.sqlbuild`, under the name the rewrite passes import."""

from dpsql.sqlbuild import clamp, condition, constant, number, table, table_alias

__all__ = ["clamp", "condition", "constant", "number", "table", "table_alias"]
