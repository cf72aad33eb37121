"""The extended query protocol: Parse, Bind, Describe, Execute, Close.

One :class:`Extended` per connection answers each message with the bytes to send;
a message it cannot answer raises :class:`~dpsql.server.sqlstate.QueryError` (the
server then skips to Sync) or :class:`~dpsql.server.ProtocolError` (the connection is
closed). Each message type is one method, chosen from :data:`_HANDLERS`. What runs a
query (Describe of a DP statement, Execute) runs on a worker through ``watch``, which
cancels it when the client disconnects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dpsql.server import ProtocolError
from dpsql.server import protocol as pg
from dpsql.server.parameters import coerce
from dpsql.server.replies import encode_outcome
from dpsql.server.session import Session
from dpsql.server.sqlstate import QueryError
from dpsql.server.statements import Portal, Prepared, split_statements

#: Runs ``fn(*args)`` on a worker thread; the client disconnecting cancels it.
Watch = Callable[..., Awaitable[Any]]


@dataclass
class Extended:
    """A connection's extended-protocol messages.

    Args:
        session: the connection's session (its statements and portals).
        watch: how a statement runs (see :data:`Watch`).
        max_suspended_portals: how many other portals may hold rows not yet fetched
            when an Execute would suspend one more.
    """

    session: Session
    watch: Watch
    max_suspended_portals: int

    async def handle(self, kind: bytes, body: bytes) -> bytes:
        """The reply to one message of type ``kind``.

        Raises:
            QueryError: to be sent as ErrorResponse.
            ProtocolError: an unknown or malformed message.
        """
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise ProtocolError(f"unknown message type {kind!r}")
        return await handler(self, pg.Reader(body))

    async def _parse(self, r: pg.Reader) -> bytes:
        """Parse: a prepared statement, with the parameter types to report."""
        name, sql, n = r.cstr(), r.cstr(), r.int16()
        if n < 0:
            raise ProtocolError("negative parameter count")
        oids = [r.int32() for _ in range(n)]
        session = self.session
        if name and name in session.statements:
            raise QueryError("42P05", f'prepared statement "{name}" already exists')
        if sql.count(";") and len(split_statements(sql)) > 1:
            raise QueryError("42601", "cannot insert multiple commands into a prepared "
                             "statement")
        prepared = Prepared(sql, oids)
        prepared.inferred = session.param_types(sql, oids)
        session.statements[name] = prepared
        return pg.PARSE_COMPLETE

    async def _bind(self, r: pg.Reader) -> bytes:
        """Bind: a portal of a prepared statement with its parameter values."""
        portal_name, stmt_name = r.cstr(), r.cstr()
        nf = r.int16()
        fmts = [r.int16() for _ in range(max(nf, 0))]
        n = r.int16()
        if n < 0 or nf < 0:
            raise ProtocolError("negative count in Bind")
        raw = [r.value() for _ in range(n)]
        nr = r.int16()
        result_formats = [r.int16() for _ in range(max(nr, 0))]
        prepared = self.session.statements.get(stmt_name)
        if prepared is None:
            raise QueryError("26000", f'prepared statement "{stmt_name}" does not exist')
        values = _decode_params(prepared, raw, pg.formats_for(fmts, n))
        self.session.portals[portal_name] = Portal(prepared, values, result_formats)
        return pg.BIND_COMPLETE

    async def _describe(self, r: pg.Reader) -> bytes:
        """Describe of a statement ('S') or a portal ('P'): nothing is spent."""
        what, name = r.byte(), r.cstr()
        if what == b"S":
            return await self._describe_statement(name)
        if what == b"P":
            return await self._describe_portal(name)
        raise ProtocolError("Describe takes 'S' or 'P'")

    async def _describe_statement(self, name: str) -> bytes:
        """ParameterDescription and RowDescription (or NoData) of a prepared statement,
        its parameters not bound yet."""
        session = self.session
        prepared = session.statements.get(name)
        if prepared is None:
            raise QueryError("26000", f'prepared statement "{name}" does not exist')
        cols = await self.watch(session.describe, prepared.sql, None)
        out = pg.parameter_description(prepared.inferred)
        return out + (pg.NO_DATA if cols is None else pg.row_description(
            cols, [0] * len(cols)))

    async def _describe_portal(self, name: str) -> bytes:
        """RowDescription (or NoData) of a portal; Execute keeps the types promised."""
        session = self.session
        portal = session.portals.get(name)
        if portal is None:
            raise QueryError("34000", f'portal "{name}" does not exist')
        if portal.outcome is not None:
            cols = portal.outcome.columns
        else:
            cols = await self.watch(session.describe, portal.statement.sql, portal.params)
            portal.described = cols
        if cols is None:
            return pg.NO_DATA
        return pg.row_description(cols, pg.formats_for(portal.result_formats, len(cols)))

    async def _execute(self, r: pg.Reader) -> bytes:
        """Execute: a portal's statement runs once; its rows are sent up to
        ``max_rows`` at a time (the portal is suspended in between)."""
        name, max_rows = r.cstr(), r.int32()
        session = self.session
        portal = session.portals.get(name)
        if portal is None:
            raise QueryError("34000", f'portal "{name}" does not exist')
        if portal.outcome is None:
            portal.outcome = await self.watch(session.run, portal.statement.sql,
                                              portal.params, portal.described)
        outcome = portal.outcome
        if max_rows > 0 and len(outcome.rows) > max_rows + portal.sent:
            self._check_suspended(name, portal)
        formats = None
        if outcome.columns is not None:
            formats = pg.formats_for(portal.result_formats, len(outcome.columns))
        data = encode_outcome(outcome, formats, portal, max(max_rows, 0), describe=False)
        outcome.notices = []  # sent once, even when the portal is resumed
        return data

    def _check_suspended(self, name: str, portal: Portal) -> None:
        """Refuses to suspend one more portal when too many hold rows not yet fetched
        (each holds its answer in the service's memory); the portal is closed."""
        held = sum(1 for p in self.session.portals.values() if p is not portal and
                   p.outcome is not None and p.outcome.rows)
        if held >= self.max_suspended_portals:
            self.session.portals.pop(name, None)
            raise QueryError("53200", "too many open portals with rows not yet "
                             "fetched: close one first")

    async def _close(self, r: pg.Reader) -> bytes:
        """Close of a statement ('S') or a portal ('P'); closing none is no error."""
        what, name = r.byte(), r.cstr()
        if what == b"S":
            self.session.statements.pop(name, None)
        elif what == b"P":
            self.session.portals.pop(name, None)
        else:
            raise ProtocolError("Close takes 'S' or 'P'")
        return pg.CLOSE_COMPLETE

    async def _copy(self, r: pg.Reader) -> bytes:
        """CopyData, CopyDone, CopyFail: refused."""
        raise QueryError("0A000", "COPY is not supported")

    async def _function_call(self, r: pg.Reader) -> bytes:
        """FunctionCall: refused."""
        raise QueryError("0A000", "function calls are not supported")


def _decode_params(prepared: Prepared, raw: list[bytes | None],
                   formats: list[int]) -> list[Any]:
    """Bound values: each decoded by its declared type, else by the type inferred for
    it (a binary value) or as text read as that type.

    Raises:
        QueryError: a value that its type cannot read.
    """
    n = len(raw)
    types = prepared.inferred + [0] * (n - len(prepared.inferred))
    values = []
    for i, (value, fmt) in enumerate(zip(raw, formats, strict=True)):
        declared = prepared.param_oids[i] if i < len(prepared.param_oids) else 0
        try:
            v = pg.decode_param(value, declared or (types[i] if fmt == 1 else 0), fmt)
        except ValueError as exc:
            raise QueryError("22P02", f"parameter ${i + 1}: {exc}") from None
        values.append(coerce(v, types[i]) if not declared else v)
    return values


#: Message type → its method.
_HANDLERS: dict[bytes, Callable[[Extended, pg.Reader], Awaitable[bytes]]] = {
    b"P": Extended._parse,
    b"B": Extended._bind,
    b"D": Extended._describe,
    b"E": Extended._execute,
    b"C": Extended._close,
    b"d": Extended._copy,
    b"c": Extended._copy,
    b"f": Extended._copy,
    b"F": Extended._function_call,
}


__all__ = ["Extended", "Watch"]
