"""How apply takes SIGINT, SIGTERM and SIGHUP (executor/signals.py), as decisions."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from executor.errors import SignalInterrupt
from executor.signals import Interrupts


def _until(check, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _changing() -> tuple[Interrupts, list[str], threading.Event]:
    """Interrupts of a rollout that may change hosts: what it says, and whether it
    escalated."""
    said: list[str] = []
    escalated = threading.Event()
    changing = threading.Event()
    changing.set()
    return (Interrupts(lambda h, w: said.append(w), threading.Event(), changing,
                       [escalated.set]), said, escalated)


def test_before_anything_changes_a_signal_raises_with_its_number() -> None:
    interrupts = Interrupts(lambda h, w: None, threading.Event(), threading.Event())
    with pytest.raises(SignalInterrupt) as caught:
        interrupts._handle(signal.SIGTERM, None)
    assert caught.value.signum == signal.SIGTERM and interrupts.first == signal.SIGTERM


def test_while_changing_the_first_stops_and_the_second_escalates() -> None:
    interrupts, said, escalated = _changing()
    with interrupts:
        interrupts._handle(signal.SIGHUP, None)
        _until(interrupts.stop.is_set)
        _until(lambda: said)
        assert not escalated.is_set()
        assert said == ["SIGHUP: finishing the host(s) in progress, then stopping (again: "
                        "roll them back now)"]
        interrupts._handle(signal.SIGINT, None)
        _until(escalated.is_set)
        _until(lambda: len(said) == 2)
    assert said[1] == "Ctrl-C again: rolling the host(s) in progress back now"
    assert interrupts.first == signal.SIGHUP  # the exit code says the first one


def test_signals_not_yet_taken_are_taken_before_the_block_ends() -> None:
    interrupts, said, _ = _changing()
    with interrupts:
        interrupts._handle(signal.SIGTERM, None)
    assert interrupts.stop.is_set() and said, said


def _returns_while_held(locks: list[Any], call: Callable[[], None]) -> bool:
    """Whether `call` returns (on a thread of its own) while this thread holds `locks`,
    as the main thread does when a signal's handler runs in the middle of its code."""
    go, returned = threading.Event(), threading.Event()

    def run() -> None:
        go.wait()
        call()
        returned.set()

    threading.Thread(target=run, daemon=True).start()  # before: starting one takes them
    for lock in locks:
        lock.acquire()
    try:
        go.set()
        return returned.wait(5)
    finally:
        for lock in reversed(locks):
            lock.release()


def test_the_handler_takes_no_lock_the_interrupted_code_may_hold() -> None:
    """Setting an Event takes its lock; starting a thread waits for the new thread, which
    takes threading's own locks (`_shutdown_locks_lock` is held by any thread inside a
    join). A handler that did either hung for ever when the signal landed there: apply
    then sat out a second SIGTERM in CI."""
    interrupts, said, escalated = _changing()
    held = [interrupts.stop._cond, threading._shutdown_locks_lock,  # type: ignore[attr-defined]
            threading._active_limbo_lock]  # type: ignore[attr-defined]
    with interrupts:
        assert _returns_while_held(held, lambda: interrupts._handle(signal.SIGTERM, None))
        _until(interrupts.stop.is_set)
        assert _returns_while_held(held, lambda: interrupts._handle(signal.SIGTERM, None))
        _until(escalated.is_set)  # once the locks are free
        _until(lambda: len(said) == 2)


def test_the_handler_never_blocks_on_a_progress_lock_the_main_thread_holds() -> None:
    lock = threading.Lock()
    changing = threading.Event()
    changing.set()

    def progress(host: str, what: str) -> None:
        with lock:
            pass

    interrupts = Interrupts(progress, threading.Event(), changing)
    with interrupts:
        with lock:  # as if the signal came in the middle of a progress line
            interrupts._handle(signal.SIGTERM, None)  # returns: it does not wait for the lock
            _until(interrupts.stop.is_set)


def test_a_signal_wrapped_by_an_import_still_ends_the_command_as_that_signal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # SIGHUP landing while a module defines a dataclass: Python 3.11 hands it on wrapped in
    # a RuntimeError ("Error calling __set_name__ ..."); it was an internal error, exit 1.
    import cargoship.cli as cli

    def dispatch(args: object) -> int:
        try:
            raise SignalInterrupt(signal.SIGHUP)
        except SignalInterrupt as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc

    monkeypatch.setattr(cli, "_dispatch", dispatch)
    monkeypatch.setattr(cli.signal, "signal", lambda *_: None)  # leave pytest's handlers be
    assert cli.main(["plan", "-c", "cluster.yaml"]) == 129
    err = capsys.readouterr().err
    assert "interrupted; nothing was changed on any host" in err and "internal" not in err, err


def test_a_signal_ignored_when_apply_started_stays_ignored() -> None:
    # nohup's SIGHUP: the apply outlives its terminal; the others are taken as ever.
    interrupts, _, _ = _changing()
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == interrupts._handle
            assert signal.getsignal(signal.SIGINT) == interrupts._handle
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
