"""The lab engine's SIGTERM (tests/lab/engine.py): its handler takes no lock, and the main
thread's waits see it. CI on e186b30 had an agent that took TERM and ran on for 49 s: the
handler had called Event.set() while the main thread held that Event's lock (each timed
out Event.wait() takes it back for a moment), and so waited on itself for ever. The window
is a few bytecodes wide, so these tests put the main thread in it on purpose."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1] / "lab"
# The engine imports its siblings by name, as it runs on a lab host.
sys.path.insert(0, str(LAB))
try:
    import engine as lab_engine
finally:
    sys.path.remove(str(LAB))


def test_the_sigterm_handler_returns_while_the_stop_events_lock_is_held() -> None:
    engine = lab_engine.Engine("rke2", "worker", [])
    handled = threading.Event()

    def handler() -> None:
        engine.terminate(signal.SIGTERM, None)
        handled.set()

    # Held as the main thread holds it between a timed-out wait and its return.
    with engine.stop._cond:  # type: ignore[attr-defined]
        threading.Thread(target=handler, daemon=True).start()
        assert handled.wait(5), "the handler waited for a lock the interrupted code holds"
    assert engine.terminating


def test_serve_returns_once_terminated_and_ends_the_threads_waits() -> None:
    engine = lab_engine.Engine("k3s", "controller", [])
    threading.Timer(0.1, engine.terminate, args=(signal.SIGTERM, None)).start()
    engine.serve()
    assert engine.stop.is_set()


def test_a_start_up_wait_raises_stopped_once_terminated() -> None:
    engine = lab_engine.Engine("rke2", "controller", [])
    engine.terminate(signal.SIGTERM, None)
    with pytest.raises(lab_engine.Stopped):
        engine._wait(60)
    assert engine.stop.is_set()
