"""A connection's statements: what one produced (:class:`Outcome`), the prepared
statements and portals of the extended protocol, and a simple Query's statements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot.tokens import TokenType


@dataclass
class Outcome:
    """What a statement produced, ready to send."""

    tag: str
    columns: list[tuple[str, int]] | None = None  # None: no rows (NoData)
    rows: list[tuple] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    status: list[tuple[str, str]] = field(default_factory=list)  # ParameterStatus


@dataclass
class Prepared:
    """A prepared statement: its SQL, the parameter types the client declared, and
    those reported in ParameterDescription."""

    sql: str
    param_oids: list[int]
    inferred: list[int] = field(default_factory=list)


@dataclass
class Portal:
    """A bound statement: its parameters and result formats; the row description
    promised at Describe; its outcome once executed and how many rows were sent."""

    statement: Prepared
    params: list[Any]
    result_formats: list[int]
    described: list[tuple[str, int]] | None = None
    outcome: Outcome | None = None
    sent: int = 0


def split_statements(text: str) -> list[str]:
    """A simple Query's statements, split at top-level semicolons (by sqlglot's
    tokenizer, so a semicolon inside a string or comment stays)."""
    if ";" not in text:
        return [text] if text.strip() else []
    try:
        tokens = sqlglot.tokenize(text, read="postgres")
    except sqlglot.errors.SqlglotError:
        return [text]
    out, start = [], 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            part = text[start:tok.start]
            if part.strip():
                out.append(part)
            start = tok.end + 1
    if text[start:].strip():
        out.append(text[start:])
    return out


__all__ = ["Outcome", "Portal", "Prepared", "split_statements"]
