"""The AST builders of :mod:`dpsql.sqlbuild`, under the name the rewrite passes import."""

from dpsql.sqlbuild import clamp, number

__all__ = ["clamp", "number"]
