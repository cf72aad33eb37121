"""The asyncio service: accept loop, TLS, SCRAM login, the message loop, limits, cancel.

One coroutine per connection reads and writes the socket; every statement runs on a
worker thread (``loop.run_in_executor``), so a slow query holds only its own session.
A connection that breaks the protocol (malformed or oversize frame, bad startup) is
closed with an error, and only that connection; an unexpected exception in one session
is logged for the owner and closes that session alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import logging
import secrets
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any

from dpsql.ledger import ALL
from dpsql.server import ProtocolError, ServerError
from dpsql.server import protocol as pg
from dpsql.server.auth import MECHANISM, ScramExchange, Throttle, VerifierStore
from dpsql.server.catalog_sql import ProbeDB
from dpsql.server.config import ServerConfig, open_ledger
from dpsql.server.parameters import coerce
from dpsql.server.session import Session
from dpsql.server.settings import default_settings
from dpsql.server.sqlstate import QueryError, as_query_error
from dpsql.server.statements import Outcome, Portal, Prepared, split_statements
from dpsql.text import escape

_log = logging.getLogger("dpsql.server")


@dataclass
class _Conn:
    pid: int
    secret: int
    login: str | None = None
    session: Session | None = None
    peer: str = ""
    tasks: set = field(default_factory=set)
    #: The login whose SCRAM exchange has begun and not ended: a failure if it never
    #: ends (the client disconnects or times out mid-exchange).
    auth_pending: str | None = None


class Server:
    """A running service (see :func:`serve` for the blocking entry point).

    Args:
        config: the loaded config.
        ready: called with the bound (host, port) once listening (tests use port 0).
    """

    def __init__(self, config: ServerConfig):
        self.config = config
        from dpsql.catalog import load_catalog

        self.catalog = load_catalog(str(config.catalog))
        self.ledger = open_ledger(config, self.catalog)  # never created here
        if config.budget is not None:
            self.ledger.ensure_budget(self.catalog.dataset, config.budget, ALL,
                                      "serve config")
        self.store = VerifierStore(config.logins)
        self.probe_db = ProbeDB(self.catalog, config.limits.probe_timeout_seconds,
                                config.limits.probe_max_rows, config.limits.probe_max_bytes)
        self.throttle = Throttle()
        self.ssl: ssl.SSLContext | None = None
        if config.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                ctx.load_cert_chain(str(config.cert), str(config.key))
            except (OSError, ssl.SSLError) as exc:
                raise ServerError(f"cannot load the TLS certificate/key: {exc}") from None
            self.ssl = ctx
        self.conns: dict[int, _Conn] = {}
        self.per_login: dict[str, int] = {}
        self.handshakes = 0  # connections not yet authenticated (count toward the limit)
        self.handshakes_per_address: dict[str, int] = {}
        self._login_locks: dict[str, list] = {}  # login -> [asyncio.Lock, users]
        workers = max(config.limits.workers, 4)
        self.executor = concurrent.futures.ThreadPoolExecutor(workers,
                                                              thread_name_prefix="dpsql-q")
        self._server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] | None = None

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._handle, self.config.host, self.config.port,
            limit=self.config.limits.max_message_bytes + 1024)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])
        _log.info("dpsql serve listening on %s:%s (TLS %s)", sock[0], sock[1],
                  "on" if self.ssl else "off")
        return self.address

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for conn in list(self.conns.values()):
            if conn.session is not None:
                conn.session.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _pid(self) -> int:
        while True:
            pid = secrets.randbelow(2**31 - 2) + 1
            if pid not in self.conns:
                return pid

    async def _run(self, fn, *args) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, fn, *args)

    # -- one connection ---------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        peer = writer.get_extra_info("peername")
        conn = _Conn(self._pid(), secrets.randbits(31), peer=str(peer[0]) if peer else "?")
        counted = False
        limits = self.config.limits
        # connections still authenticating count toward max_connections, and one
        # address may hold only a few of them
        if len(self.conns) + self.handshakes >= limits.max_connections:
            await self._fatal(writer, "53300", "sorry, too many clients already")
            with contextlib.suppress(Exception):
                writer.close()
            return
        if self.handshakes_per_address.get(conn.peer, 0) >= \
                limits.max_handshakes_per_address:
            await self._fatal(writer, "53300", "too many connections authenticating from "
                              "this address")
            with contextlib.suppress(Exception):
                writer.close()
            return
        self.handshakes += 1
        self.handshakes_per_address[conn.peer] = \
            self.handshakes_per_address.get(conn.peer, 0) + 1
        handshaking = True

        def handshake_done() -> None:
            nonlocal handshaking
            if handshaking:
                handshaking = False
                self.handshakes -= 1
                left = self.handshakes_per_address[conn.peer] - 1
                if left:
                    self.handshakes_per_address[conn.peer] = left
                else:
                    del self.handshakes_per_address[conn.peer]
                if conn.auth_pending is not None:  # gone or timed out mid-exchange
                    self.throttle.failed(conn.peer, conn.auth_pending)
                    conn.auth_pending = None

        try:
            try:
                startup = await asyncio.wait_for(self._startup(reader, writer, conn),
                                                 limits.auth_timeout_seconds)
            except TimeoutError:
                handshake_done()
                await self._fatal(writer, "08006", "authentication timed out")
                return
            finally:
                handshake_done()
            if startup is None:
                return
            reader, writer, params = startup
            if len(self.conns) >= limits.max_connections:
                await self._fatal(writer, "53300", "sorry, too many clients already")
                return
            login = conn.login
            if self.per_login.get(login, 0) >= limits.max_connections_per_login:
                await self._fatal(writer, "53300",
                                  f"too many connections for login {login!r}")
                return
            self.conns[conn.pid] = conn
            self.per_login[login] = self.per_login.get(login, 0) + 1
            counted = True
            try:
                conn.session = await self._run(
                    lambda: Session(self.config.database, str(self.config.catalog),
                                    self.ledger, login, self.probe_db, params,
                                    self.config.session))
            except Exception as exc:  # noqa: BLE001 - reported to the client, logged
                err = as_query_error(exc)
                _log.error("session for %s failed to open: %s", escape(login), escape(exc))
                await self._fatal(writer, err.code, err.message)
                return
            out = [pg.auth(0)]
            settings = conn.session.settings
            out += [pg.parameter_status(k, settings[k]) for k in
                    ("server_version", "server_encoding", "client_encoding", "DateStyle",
                     "TimeZone", "integer_datetimes", "standard_conforming_strings",
                     "application_name", "is_superuser", "session_authorization",
                     "IntervalStyle")]
            out += [pg.backend_key(conn.pid, conn.secret), pg.ready("I")]
            writer.write(b"".join(out))
            await writer.drain()
            await self._loop(reader, writer, conn)
        except ProtocolError as exc:
            await self._fatal(writer, "08P01", str(exc))
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError):
            pass  # the client went away
        except Exception as exc:  # noqa: BLE001 - one session's bug closes that session only
            _log.exception("session %s ended by an internal error: %s", conn.pid,
                           escape(type(exc).__name__))
            await self._fatal(writer, "XX000", "internal error; the session is closed")
        finally:
            handshake_done()
            if counted:
                self.conns.pop(conn.pid, None)
                self.per_login[conn.login] -= 1
                if not self.per_login[conn.login]:
                    del self.per_login[conn.login]
            if conn.session is not None:
                session = conn.session
                session.cancel()
                with contextlib.suppress(Exception):  # closing is best effort
                    await self._run(session.close)
            with contextlib.suppress(Exception):
                writer.close()

    async def _fatal(self, writer, code: str, message: str) -> None:
        try:
            writer.write(pg.error(code, message, severity="FATAL"))
            await writer.drain()
        except Exception:  # noqa: BLE001 - the client may be gone already
            pass

    async def _startup(self, reader, writer, conn: _Conn):
        """Startup packet(s), TLS, SCRAM. Returns (reader, writer, params) or None."""
        limit = self.config.limits.max_message_bytes
        tls_done = False
        while True:
            code, payload = await pg.read_startup(reader, limit)
            if code == pg.SSL_REQUEST and not tls_done:
                if self.ssl is None:
                    writer.write(b"N")
                    await writer.drain()
                    continue
                writer.write(b"S")
                await writer.drain()
                await writer.start_tls(self.ssl)
                tls_done = True
                continue
            if code == pg.GSSENC_REQUEST and not tls_done:
                writer.write(b"N")
                await writer.drain()
                continue
            if code == pg.CANCEL_REQUEST:
                if len(payload) == 8:
                    pid, secret = struct.unpack("!ii", payload)
                    self._cancel(pid, secret)
                return None
            if code != pg.PROTOCOL_3:
                major = code >> 16
                raise ProtocolError(f"unsupported frontend protocol {major}."
                                    f"{code & 0xFFFF}: dpsql speaks 3.0")
            break
        params = pg.parse_startup_params(payload)
        login = params.get("user", "")
        if not login:
            await self._fatal(writer, "28000", "no user name in the startup packet")
            return None
        if self.ssl is not None and not tls_done:
            await self._fatal(writer, "28000", "TLS is required: connect with "
                              "sslmode=require (passwords are never sent in the clear)")
            return None
        # one attempt per login at a time: the throttle's wait then bounds the guessing
        # rate for a login, however many connections try it at once
        entry = self._login_locks.setdefault(login, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                return await self._authenticate(reader, writer, conn, login, params)
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._login_locks[login]

    async def _authenticate(self, reader, writer, conn: _Conn, login: str, params):
        delay = self.throttle.delay(conn.peer, login)
        if delay:
            await asyncio.sleep(delay)
        exchange = ScramExchange(self.store, login)
        writer.write(pg.auth(10, pg.cstr(MECHANISM) + b"\0"))
        await writer.drain()
        ok = False
        try:
            kind, body = await pg.read_message(reader, 65536)
            if kind != b"p":
                raise ProtocolError("expected a SASLInitialResponse")
            r = pg.Reader(body)
            mechanism = r.cstr()
            if mechanism != MECHANISM:
                raise ProtocolError(f"unsupported SASL mechanism {mechanism!r}")
            first = r.value()
            conn.auth_pending = login  # the exchange has begun: ending it early fails
            server_first = exchange.first((first or b"").decode("utf-8"))
            writer.write(pg.auth(11, server_first.encode()))
            await writer.drain()
            kind, body = await pg.read_message(reader, 65536)
            if kind != b"p":
                raise ProtocolError("expected a SASLResponse")
            server_final = exchange.final(body.decode("utf-8"))
            ok = server_final is not None
        except (ProtocolError, UnicodeDecodeError, ValueError, Exception) as exc:
            if isinstance(exc, asyncio.IncompleteReadError | ConnectionError):
                if conn.auth_pending is not None:  # left mid-exchange: a failure too
                    self.throttle.failed(conn.peer, login)
                    conn.auth_pending = None
                raise
            ok = False
        conn.auth_pending = None
        if not ok:
            self.throttle.failed(conn.peer, login)
            # the same wait whether the login exists or not, then the same message
            await asyncio.sleep(self.config.limits.failed_login_delay_seconds)
            await self._fatal(writer, "28P01",
                              f'password authentication failed for user "{login}"')
            _log.warning("failed login for %s from %s", escape(login), escape(conn.peer))
            return None
        writer.write(pg.auth(12, server_final.encode()))
        conn.login = login
        return reader, writer, params

    def _cancel(self, pid: int, secret: int) -> None:
        conn = self.conns.get(pid)
        # a wrong key is ignored silently, as PostgreSQL does (no oracle for pids)
        if conn is None or not hmac.compare_digest(struct.pack("!i", conn.secret),
                                                   struct.pack("!i", secret)):
            return
        if conn.session is not None:
            conn.session.cancel()

    # -- the message loop ---------------------------------------------------------------

    async def _loop(self, reader, writer, conn: _Conn) -> None:
        limits = self.config.limits
        session = conn.session
        skipping = False  # after an error in the extended protocol: until Sync
        while True:
            try:
                kind, body = await asyncio.wait_for(
                    pg.read_message(reader, limits.max_message_bytes),
                    limits.idle_timeout_seconds)
            except TimeoutError:
                await self._fatal(writer, "57P05", "terminating connection due to idle "
                                  "timeout")
                return
            if kind == b"X":
                return
            if kind == b"Q":
                skipping = False
                await self._simple(reader, writer, session, pg.Reader(body).cstr())
                continue
            if kind == b"S":
                skipping = False
                writer.write(pg.ready(session.txn))
                await writer.drain()
                continue
            if kind == b"H":
                await writer.drain()
                continue
            if skipping:
                continue
            try:
                out = await self._extended(reader, kind, body, session)
                writer.write(out)
            except QueryError as err:
                if session.txn == "T":
                    session.txn = "E"
                writer.write(pg.error(err.code, err.message, hint=err.hint))
                skipping = True
            if kind in (b"E",):
                await writer.drain()

    async def _watched(self, reader, session: Session, fn, *args):
        """Runs ``fn`` on a worker; a client that disconnects meanwhile cancels it."""
        fut = asyncio.ensure_future(self._run(fn, *args))
        while True:
            done, _ = await asyncio.wait({fut}, timeout=0.2)
            if done:
                return fut.result()
            if reader.at_eof():
                session.cancel()

    async def _simple(self, reader, writer, session: Session, text: str) -> None:
        statements = split_statements(text)
        if not statements:
            writer.write(pg.EMPTY_QUERY + pg.ready(session.txn))
            await writer.drain()
            return
        for sql in statements:
            try:
                outcome: Outcome = await self._watched(reader, session, session.run, sql)
            except QueryError as err:
                if session.txn == "T":
                    session.txn = "E"
                writer.write(pg.error(err.code, err.message, hint=err.hint))
                break
            writer.write(self._send(outcome, None, None))
        writer.write(pg.ready(session.txn))
        await writer.drain()

    def _send(self, outcome: Outcome, formats: list[int] | None, portal: Portal | None,
              max_rows: int = 0, describe: bool = True) -> bytes:
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

    async def _extended(self, reader, kind: bytes, body: bytes, session: Session) -> bytes:
        r = pg.Reader(body)
        if kind == b"P":
            name, sql, n = r.cstr(), r.cstr(), r.int16()
            if n < 0:
                raise ProtocolError("negative parameter count")
            oids = [r.int32() for _ in range(n)]
            if name and name in session.statements:
                raise QueryError("42P05", f'prepared statement "{name}" already exists')
            if sql.count(";") and len(split_statements(sql)) > 1:
                raise QueryError("42601", "cannot insert multiple commands into a prepared "
                                 "statement")
            prepared = Prepared(sql, oids)
            prepared.inferred = session.param_types(sql, oids)
            session.statements[name] = prepared
            return pg.PARSE_COMPLETE
        if kind == b"B":
            portal_name, stmt_name = r.cstr(), r.cstr()
            nf = r.int16()
            fmts = [r.int16() for _ in range(max(nf, 0))]
            n = r.int16()
            if n < 0 or nf < 0:
                raise ProtocolError("negative count in Bind")
            raw = [r.value() for _ in range(n)]
            nr = r.int16()
            result_formats = [r.int16() for _ in range(max(nr, 0))]
            prepared = session.statements.get(stmt_name)
            if prepared is None:
                raise QueryError("26000", f'prepared statement "{stmt_name}" does not exist')
            param_formats = pg.formats_for(fmts, n)
            types = prepared.inferred + [0] * (n - len(prepared.inferred))
            values = []
            for i, (value, fmt) in enumerate(zip(raw, param_formats, strict=True)):
                declared = prepared.param_oids[i] if i < len(prepared.param_oids) else 0
                try:
                    v = pg.decode_param(value, declared or (types[i] if fmt == 1 else 0),
                                        fmt)
                except ValueError as exc:
                    raise QueryError("22P02", f"parameter ${i + 1}: {exc}") from None
                values.append(coerce(v, types[i]) if not declared else v)
            session.portals[portal_name] = Portal(prepared, values, result_formats)
            return pg.BIND_COMPLETE
        if kind == b"D":
            what, name = r.byte(), r.cstr()
            if what == b"S":
                prepared = session.statements.get(name)
                if prepared is None:
                    raise QueryError("26000", f'prepared statement "{name}" does not exist')
                cols = await self._watched(reader, session, session.describe, prepared.sql,
                                           None)
                out = pg.parameter_description(prepared.inferred)
                return out + (pg.NO_DATA if cols is None else pg.row_description(
                    cols, [0] * len(cols)))
            if what == b"P":
                portal = session.portals.get(name)
                if portal is None:
                    raise QueryError("34000", f'portal "{name}" does not exist')
                if portal.outcome is not None:
                    cols = portal.outcome.columns
                else:
                    cols = await self._watched(reader, session, session.describe,
                                               portal.statement.sql, portal.params)
                    portal.described = cols
                if cols is None:
                    return pg.NO_DATA
                return pg.row_description(cols, pg.formats_for(portal.result_formats,
                                                               len(cols)))
            raise ProtocolError("Describe takes 'S' or 'P'")
        if kind == b"E":
            name, max_rows = r.cstr(), r.int32()
            portal = session.portals.get(name)
            if portal is None:
                raise QueryError("34000", f'portal "{name}" does not exist')
            if portal.outcome is None:
                portal.outcome = await self._watched(
                    reader, session, session.run, portal.statement.sql, portal.params,
                    portal.described)
            outcome = portal.outcome
            if max_rows > 0 and len(outcome.rows) > max_rows + portal.sent:
                held = sum(1 for p in session.portals.values() if p is not portal and
                           p.outcome is not None and p.outcome.rows)
                if held >= self.config.limits.max_suspended_portals:
                    session.portals.pop(name, None)
                    raise QueryError("53200", "too many open portals with rows not yet "
                                     "fetched: close one first")
            formats = None
            if outcome.columns is not None:
                formats = pg.formats_for(portal.result_formats, len(outcome.columns))
            data = self._send(outcome, formats, portal, max(max_rows, 0), describe=False)
            outcome.notices = []  # sent once, even when the portal is resumed
            return data
        if kind == b"C":
            what, name = r.byte(), r.cstr()
            if what == b"S":
                session.statements.pop(name, None)
            elif what == b"P":
                session.portals.pop(name, None)
            else:
                raise ProtocolError("Close takes 'S' or 'P'")
            return pg.CLOSE_COMPLETE
        if kind in (b"d", b"c", b"f"):
            raise QueryError("0A000", "COPY is not supported")
        if kind == b"F":
            raise QueryError("0A000", "function calls are not supported")
        raise ProtocolError(f"unknown message type {kind!r}")


def encode_row(row, oids: list[int], fmts: list[int]) -> list[bytes | None]:
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


def run(config: ServerConfig, on_ready=None) -> None:
    """Runs the service until SIGINT/SIGTERM (the blocking entry point of ``serve``)."""
    import signal

    async def main() -> None:
        server = Server(config)
        address = await server.start()
        if on_ready is not None:
            on_ready(address)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        task = asyncio.ensure_future(server.serve_forever())
        await stop.wait()
        task.cancel()
        await server.close()

    asyncio.run(main())


__all__ = ["Server", "default_settings", "run", "split_statements"]
