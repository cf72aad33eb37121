"""Small AST builders shared by the rewrite passes (kept in :mod:`dpsql.sqlbuild`)."""

from __future__ import annotations

from dpsql.sqlbuild import clamp, number

__all__ = ["clamp", "number"]
