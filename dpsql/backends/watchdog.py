"""Watching a statement that runs on the calling thread: the owner's statement timeout
and Ctrl-C, without a thread between the caller and the backend.

**Why not a query thread.** A backend whose statement must be stopped at a timeout or
on Ctrl-C could run it on a thread of its own while the caller waits
(:mod:`dpsql.backends.query_thread`). Measured on 2 cores (TPC-H at sf 0.1, DuckDB 2.0),
handing the statement to that thread and waiting for it made a 5 ms query 0.3-0.5 ms
slower than running it on the caller's thread: the thread, idle since the last query,
is woken cold, and so is the caller at the end. So the statement runs on the calling
thread, and one thread per process watches every statement running anywhere:

* **the statement timeout**: each statement is registered with its deadline; when it
  passes, the watchdog marks it timed out and interrupts its connection, again every
  50 ms until the statement has ended (an interrupt that lands before the statement
  begins is not kept for it). Registering wakes nobody: the watchdog looks at least
  every :data:`LOOK_SECONDS`, and is woken only for a deadline nearer than its next
  look.
* **Ctrl-C**, for a statement on the main thread: while it runs, Python's wakeup fd
  (:func:`signal.set_wakeup_fd`) is this module's socket, so the C-level handler of
  SIGINT (a real Ctrl-C, or ``_thread.interrupt_main``) writes the signal's number
  there the moment it arrives, even while the main thread is inside the backend's C++
  code and runs no Python. The watchdog then interrupts the statement at once, and
  Python's own handler raises ``KeyboardInterrupt`` as soon as the statement returns.
  Only where nothing else relies on those bytes: Python's own handler must be in
  place (a handler of the application's may not want the statement stopped) and no
  other wakeup fd set (asyncio's loop reads its signals from one). Elsewhere
  :func:`can_watch` says no, and the backend keeps its query thread.

The watchdog thread is started before the charge (:func:`ready`; a process out of
threads refuses the query for free) and never ends: it is a daemon that waits in
``select`` and holds nothing. A forked child starts its own, with sockets of its own
(the parent's stay open in the child, unused), and does not keep the parent's socket
as its wakeup fd: the parent's watchdog would read the child's signals.

**A Ctrl-C at any instant.** Python raises ``KeyboardInterrupt`` at the next check of
its eval loop, which may be on entry to any Python function, so no cleanup written as a
call can be relied on to run. What the caller must undo is therefore harmless when it
is left undone: the wakeup fd left at the watchdog's socket (never closed: a signal's
byte there is read and dropped); a statement's registration left behind (each owner has
one registration, replaced by its next statement and dropped at its close; interrupting
an idle DuckDB connection does nothing, and the watchdog interrupts only while it holds
the lock a new registration takes, so it never interrupts the next statement in its
stead). The one exception: taking an application's wakeup fd to read it and putting it
back (:func:`catch_sigint`) is two calls, and a Ctrl-C landing in the microseconds
between them leaves the watchdog's socket in its place.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable

#: Seconds the watchdog waits at most before it looks at the deadlines again.
LOOK_SECONDS = 30.0
#: Seconds between two interrupts of a statement that has not ended yet.
AGAIN_SECONDS = 0.05


class Watch:
    """One running statement: how to interrupt it, its deadline, and what happened."""

    __slots__ = ("interrupt", "deadline", "main", "thread", "timed_out", "cancelled")

    def __init__(self, interrupt: Callable[[], None], deadline: float, main: bool):
        self.interrupt = interrupt
        self.deadline = deadline
        self.main = main  # on the main thread, with SIGINT's byte sent to the watchdog
        self.thread = threading.get_ident()  # the thread running the statement
        self.timed_out = False
        self.cancelled = False


def _pair() -> tuple[socket.socket, socket.socket]:
    read, write = socket.socketpair()
    read.setblocking(False)
    write.setblocking(False)
    return read, write


class _Watchdog:
    """The process's watchdog: its thread, its two sockets and the running statements
    (one per owner, a backend connection)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watches: dict[object, Watch] = {}
        self.pid: int | None = None
        self.wakes_at = 0.0
        self.kept: list[socket.socket] = []  # sockets of a parent process, never closed
        self.control: tuple[socket.socket, socket.socket] | None = None
        self.signals: tuple[socket.socket, socket.socket] | None = None

    def ready(self) -> None:
        """Starts the thread unless it runs in this process (raises what
        ``Thread.start`` raises)."""
        with self.lock:
            if self.pid == os.getpid():
                return
            if self.control is not None:  # a forked child: the parent's stay, unused
                self.kept += [*self.control, *self.signals]
            control, signals = _pair(), _pair()
            thread = threading.Thread(target=self._serve, args=(control[0], signals[0]),
                                      name="dpsql-watchdog", daemon=True)
            thread.start()
            self.control, self.signals = control, signals
            self.watches = {}
            self.wakes_at = 0.0
            self.pid = os.getpid()

    def signal_fd(self) -> int:
        self.ready()
        return self.signals[1].fileno()

    def begin(self, owner: object, interrupt: Callable[[], None], timeout: float,
              main: bool) -> Watch:
        """Registers ``owner``'s statement (replacing what its last one left)."""
        deadline = time.monotonic() + timeout if timeout > 0 else math.inf
        watch = Watch(interrupt, deadline, main)
        self.ready()  # started before the charge already: this only looks
        with self.lock:
            self.watches[owner] = watch
            wake = deadline < self.wakes_at
        if wake:  # after registering: woken, it finds the deadline
            with contextlib.suppress(OSError):  # a full socket wakes it all the same
                self.control[1].send(b"\0")
        return watch

    def cancel_thread(self, ident: int) -> None:
        """Cancels the statements the thread ``ident`` runs, at once."""
        with self.lock:
            found = [w for w in self.watches.values() if w.thread == ident]
            for w in found:
                w.cancelled = True
        if found:
            with contextlib.suppress(OSError):
                self.control[1].send(b"\0")

    def end(self, owner: object, watch: Watch | None = None) -> None:
        """Drops ``owner``'s registration (only ``watch``, if given)."""
        with self.lock:
            if watch is None or self.watches.get(owner) is watch:
                self.watches.pop(owner, None)

    def _serve(self, control: socket.socket, signals: socket.socket) -> None:
        while True:
            now = time.monotonic()
            with self.lock:
                due = False
                for w in self.watches.values():
                    if w.deadline <= now:
                        w.timed_out = True
                    if w.timed_out or w.cancelled:
                        due = True
                        # under the lock: the owner's next statement cannot register
                        # (and start) between this look and the interrupt
                        with contextlib.suppress(Exception):  # a closed connection
                            w.interrupt()
                wakes_at = min((w.deadline for w in self.watches.values() if not w.timed_out),
                               default=math.inf)
                wakes_at = min(wakes_at, now + (AGAIN_SECONDS if due else LOOK_SECONDS))
                self.wakes_at = wakes_at
            try:
                ready, _, _ = select.select([control, signals], [], [],
                                            max(0.0, wakes_at - time.monotonic()))
            except (OSError, ValueError):  # the sockets are gone: the process is ending
                return
            if control in ready:
                _drain(control)
            if signals in ready and signal.SIGINT in _drain(signals):
                with self.lock:
                    for w in self.watches.values():
                        if w.main:
                            w.cancelled = True


