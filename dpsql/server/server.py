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
from dpsql.server.extended import Extended
from dpsql.server.replies import encode_outcome
from dpsql.server.session import Session
from dpsql.server.settings import REPORTED, default_settings
from dpsql.server.sqlstate import QueryError, as_query_error
from dpsql.server.statements import Outcome, split_statements
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
        """Starts listening; returns the bound (host, port)."""
        self._server = await asyncio.start_server(
            self._handle, self.config.host, self.config.port,
            limit=self.config.limits.max_message_bytes + 1024)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])
        _log.info("dpsql serve listening on %s:%s (TLS %s)", sock[0], sock[1],
                  "on" if self.ssl else "off")
        return self.address

    async def serve_forever(self) -> None:
        """Serves until cancelled (starts listening first if need be)."""
        if self._server is None:
            await self.start()
        async with self._server:
            await self._server.serve_forever()

    async def close(self) -> None:
        """Stops listening, cancels every running query, stops the workers."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for conn in list(self.conns.values()):
            if conn.session is not None:
                conn.session.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _pid(self) -> int:
        """A random process id no open connection has (the cancel key's first half)."""
        while True:
            pid = secrets.randbelow(2**31 - 2) + 1
            if pid not in self.conns:
                return pid

    async def _run(self, fn, *args) -> Any:
        """Runs ``fn(*args)`` on a worker thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, fn, *args)

    # -- one connection ---------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        """One connection, from accept to close: admission, login, the session, its
        messages; whatever happens, it is counted out and its session closed."""
        peer = writer.get_extra_info("peername")
        conn = _Conn(self._pid(), secrets.randbits(31), peer=str(peer[0]) if peer else "?")
        if not await self._admit(writer, conn):
            return
        handshake = _Handshake(self, conn)
        counted = False
        try:
            startup = await self._login(reader, writer, conn, handshake)
            if startup is None:
                return
            reader, writer, params = startup
            if not await self._count_in(writer, conn):
                return
            counted = True
            if not await self._open_session(writer, conn, params):
                return
            await self._greet(writer, conn)
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
            handshake.done()
            await self._release(writer, conn, counted)

    async def _admit(self, writer, conn: _Conn) -> bool:
        """Whether a new connection may start authenticating: connections still
        authenticating count toward max_connections, and one address may hold only a
        few of them. A refused one is told why and closed."""
        limits = self.config.limits
        if len(self.conns) + self.handshakes >= limits.max_connections:
            message = "sorry, too many clients already"
        elif self.handshakes_per_address.get(conn.peer, 0) >= \
                limits.max_handshakes_per_address:
            message = "too many connections authenticating from this address"
        else:
            return True
        await self._fatal(writer, "53300", message)
        with contextlib.suppress(Exception):
            writer.close()
        return False

    async def _login(self, reader, writer, conn: _Conn, handshake: _Handshake):
        """Startup and login within the time limit; returns (reader, writer, params),
        or None when the connection ends here. The handshake is done either way."""
        try:
            return await asyncio.wait_for(self._startup(reader, writer, conn),
                                          self.config.limits.auth_timeout_seconds)
        except TimeoutError:
            handshake.done()
            await self._fatal(writer, "08006", "authentication timed out")
            return None
        finally:
            handshake.done()

    async def _count_in(self, writer, conn: _Conn) -> bool:
        """Counts a logged-in connection, within max_connections and the login's own
        limit; a connection over either is told why (and not counted)."""
        limits = self.config.limits
        if len(self.conns) >= limits.max_connections:
            await self._fatal(writer, "53300", "sorry, too many clients already")
            return False
        login = conn.login
        if self.per_login.get(login, 0) >= limits.max_connections_per_login:
            await self._fatal(writer, "53300", f"too many connections for login {login!r}")
            return False
        self.conns[conn.pid] = conn
        self.per_login[login] = self.per_login.get(login, 0) + 1
        return True

    async def _open_session(self, writer, conn: _Conn, params: dict[str, str]) -> bool:
        """Opens the login's session (on a worker); a failure is told to the client in
        dpsql's words and logged for the owner."""
        login = conn.login
        try:
            conn.session = await self._run(
                lambda: Session(self.config.database, str(self.config.catalog),
                                self.ledger, login, self.probe_db, params,
                                self.config.session))
        except Exception as exc:  # noqa: BLE001 - reported to the client, logged
            err = as_query_error(exc)
            _log.error("session for %s failed to open: %s", escape(login), escape(exc))
            await self._fatal(writer, err.code, err.message)
            return False
        return True

    async def _greet(self, writer, conn: _Conn) -> None:
        """AuthenticationOk, the reported settings, the cancel key, ReadyForQuery."""
        settings = conn.session.settings
        out = [pg.auth(0)]
        out += [pg.parameter_status(k, settings[k]) for k in REPORTED]
        out += [pg.backend_key(conn.pid, conn.secret), pg.ready("I")]
        writer.write(b"".join(out))
        await writer.drain()

    async def _release(self, writer, conn: _Conn, counted: bool) -> None:
        """Counts a connection out, cancels and closes its session, closes the socket."""
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
        """Sends a FATAL ErrorResponse, if the client is still there."""
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
        """SCRAM-SHA-256 for ``login``, throttled; a failure waits and says the same
        whether the login exists or not. Returns (reader, writer, params) or None."""
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
        """A CancelRequest: stops the query of the connection whose key it carries."""
        conn = self.conns.get(pid)
        # a wrong key is ignored silently, as PostgreSQL does (no oracle for pids)
        if conn is None or not hmac.compare_digest(struct.pack("!i", conn.secret),
                                                   struct.pack("!i", secret)):
            return
        if conn.session is not None:
            conn.session.cancel()

    # -- the message loop ---------------------------------------------------------------

    async def _loop(self, reader, writer, conn: _Conn) -> None:
        """A logged-in connection's messages until Terminate, idle timeout or EOF."""
        limits = self.config.limits
        session = conn.session
        extended = Extended(session, lambda fn, *args: self._watched(reader, session, fn, *args),
                            limits.max_suspended_portals)
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
                out = await extended.handle(kind, body)
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
        """A simple Query: each statement answered in turn, up to the first error."""
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
            writer.write(encode_outcome(outcome, None, None))
        writer.write(pg.ready(session.txn))
        await writer.drain()


class _Handshake:
    """A connection counted as authenticating (toward max_connections and its
    address's limit) from its creation until :meth:`done`."""

    def __init__(self, server: Server, conn: _Conn):
        self.server, self.conn = server, conn
        self.open = True
        server.handshakes += 1
        server.handshakes_per_address[conn.peer] = \
            server.handshakes_per_address.get(conn.peer, 0) + 1

    def done(self) -> None:
        """Counts the connection out (once); a login exchange it left unfinished (gone
        or timed out mid-exchange) counts as a failed login."""
        if not self.open:
            return
        self.open = False
        server, conn = self.server, self.conn
        server.handshakes -= 1
        left = server.handshakes_per_address[conn.peer] - 1
        if left:
            server.handshakes_per_address[conn.peer] = left
        else:
            del server.handshakes_per_address[conn.peer]
        if conn.auth_pending is not None:
            server.throttle.failed(conn.peer, conn.auth_pending)
            conn.auth_pending = None


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
