"""Every thread cargoship starts, started here: with SIGINT, SIGTERM and SIGHUP blocked.

The kernel hands a signal sent to the process to any thread that does not block it.
CPython runs the handler in the main thread, but a main thread blocked in an untimed wait
(a future's result, an event, a join) is woken only when the signal lands on the main
thread itself. With the SSH loop's thread, its blocking helpers and the rollout's workers
beside it, a Ctrl-C or a CI runner's SIGTERM often landed elsewhere, and a plan waiting on
a silent host went on waiting (tests/e2e/test_cli_signals.py, seen under load). With every
other thread blocking them, the main thread is the only one left to take them.

A thread inherits the signal mask of the thread that creates it: `start` and `Executor`
create theirs with the signals blocked in the creating thread for that moment, so no
thread exists, even for an instant, that could take one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

P = ParamSpec("P")
T = TypeVar("T")


@contextmanager
def interrupts_blocked() -> Iterator[None]:
    """Block the interrupting signals in this thread for the block; threads created
    inside it keep them blocked for good."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start(target: Callable[..., object], *, name: str, args: tuple[Any, ...] = (),
          daemon: bool = True) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    with interrupts_blocked():
        thread.start()
    return thread


class Executor(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose workers never take an interrupting signal. Its workers
    are created inside submit, from the submitting thread."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with interrupts_blocked():
            return super().submit(fn, *args, **kwargs)
