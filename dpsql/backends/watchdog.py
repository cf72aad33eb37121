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
* **another thread's cancel** (:func:`cancel_thread`: ``dpsql serve``'s CancelRequest),
  at once.
* **Ctrl-C**, for a statement on the main thread: Python's wakeup fd
  (:func:`signal.set_wakeup_fd`) is this module's socket, so the C-level handler of
  SIGINT (a real Ctrl-C, or ``_thread.interrupt_main``) writes the signal's number
  there the moment it arrives, even while the main thread is inside the backend's C++
  code and runs no Python. The watchdog then interrupts the statement at once, and
  Python's own handler raises ``KeyboardInterrupt`` as soon as the statement returns.
  A byte counts only for the statement it arrived during: what is left in the socket
  when a main-thread statement begins or ends is dropped, under the lock the watchdog
  reads it under (else a Ctrl-C that DuckDB's own check had already answered would
  cancel a later query).

**The wakeup fd.** :func:`catch_sigint`, before the charge, makes the socket Python's
wakeup fd where none is set, and leaves it there: setting it and putting it back for
every statement left a gap in which a signal reached nobody's fd (an application's
asyncio loop missed it). Python's own signal handling is unchanged by it (the handler
still runs; the byte is only a wake-up), and an application that sets a wakeup fd of
its own later simply replaces it. Only where the application relies on those bytes
does the statement run elsewhere: under an SIGINT handler of the application's (which
may not want the statement stopped), or when a wakeup fd of the application's is found
(asyncio's loop reads its signals from one): then it is put back at once, remembered,
and from then on never taken again, and the backend runs the main thread's
statements on its query thread. Finding one is the one place a signal can still be
missed, once, in the microseconds between taking the fd and putting it back.

The watchdog thread is started before the charge (:func:`ready`; a process out of
threads refuses the query for free), started again if it ever ended, and otherwise
never ends: a daemon that waits on its two sockets (``selectors``, so any fd number
works) and holds nothing. A forked child starts its own, with a lock and sockets of its
own (the parent's stay open in the child, unused: a fork while another thread held the
parent's lock would leave it held forever), and does not keep the parent's socket as
its wakeup fd: the parent's watchdog would read the child's signals.

**A Ctrl-C at any instant.** Python raises ``KeyboardInterrupt`` at the next check of
its eval loop, which may be on entry to any Python function, so no cleanup written as a
call can be relied on to run. What the caller must undo is therefore harmless when it
is left undone: a statement's registration left behind (each owner has one
registration, replaced by its next statement and dropped at its close; it holds its
owner only weakly, so an owner nobody holds is dropped; the runner marks it ``done`` as
the statement returns, with an attribute store before which no ``KeyboardInterrupt``
lands, and a done registration is never interrupted again, so no later plan check or
statement of the connection is; interrupting an idle DuckDB connection does nothing,
and the watchdog interrupts only while it holds the lock a new registration takes).
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import socket
import threading
import time
import weakref

#: Seconds the watchdog waits at most before it looks at the deadlines again.
LOOK_SECONDS = 30.0
#: Seconds between two interrupts of a statement that has not ended yet.
AGAIN_SECONDS = 0.05


class Watch:
    """One running statement: its owner (weakly; the owner's ``interrupt_statement``
    stops it), its deadline, and what happened."""

    __slots__ = ("owner", "deadline", "main", "thread", "timed_out", "cancelled", "done")

    def __init__(self, owner: object, deadline: float, main: bool):
        self.owner = weakref.ref(owner)
        self.deadline = deadline
        self.main = main  # on the main thread, with SIGINT's byte sent to the watchdog
        self.thread = threading.get_ident()  # the thread running the statement
        self.timed_out = False
        self.cancelled = False
        #: the statement has returned (set by the runner as it returns, an attribute
        #: store no KeyboardInterrupt lands before): never interrupted again
        self.done = False

    def interrupt(self) -> None:
        owner = self.owner()
        if owner is not None:
            owner.interrupt_statement()


def _pair() -> tuple[socket.socket, socket.socket]:
    read, write = socket.socketpair()
    read.setblocking(False)
    write.setblocking(False)
    return read, write


class _Watchdog:
    """The process's watchdog: its thread, its two sockets and the running statements
    (one per owner, a backend connection, by ``id``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watches: dict[int, Watch] = {}
        self.pid: int | None = None
        self.thread: threading.Thread | None = None
        self.wakes_at = 0.0
        self.kept: list[socket.socket] = []  # sockets of a parent process, never closed
        self.control: tuple[socket.socket, socket.socket] | None = None
        self.signals: tuple[socket.socket, socket.socket] | None = None
        #: an application's wakeup fd was found: never take it again
        self.applications_fd = False

    def ready(self) -> None:
        """Starts the thread unless it runs in this process (raises what
        ``Thread.start`` raises)."""
        with self.lock:
            if self.pid == os.getpid() and self.thread is not None \
                    and self.thread.is_alive():
                return
            if self.pid != os.getpid():
                if self.control is not None:  # a forked child: the parent's stay, unused
                    self.kept += [*self.control, *self.signals]
                self.control, self.signals = _pair(), _pair()
                self.watches = {}
            thread = threading.Thread(target=self._serve,
                                      args=(self.control[0], self.signals[0]),
                                      name="dpsql-watchdog", daemon=True)
            thread.start()
            self.thread = thread
            self.wakes_at = 0.0
            self.pid = os.getpid()

    def signal_fd(self) -> int:
        self.ready()
        return self.signals[1].fileno()

    def begin(self, owner: object, timeout: float, main: bool) -> Watch:
        """Registers ``owner``'s statement (replacing what its last one left)."""
        deadline = time.monotonic() + timeout if timeout > 0 else math.inf
        watch = Watch(owner, deadline, main)
        self.ready()  # started before the charge already: this only looks
        with self.lock:
            if main:  # a byte from before this statement is not for it
                _drain(self.signals[0])
            self.watches[id(owner)] = watch
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
            if watch is not None and watch.main and self.signals is not None:
                _drain(self.signals[0])  # nor a byte that came after its end
            if watch is None or self.watches.get(id(owner)) is watch:
                self.watches.pop(id(owner), None)

    def _serve(self, control: socket.socket, signals: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(control, selectors.EVENT_READ)
        selector.register(signals, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            with self.lock:
                if self.pid != os.getpid():  # a forked child's copy of this thread's state
                    return
                due = False
                for key, w in list(self.watches.items()):
                    if w.done or w.owner() is None:  # its statement returned; nobody
                        del self.watches[key]        # holds its owner: nothing runs
                        continue
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
                events = selector.select(max(0.0, wakes_at - time.monotonic()))
            except (OSError, ValueError):  # closed under it: ready() starts another
                return
            for key, _ in events:
                if key.fileobj is control:
                    _drain(control)
                    continue
                with self.lock:  # read and marked under the lock begin and end drain under
                    if signal.SIGINT in _drain(signals):
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


def _in_child() -> None:
    # a lock another thread held at the fork stays held in the child: a new one; and the
    # child's signals must not reach the parent's watchdog through a shared socket
    _WATCHDOG.lock = threading.Lock()
    _WATCHDOG.thread = None
    parents = _WATCHDOG.signals
    if parents is None or threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError):
        previous = signal.set_wakeup_fd(-1)
        if previous != parents[1].fileno():
            signal.set_wakeup_fd(previous)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)


def ready() -> None:
    """Starts the process's watchdog if it is not running (before the charge)."""
    _WATCHDOG.ready()


def catch_sigint() -> bool:
    """On the main thread, before the charge: whether its statements can run here,
    watched, with Python's wakeup fd the watchdog's socket (set here where none is; see
    the module docstring). False where the application's own SIGINT handler or wakeup
    fd is in place; that fd is put back, and never taken again. Never raises.
    """
    if _WATCHDOG.applications_fd \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    try:
        ours = _WATCHDOG.signal_fd()
        previous = signal.set_wakeup_fd(ours, warn_on_full_buffer=False)
    except (ValueError, OSError, RuntimeError):  # not the main interpreter; no thread
        return False
    if previous in (-1, ours):
        return True
    try:
        signal.set_wakeup_fd(previous)
    except (ValueError, OSError):  # closed by the application without setting -1: gone,
        return True                # and ours stays (the same answer next time)
    _WATCHDOG.applications_fd = True
    return False


def begin(owner: object, timeout: float, main: bool) -> Watch:
    """Watches ``owner``'s statement, about to run: ``owner.interrupt_statement()`` is
    called once ``timeout`` seconds have passed (``0``: never), on :func:`cancel_thread`
    and, with ``main`` (:func:`catch_sigint` said yes), on Ctrl-C. End it with
    :func:`end`."""
    return _WATCHDOG.begin(owner, timeout, main)


def end(owner: object, watch: Watch | None = None) -> None:
    """The statement ended (or ``owner`` closed, without ``watch``)."""
    _WATCHDOG.end(owner, watch)


def cancel_thread(ident: int) -> None:
    """Interrupts the statement that the thread ``ident`` runs, if any (another thread's
    cancel: ``dpsql serve``'s CancelRequest, which also raises ``KeyboardInterrupt`` in
    that thread for the Python it runs; inside DuckDB's C++ code no Python runs, so that
    exception alone would wait for the statement to end)."""
    _WATCHDOG.cancel_thread(ident)
