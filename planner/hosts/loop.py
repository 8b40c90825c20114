"""The run's one event loop for SSH: every TCP connection, handshake, command and gateway
pump of a run, plan and apply alike, in one thread (asyncio).

Callers are plain threads (phases, the rollout's per-host workers): they hand the loop a
coroutine and wait for its result (`call`) or take a future (`submit`). The loop starts
with the first coroutine; close() cancels whatever still runs and ends the thread. A run
that submits again after that gets a new loop: one process may make several runs with
the same connect options (`history` reads records, then plans).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import CancelledError, Future
from typing import Any, TypeVar

from ..threads import Executor, start

log = logging.getLogger("cargoship.planner")

T = TypeVar("T")
# Threads for callers' code (made as needed): more than a run has commands at once.
BLOCKING_THREADS = 1024


class LoopClosed(Exception):
    """The run closed its SSH loop while a coroutine still ran on it."""


class SshLoop:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Run `coro` on the loop; its result (or exception) arrives in the future."""
        loop = self._running()
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for it. The coroutine bounds its own time."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("SshLoop.call from the loop's own thread would wait forever")
        future = self.submit(coro)
        try:
            return future.result()
        except CancelledError:
            raise LoopClosed("the run's SSH connections were closed") from None

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(_cancel_all, loop)
        thread.join(5)

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = start(_serve, args=(loop, started), name="cargoship-ssh")
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop


def _serve(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    # What a command hands back to its caller's code runs in these threads (ssh.py: a held
    # stdin's source, which blocks until the rollout releases it; output callbacks), never
    # on the loop. asyncio's default pool has cpu + 4 threads: a rollout's held commands
    # would fill it and queue the callbacks that let them go.
    loop.set_default_executor(Executor(max_workers=BLOCKING_THREADS,
                                       thread_name_prefix="cargoship-ssh-call"))
    loop.call_soon(started.set)
    try:
        loop.run_forever()
    finally:
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        except RuntimeError:
            pass  # closed from inside: nothing more to wait for
        loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel every task, let them unwind (their `finally` closes sockets), then stop."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()

    async def unwind() -> None:
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        loop.stop()

    loop.create_task(unwind())