def _drain(sock: socket.socket) -> bytes:
    out = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(256):
            out += chunk
    return out


_WATCHDOG = _Watchdog()


def _forget_parents_socket() -> None:
    # the child's signals must not reach the parent's watchdog through a shared socket
    parents = _WATCHDOG.signals
    if parents is None or threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError):
        previous = signal.set_wakeup_fd(-1)
        if previous != parents[1].fileno():
            signal.set_wakeup_fd(previous)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_socket)


def ready() -> None:
    """Starts the process's watchdog if it is not running (before the charge)."""
    _WATCHDOG.ready()


def catch_sigint() -> bool:
    """On the main thread: makes the watchdog's socket Python's wakeup fd, so that a
    Ctrl-C reaches it while the statement runs; False (and nothing changed) where the
    application has its own SIGINT handler or wakeup fd. The caller sets the wakeup fd
    back to -1 after the statement.

    An application's wakeup fd is put back as it was found, but with Python's default
    ``warn_on_full_buffer`` (the setting cannot be read).
    """
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    ours = _WATCHDOG.signal_fd()
    try:
        previous = signal.set_wakeup_fd(ours, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        return False
    if previous in (-1, ours):
        return True
    signal.set_wakeup_fd(previous)
    return False


def begin(owner: object, interrupt: Callable[[], None], timeout: float, main: bool) -> Watch:
    """Watches ``owner``'s statement, about to run: ``interrupt`` is called once
    ``timeout`` seconds have passed (``0``: never) and, with ``main`` (the caller
    holds the wakeup fd, :func:`catch_sigint`), on Ctrl-C. End it with :func:`end`."""
    return _WATCHDOG.begin(owner, interrupt, timeout, main)


def end(owner: object, watch: Watch | None = None) -> None:
    """The statement ended (or ``owner`` closed, without ``watch``)."""
    _WATCHDOG.end(owner, watch)


def cancel_thread(ident: int) -> None:
    """Interrupts the statement that the thread ``ident`` runs, if any (another thread's
    cancel: ``dpsql serve``'s CancelRequest, which also raises ``KeyboardInterrupt`` in
    that thread for the Python it runs; inside DuckDB's C++ code no Python runs, so that
    exception alone would wait for the statement to end)."""
    _WATCHDOG.cancel_thread(ident)
