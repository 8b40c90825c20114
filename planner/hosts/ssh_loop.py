"""One thread that drives many libssh2 sessions at once, without blocking (libssh2.py).

A thread per host spent more of a plan's CPU on thread start-up and on handing the GIL
around than on the SSH work itself (about 0.5 ms a host, measured in tests/bench). Here
each host's work is a generator that yields whenever libssh2 says EAGAIN; the loop waits
on every session's socket at once and resumes the generator whose socket is ready.

A job ends with its generator's return value, or the exception it raised, or a timeout
at its deadline (`expired` makes that exception). A session is driven by one job at a
time: whoever submits a job for a session waits for its result before the next.
"""

from __future__ import annotations

import heapq
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("cargoship.planner")

Steps = Generator[None, None, Any]

# libssh2_session_block_directions bits (libssh2.h): what the session waits for.
BLOCK_INBOUND = 1
BLOCK_OUTBOUND = 2


class LoopClosed(Exception):
    """The run closed its SSH loop: no more jobs."""


@dataclass(eq=False)
class _Job:
    sock: socket.socket
    session: Any  # an ssh2 Session: its block_directions() says what to wait for
    steps: Steps
    deadline: float
    expired: Callable[[], BaseException]
    future: Future[Any] = field(default_factory=Future)
    fd: int = -1  # the socket's, kept: a job's steps may close its socket
    events: int = 0  # what the selector waits for on its behalf (0: not registered)

    def __post_init__(self) -> None:
        self.fd = self.sock.fileno()


class SshLoop:
    """Started on the first job, in a daemon thread; close() ends it and fails the jobs
    still running. A job submitted after that starts it again: one process may make
    several runs with the same connect options (`history` reads records, then plans)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inbox: list[_Job] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._wake_w: socket.socket | None = None  # the running thread's wake-up line

    def submit(self, sock: socket.socket, session: Any, steps: Steps, timeout: float,
               expired: Callable[[], BaseException]) -> Future[Any]:
        job = _Job(sock, session, steps, time.monotonic() + timeout, expired)
        with self._lock:
            if self._closed:
                steps.close()
                job.future.set_exception(LoopClosed("the run's SSH connections are closed"))
                return job.future
            if self._thread is None:
                wake_r, self._wake_w = socket.socketpair()
                wake_r.setblocking(False)
                self._thread = threading.Thread(target=self._run,
                                                args=(wake_r, self._wake_w),
                                                name="cargoship-ssh", daemon=True)
                self._thread.start()
            self._inbox.append(job)
        self._wake()
        return job.future

    def close(self) -> None:
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._closed = True
        self._wake()
        thread.join(5)
        with self._lock:
            if self._thread is thread and not thread.is_alive():
                self._thread = None
                self._closed = False

    def _wake(self) -> None:
        with self._lock:
            wake_w = self._wake_w
        try:
            if wake_w is not None:
                wake_w.send(b"\0")
        except OSError:
            pass  # the loop has ended, or a wake-up is pending already (buffer full)

    def _run(self, wake_r: socket.socket, wake_w: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(wake_r, selectors.EVENT_READ, None)
        jobs: dict[int, _Job] = {}
        # Deadlines in a heap: with hundreds of jobs, a scan of them all at each wake-up
        # made the loop quadratic. Entries of jobs that ended are dropped as they surface.
        deadlines: list[tuple[float, int, _Job]] = []
        try:
            while True:
                with self._lock:
                    starting, self._inbox = self._inbox, []
                    closed = self._closed
                if closed:
                    for job in [*jobs.values(), *starting]:
                        _fail(job, LoopClosed("the run's SSH connections were closed"))
                    return
                for job in starting:
                    jobs[job.fd] = job
                    heapq.heappush(deadlines, (job.deadline, id(job), job))
                    self._advance(selector, jobs, job)
                now = time.monotonic()
                while deadlines and (deadlines[0][2].future.done() or
                                     deadlines[0][0] <= now):
                    _, _, job = heapq.heappop(deadlines)
                    if not job.future.done():
                        self._end(selector, jobs, job)
                        _fail(job, job.expired())
                wait = (deadlines[0][0] if deadlines else now + 60) - now
                for key, _ in selector.select(max(0.0, wait)):
                    if key.data is None:
                        _drain(wake_r)
                    elif key.fd in jobs:
                        self._advance(selector, jobs, jobs[key.fd])
        except BaseException as exc:
            # A bug here must not leave anyone waiting forever: every job hears of it,
            # and later ones are refused.
            log.debug("SSH loop failed: %s", exc, exc_info=True)
            with self._lock:
                self._closed = True
                starting, self._inbox = self._inbox, []
            for job in [*jobs.values(), *starting]:
                _fail(job, LoopClosed(f"the run's SSH loop failed: {exc}"))
        finally:
            selector.close()
            with self._lock:
                if self._wake_w is wake_w:
                    self._wake_w = None
            wake_r.close()
            wake_w.close()

    def _advance(self, selector: selectors.BaseSelector, jobs: dict[int, _Job],
                 job: _Job) -> None:
        try:
            next(job.steps)
        except StopIteration as done:
            self._end(selector, jobs, job)
            job.future.set_result(done.value)
            return
        except Exception as exc:  # noqa: BLE001 - the job's outcome, for whoever waits
            self._end(selector, jobs, job)
            job.future.set_exception(exc)
            return
        directions = job.session.block_directions()
        events = (selectors.EVENT_READ if directions & BLOCK_INBOUND else 0) | \
            (selectors.EVENT_WRITE if directions & BLOCK_OUTBOUND else 0)
        # EAGAIN with no direction: libssh2 waits for the peer (an answer still to come).
        events = events or selectors.EVENT_READ
        if events != job.events:
            if job.events:
                selector.modify(job.fd, events, job)
            else:
                selector.register(job.fd, events, job)
            job.events = events

    @staticmethod
    def _end(selector: selectors.BaseSelector, jobs: dict[int, _Job], job: _Job) -> None:
        jobs.pop(job.fd, None)
        if job.events:
            selector.unregister(job.fd)
            job.events = 0


def _fail(job: _Job, exc: BaseException) -> None:
    job.steps.close()
    if not job.future.done():
        job.future.set_exception(exc)


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass  # nothing more to read (EAGAIN)
