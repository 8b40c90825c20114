"""An interrupt whose handler ran inside a weakref callback is not lost
(cargoship/lost_interrupts.py).

Real signals and a real weakref callback: the signal is raised in the callback, where
Python runs the handler and then swallows what it raised."""

from __future__ import annotations

import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from cargoship import lost_interrupts
from executor.errors import SignalInterrupt


def _raise(signum: int, frame: object) -> None:
    raise SignalInterrupt(signum)


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _raise)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def unraisable() -> Iterator[list[BaseException | None]]:
    """What reaches the hook that was there before ours: what Python would print."""
    seen: list[BaseException | None] = []
    previous, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(u.exc_value)
    yield seen
    sys.unraisablehook = previous


class _Thing:
    pass


def _drop_with_a_signal_in_its_callback() -> list[str]:
    ran: list[str] = []

    def callback(_: object) -> None:
        signal.raise_signal(signal.SIGTERM)  # the handler runs at the next bytecode: here
        ran.append("callback ended")  # not reached: the handler raised above

    thing = _Thing()
    ref = weakref.ref(thing, callback)
    del thing  # the callback runs now, on this thread
    assert ref() is None
    return ran


def _wait(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def test_an_interrupt_swallowed_by_a_weakref_callback_is_raised_again_outside_it(
        sigterm_raises: None) -> None:
    restore = lost_interrupts.install()
    try:
        with pytest.raises(SignalInterrupt) as raised:
            ran = _drop_with_a_signal_in_its_callback()
            assert ran == []  # the handler did raise in the callback...
            _wait(10)  # ...and, sent again, it is raised here, long before this ends
        assert raised.value.signum == signal.SIGTERM
    finally:
        restore()


def test_without_the_hook_python_loses_it(
        sigterm_raises: None, unraisable: list[BaseException | None]) -> None:
    # The premise: the hook is what saves it. Nothing is raised in the caller; the
    # interrupt only reaches the unraisable hook.
    ran = _drop_with_a_signal_in_its_callback()
    _wait(0.3)
    assert ran == []
    assert [type(e) for e in unraisable] == [SignalInterrupt]


def test_other_unraisable_errors_still_reach_the_previous_hook(
        sigterm_raises: None, unraisable: list[BaseException | None]) -> None:
    restore = lost_interrupts.install()
    try:
        def callback(_: object) -> None:
            raise ValueError("a bug in a callback")

        thing = _Thing()
        ref = weakref.ref(thing, callback)
        del thing
        assert ref() is None
    finally:
        restore()
    assert [type(e) for e in unraisable] == [ValueError]


def test_a_keyboard_interrupt_in_another_threads_callback_sends_nothing(
        unraisable: list[BaseException | None]) -> None:
    # No signal handler runs outside the main thread: such an exception is a bug, not
    # a lost Ctrl-C, and goes to the previous hook rather than interrupting the command.
    signals: list[int] = []
    previous_int = signal.signal(signal.SIGINT, lambda signum, frame: signals.append(signum))
    restore = lost_interrupts.install()
    try:
        def drop() -> None:
            def callback(_: object) -> None:
                raise KeyboardInterrupt

            thing = _Thing()
            ref = weakref.ref(thing, callback)
            del thing
            assert ref() is None

        thread = threading.Thread(target=drop)
        thread.start()
        thread.join()
        _wait(0.3)
    finally:
        restore()
        signal.signal(signal.SIGINT, previous_int)
    assert [type(e) for e in unraisable] == [KeyboardInterrupt]
    assert signals == []


def test_at_interpreter_exit_it_goes_to_the_previous_hook(
        sigterm_raises: None, unraisable: list[BaseException | None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    restore = lost_interrupts.install()
    # An exiting interpreter runs no other thread: nothing would send it again.
    monkeypatch.setattr(lost_interrupts.sys, "is_finalizing", lambda: True)
    try:
        ran = _drop_with_a_signal_in_its_callback()
    finally:
        restore()
    assert ran == []
    assert [type(e) for e in unraisable] == [SignalInterrupt]  # printed as Python would, no crash


def test_the_hook_starts_no_thread(sigterm_raises: None, monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    """It may run inside threading's own code with its locks held (a weakref callback
    fires anywhere): a thread started there could wait for ever on those locks."""
    restore = lost_interrupts.install()

    def no_threads(*args: object, **kwargs: object) -> None:
        raise AssertionError("the hook started a thread")

    monkeypatch.setattr(lost_interrupts, "start", no_threads)
    monkeypatch.setattr(threading.Thread, "start", no_threads)
    try:
        with pytest.raises(SignalInterrupt):
            _drop_with_a_signal_in_its_callback()
            _wait(10)
    finally:
        restore()
