"""One long-lived thread per backend connection that runs its statements.

A backend whose statement must be watched (a timeout, Ctrl-C) runs it on another thread
while the caller waits. Starting a thread per query cost about 0.2 ms on a quiet machine
and close to 1 ms on a busy one, a fifth of a cached query's own time; and a thread that
cannot start (the process is out of threads) failed the query after its charge. So each
backend keeps one thread: :meth:`QueryThread.ready` starts it before the charge (a
failure there refuses the query, for free), and a job after the charge only queues.

The thread ends when it has been idle for :data:`IDLE_SECONDS` or its backend closes,
and is started again when needed (also in a forked child, where the parent's thread does
not exist). It is a daemon: while it waits for a job no C++ code runs on it, and while a
job runs the caller waits for it (and stops it before returning), so at exit the thread
is idle.

>>> worker = QueryThread("doc")
>>> worker.ready()
>>> job = worker.submit(lambda: 6 * 7)
>>> job.done.wait(5) and job.result
42
>>> worker.close()
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

#: Seconds a thread waits without a job before it ends (restarted on the next use).
IDLE_SECONDS = 60.0


class Job:
    """One statement's run: ``started`` once it begins, ``done`` once it ended (or was
    cancelled before it began), ``result`` what it returned or raised.

    :meth:`cancel` before the job begins means it never runs; after, it is the caller's
    to stop (a backend interrupts its connection until ``done``).
    """

    __slots__ = ("_run", "_lock", "_cancelled", "started", "done", "result")

    def __init__(self, run: Callable[[], Any]):
        self._run = run
        self._lock = threading.Lock()
        self._cancelled = False
        self.started, self.done = threading.Event(), threading.Event()
        self.result: Any = None

    def __call__(self) -> None:
        with self._lock:
            if self._cancelled:
                self.done.set()
                return
            self.started.set()
        try:
            self.result = self._run()
        except BaseException as exc:  # noqa: BLE001 - returned, never printed by the thread
            self.result = exc
        finally:
            self._run = None
            self.done.set()

    def cancel(self) -> bool:
        """Keeps the job from starting; True if it had not started (it never will)."""
        with self._lock:
            self._cancelled = True
            if not self.started.is_set():
                self.done.set()
                return True
            return False


class _Life:
    """One thread's queue, and whether it has ended (set under its owner's lock)."""

    __slots__ = ("jobs", "pid", "ended", "promised")

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.pid = os.getpid()
        self.ended = False
        # ready() promised a job: the thread waits for it however long it takes (a
        # slow charge), so that no thread is started after the charge
        self.promised = False


class QueryThread:
    """The thread that runs one backend connection's jobs, one at a time, in order."""

    def __init__(self, name: str):
        self._name = name
        self._life: _Life | None = None
        self._lock = threading.Lock()

    def _running(self) -> _Life | None:
        life = self._life
        return life if life is not None and not life.ended and life.pid == os.getpid() \
            else None

    def ready(self) -> None:
        """Starts the thread unless it runs, and keeps it for the next :meth:`put`
        (raises what ``Thread.start`` raises)."""
        with self._lock:
            (self._running() or self._start()).promised = True

    def put(self, job: Job) -> None:
        """Queues ``job`` on the thread (started now if it is not running: not after a
        :meth:`ready`, which keeps it running until this)."""
        with self._lock:
            life = self._running() or self._start()
            life.jobs.put(job)
            life.promised = False

    def submit(self, run: Callable[[], Any]) -> Job:
        """Queues ``run`` on the thread; the job."""
        job = Job(run)
        self.put(job)
        return job

    def _start(self) -> _Life:
        life = _Life()
        threading.Thread(target=_serve, args=(life, self._lock), name=self._name,
                         daemon=True).start()
        self._life = life
        return life

    def close(self) -> None:
        """Ends the thread once it has run what is queued."""
        with self._lock:
            life = self._running()
            if life is not None:
                life.jobs.put(None)
                life.ended = True
            self._life = None


def _serve(life: _Life, lock: threading.Lock) -> None:
    """The thread's loop: it holds only its queue, never the backend.

    Ending when idle is decided under the owner's lock, after a last look at the queue:
    a job queued meanwhile is run, and a job queued after sees the thread ended and
    starts another.
    """
    while True:
        try:
            job = life.jobs.get(timeout=IDLE_SECONDS)
        except queue.Empty:
            with lock:
                if life.jobs.empty() and not life.promised:
                    life.ended = True
                    return
            continue
        if job is None:
            return
        job()
        del job  # the finished job's statement and rows are the caller's, not kept here
