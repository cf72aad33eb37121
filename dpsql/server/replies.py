"""A statement's :class:`~dpsql.server.statements.Outcome` as the messages sent back:
notices, ParameterStatus, RowDescription, DataRows, CommandComplete (or
PortalSuspended while a portal has rows left)."""

from __future__ import annotations

import struct

from dpsql.server import protocol as pg
from dpsql.server.sqlstate import QueryError
from dpsql.server.statements import Outcome, Portal


def encode_outcome(outcome: Outcome, formats: list[int] | None, portal: Portal | None,
                   max_rows: int = 0, describe: bool = True) -> bytes:
    """The messages for ``outcome``.

    Args:
        formats: the result formats per column (None: text for all).
        portal: the portal executed (Execute), which remembers the rows sent; None for
            a simple Query.
        max_rows: at most this many rows now (0: all); the portal is then suspended.
        describe: whether to send a RowDescription (a simple Query's, not Execute's).
    """
    out = [pg.notice(n) for n in outcome.notices]
    out += [pg.parameter_status(k, v) for k, v in outcome.status]
    if outcome.tag == "EMPTY":
        return b"".join(out) + pg.EMPTY_QUERY
    if outcome.columns is None:
        return b"".join(out) + pg.command_complete(outcome.tag)
    oids = [oid for _, oid in outcome.columns]
    fmts = formats if formats is not None else [0] * len(oids)
    if describe:
        out.append(pg.row_description(outcome.columns, fmts))
    start = portal.sent if portal is not None else 0
    rows = outcome.rows[start:]
    if max_rows > 0:
        rows = rows[:max_rows]
    for row in rows:
        out.append(pg.data_row(encode_row(row, oids, fmts)))
    if portal is not None:
        portal.sent += len(rows)
        if max_rows > 0 and portal.sent < len(outcome.rows):
            out.append(pg.PORTAL_SUSPENDED)
            return b"".join(out)
    tag = outcome.tag if not outcome.tag.startswith("SELECT") else f"SELECT {len(rows)}"
    if portal is not None and outcome.tag.startswith("SELECT"):
        tag = f"SELECT {portal.sent}"
        # a portal run to completion keeps no rows (executing it again sends none,
        # as in PostgreSQL)
        outcome.rows = []
        portal.sent = 0
    out.append(pg.command_complete(tag))
    return b"".join(out)


def encode_row(row, oids: list[int], fmts: list[int]) -> list[bytes | None]:
    """One row's values in their columns' formats.

    Raises:
        QueryError: a value that does not fit its column's binary format.
    """
    out = []
    for value, oid, fmt in zip(row, oids, fmts, strict=True):
        if fmt == 1:
            try:
                out.append(pg.encode_binary(value, oid))
            except (ValueError, TypeError, AttributeError, OverflowError, struct.error):
                raise QueryError("22P03", "a value does not fit its column's type in binary "
                                 "format") from None
        else:
            out.append(pg.encode_text(value, oid))
    return out


__all__ = ["encode_outcome", "encode_row"]
