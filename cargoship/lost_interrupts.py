"""Interrupts Python swallowed, sent again.

Python runs a signal's handler in the main thread at the next bytecode it executes, and
that can be inside a weakref callback, a `__del__` or a finalizer. An exception raised
there cannot propagate: the interpreter hands it to `sys.unraisablehook` ("Exception
ignored in ...") and carries on, so a Ctrl-C, SIGTERM or SIGHUP (KeyboardInterrupt, or
SignalInterrupt as cli.py raises it) would be lost and the command would go on. It
happened in CI: a `plan` got SIGTERM while importlib dropped a module lock (its weakref
callback), and it waited out its 60 s connect timeout instead of stopping.

The hook has the signal sent again once the main thread has left the hook: sent while
the hook still runs, the handler would raise inside the hook, and what a hook raises is
printed and lost for good. Swallowed again by another callback, it comes back here and is
sent again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from planner.threads import start

LEAVE_WAIT = 5.0  # seconds the hook may take to return before the signal goes anyway


def _inside(frame: FrameType | None, code: CodeType) -> bool:
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _send_once_out(main: int, code: CodeType, signum: int) -> None:
    deadline = time.monotonic() + LEAVE_WAIT
    while _inside(sys._current_frames().get(main), code) and time.monotonic() < deadline:
        time.sleep(0.001)  # the main thread holds the GIL while it runs the hook: brief
    os.kill(os.getpid(), signum)


def _resend(read_end: int, main: int, code: CodeType) -> None:
    while chunk := os.read(read_end, 64):
        for signum in chunk:
            _send_once_out(main, code, signum)
    os.close(read_end)


def install() -> Callable[[], None]:
    """Install the hook (once: a second call, as a test calling main() twice makes, keeps
    the first); returns what puts the previous one back.

    The thread that sends a signal again is started here, not in the hook: the hook runs
    on the main thread wherever a callback fired, maybe inside threading's own code with
    its locks held (a join holds one a new thread needs), and starting a thread there
    would wait on it for ever. The hook only writes the signal's number to a pipe."""
    previous = sys.unraisablehook
    if getattr(previous, "resends_interrupts", False):
        return lambda: None
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(write_end, False)
    main = threading.main_thread().ident or 0

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        # Only the main thread runs signal handlers: anywhere else it was no signal's.
        # Its thread blocks the signal (planner.threads), so it lands on the main thread,
        # which wakes even from an untimed wait. An exiting interpreter runs no thread.
        if isinstance(exc, KeyboardInterrupt) and not sys.is_finalizing() and \
                threading.current_thread() is threading.main_thread():
            try:
                os.write(write_end, bytes([int(getattr(exc, "signum", signal.SIGINT))]))
                return  # not lost: nothing to print
            except OSError:  # restored meanwhile (closed), or 64 KiB not yet taken
                pass
        previous(unraisable)

    hook.resends_interrupts = True  # type: ignore[attr-defined]
    start(_resend, name="cargoship-resend-interrupt", args=(read_end, main, hook.__code__))
    sys.unraisablehook = hook

    def restore() -> None:
        sys.unraisablehook = previous
        os.close(write_end)  # the thread sends what is left, then ends

    return restore
