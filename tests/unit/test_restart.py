"""The restart script's output (executor/swap_output.py) and the loop that follows a restart
(executor/restart_follow.py), with scripted events; tests/e2e/test_service.py runs the script on
a real supervisor and tests/e2e/test_rollout_fidelity.py the whole restart."""

from __future__ import annotations

import datetime
import queue
import subprocess
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from executor.file_writes import Written
from executor.readiness import CrashLoopError, NotBackError, Waiter, parse_probe
from executor.restart import Restart
from executor.restart_messages import Message, NodeVersion, Rerun, ScriptEnded, ScriptFailed
from executor.swap_output import Alive, OutputReader, Probed, Started, StepDone, Stopped
from executor.swap_runner import Gate
from executor.swap_script import HELD_GO, STOP_SLOW_TICK, STOP_TICK, SwapScript, stop_ticks
from executor.swap_steps import remove_step, write_step
from planner.errors import CommandError, CommandTimeout, ConnectionLost
from tests.whole_script import whole

T = "swtoken"
PLAN = "0123456789abcdef0123456789abcdef"
T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
RUN = "state runit run: /etc/service/x: (pid {}) 1s"


def test_output_reader_splits_events_across_any_chunking() -> None:
    text = (f"{T} before\n{RUN.format(10)}\n{T} end\n{T} stopped 1764590400\n"
            f"{T} done 0 backup\n{T} done 1 new\n{T} starting\n{RUN.format(10)}\n{T} end\n"
            f"{T} started\n{T} state\n{RUN.format(11)}\n{T} end\n{T} alive\n").encode()
    for size in (1, 7, len(text)):
        reader = OutputReader(T)
        events = [e for i in range(0, len(text), size) for e in reader.feed(text[i:i + size])]
        assert [type(e).__name__ for e in events] == [
            "Probed", "Stopped", "StepDone", "StepDone", "Probed", "Started", "Probed",
            "Alive"]
        assert events[0] == Probed("before", parse_probe(RUN.format(10)))
        assert events[1] == Stopped(1764590400)
        assert events[2:4] == [StepDone(0, "backup"), StepDone(1, "new")]
        assert isinstance(events[6], Probed) and events[6].state.pid == 11


def test_a_host_cannot_forge_lines_without_the_token() -> None:
    reader = OutputReader(T)
    forged = (b"other started\nstarted\n" + f"{T}x started\n{T} stopped soon\n".encode()
              + f"{T} state\nstate runit run: x (pid 5)\nxx started\n{T} end\n".encode())
    events = reader.feed(forged)
    assert [type(e).__name__ for e in events] == ["Probed"]


def test_script_puts_content_in_base64_and_only_the_watch_when_asked() -> None:
    steps = [write_step("/etc/x.yaml", b"password: pw-1\n", mode=0o600, plan_id=PLAN),
             remove_step("/etc/y.yaml", plan_id=PLAN)]
    script = SwapScript.of("runit", "rke2-agent", False, steps, stop_timeout=10,
                           watch_seconds=20)
    full, watch = whole(script), whole(script, swap=False)
    # base64 in the generated block
    assert "pw-1" not in full and "\nCONTENT_0=cGFzc3dvcmQ6IHB3LTEK\n" in full
    assert "\nSWAP=1\n" in full and "\nSTEPS=2\n" in full
    # The watch alone: no swap, no step, no content (test_swap_script_sh.py runs it: it
    # never stops the engine).
    assert "\nSWAP=0\n" in watch and "\nSTEPS=0\n" in watch and "cGFzc3dvcmQ" not in watch
    for text in (full, watch):  # POSIX sh parses it
        assert subprocess.run(["sh", "-n"], input=text.encode(), check=False).returncode == 0
    assert steps[0].written("backup") == Written("/etc/x.yaml",
                                                 f"/var/lib/cargoship/backups/{PLAN}/etc/x.yaml")
    assert steps[0].written("new") == Written("/etc/x.yaml", None)


class Host:
    label = "wrk-1"

    def run_root(self, script: str, **_: Any) -> Any:
        return SimpleNamespace(stdout=b"== engine\nlevel=fatal msg=boom\n", stderr=b"",
                               exit_code=0)


def node(beat: datetime.datetime) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": beat.isoformat()}]}}


def follow(messages: list[Message], timeout: float = 5.0) -> tuple[list[str], list[Written]]:
    notes: list[str] = []
    restart = Restart(Host(), "runit", "rke2-agent", "wrk-1", False, None,  # type: ignore[arg-type]
                      None, timeout, notes.append)
    waiter = Waiter(Host(), "runit", "rke2-agent", "wrk-1", False, None)  # type: ignore[arg-type]
    inbox: queue.Queue[Message] = queue.Queue()
    for message in messages:
        inbox.put(message)
    steps = [write_step("/etc/x.yaml", b"a: 1\n", mode=0o600, plan_id=PLAN)]
    written: list[Written] = []
    watches: list[float] = []
    restart._follow(waiter, inbox, steps, written, watches.append)
    assert len(watches) == 1  # the node is watched once the engine was started
    return notes, written


def swap(pid_after: int = 11) -> list[Message]:
    stop = int(T0.timestamp())
    return [Probed("before", parse_probe(RUN.format(10))), Stopped(stop),
            StepDone(0, "backup"), Probed("starting", parse_probe("state runit down: x")),
            Started(), Probed("state", parse_probe(RUN.format(pid_after)))]


def test_a_restart_is_back_on_a_new_process_and_a_fresh_heartbeat() -> None:
    fresh = T0 + datetime.timedelta(seconds=2)
    notes, written = follow([*swap(), NodeVersion(node(T0)), Alive(), NodeVersion(node(fresh))])
    assert notes == ["stopped rke2-agent", "wrote /etc/x.yaml",
                     "started rke2-agent, waiting until it is freshly back",
                     "waiting: node: wrk-1 has posted no status since the restart",
                     "back: new engine, fresh node status"]
    assert written == [Written("/etc/x.yaml", f"/var/lib/cargoship/backups/{PLAN}/etc/x.yaml")]


def test_a_host_that_never_comes_back_times_out_with_what_was_seen() -> None:
    with pytest.raises(NotBackError, match=r"not back after 0.3 s \(last seen: engine: "
                                           r"rke2-agent still runs its old process 10\)"):
        follow([*swap(pid_after=10), NodeVersion(node(T0 + datetime.timedelta(seconds=2)))],
               timeout=0.3)


def test_script_failures_before_the_start_are_errors_and_writes_are_kept() -> None:
    messages: list[Message] = [Stopped(int(T0.timestamp())), StepDone(0, "new"),
                               ScriptEnded(3, "/etc/x.yaml is a link: refusing")]
    notes: list[str] = []
    restart = Restart(Host(), "runit", "rke2-agent", "wrk-1", False, None,  # type: ignore[arg-type]
                      None, 5, notes.append)
    inbox: queue.Queue[Message] = queue.Queue()
    for message in messages:
        inbox.put(message)
    written: list[Written] = []
    waiter = Waiter(Host(), "runit", "rke2-agent", "wrk-1", False, None)  # type: ignore[arg-type]
    with pytest.raises(CommandError, match=r"exit 3\): /etc/x.yaml is a link"):
        restart._follow(waiter, inbox, [write_step("/etc/x.yaml", b"", mode=0o600,
                                                   plan_id=PLAN)], written, lambda _: None)
    assert written == [Written("/etc/x.yaml", None)]  # the caller restores it


def test_a_crash_loop_and_a_lost_host_end_the_wait() -> None:
    down = "state runit down: /etc/service/x: 0s, normally up, want up"
    with pytest.raises(CrashLoopError, match="crash-looping"):
        follow([*swap(), *(Probed("state", parse_probe(p)) for p in
                           (down, RUN.format(12), down, RUN.format(13)))])
    with pytest.raises(ConnectionLost):
        follow([*swap(), ScriptFailed(ConnectionLost("wrk-1", "SSH connection lost"))])


def test_a_stop_is_probed_quickly_at_first_then_less_often_until_its_timeout() -> None:
    for timeout in (0.01, 0.3, 2, 15, 120):
        fast, total = stop_ticks(timeout)
        assert 1 <= fast <= total
        waited = fast * STOP_TICK + (total - fast) * STOP_SLOW_TICK
        assert abs(waited - timeout) <= STOP_SLOW_TICK, (timeout, fast, total)
    assert stop_ticks(15) == (25, 170)  # 0.5 s at 0.02 s, then 14.5 s at 0.1 s



# Which probes the script runs, before the start and during the stop, it shows when it
# runs: tests/unit/test_swap_script_sh.py.


def test_a_gate_holds_the_input_open_after_go_for_one_last_chunk() -> None:
    gate = Gate()
    assert not gate.finish("too early\n")  # nothing before GO
    got: list[str | None] = []
    reader = threading.Thread(target=lambda: got.extend(gate.next(i) for i in range(4)))
    reader.start()
    gate.begin("begin\n")
    gate.open()
    deadline = time.monotonic() + 5
    while len(got) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    reader.join(0.2)  # had the input ended after GO, None would follow at once
    assert reader.is_alive() and got == ["begin\n", HELD_GO]
    assert gate.finish("last\n")
    reader.join(5)
    assert got == ["begin\n", HELD_GO, "last\n", None]
    assert not gate.finish("again\n")


def test_a_gate_ended_or_cancelled_has_no_more_input() -> None:
    ended = Gate()
    ended.begin("begin\n")
    ended.open()
    ended.end()
    assert [ended.next(i) for i in range(3)] == ["begin\n", HELD_GO, None]
    assert not ended.finish("late\n")
    cancelled = Gate()
    cancelled.begin("begin\n")
    cancelled.cancel()
    assert [cancelled.next(i) for i in range(2)] == ["begin\n", None]
    cancelled.open()  # too late: nothing is let go
    assert cancelled.next(1) is None


class Ticking(queue.Queue[Message]):
    """A script's lines, one a second on the restart's clock: each taken moves it on."""

    def __init__(self, messages: list[Message]) -> None:
        super().__init__()
        self.now = 0.0
        for message in messages:
            self.put(message)

    def get(self, block: bool = True, timeout: float | None = None) -> Message:
        self.now += 1.0
        return super().get(block=False)


def follow_ticking(messages: list[Message], start_within: float) -> list[str]:
    notes: list[str] = []
    inbox = Ticking(messages)
    restart = Restart(Host(), "runit", "rke2-agent", "wrk-1", False, None,  # type: ignore[arg-type]
                      None, 5.0, notes.append, clock=lambda: inbox.now)
    waiter = Waiter(Host(), "runit", "rke2-agent", "wrk-1", False, None)  # type: ignore[arg-type]
    steps = [write_step("/etc/x.yaml", b"a: 1\n", mode=0o600, plan_id=PLAN)]
    restart._follow(waiter, inbox, steps, [], lambda _: None, start_within)
    return notes


def test_a_script_alive_but_never_starting_the_engine_is_given_up_on_in_time() -> None:
    # Its keepalive says it lives for ALIVE_FOR (minutes); it must get on within
    # start_within of its GO, or the wait ends with an error the rollout acts on.
    with pytest.raises(CommandTimeout, match=r"did not start rke2-agent within 10 s, "
                                             r"though it said it was alive"):
        lines: list[Message] = [Probed("before", parse_probe(RUN.format(10))), *[Alive()] * 30]
        follow_ticking(lines, start_within=10)
    script = SwapScript.of("runit", "rke2-agent", False, [], stop_timeout=60,
                           watch_seconds=90)
    assert script.start_within == script.swap_lock_wait + 60 + 30
    assert int(script.values()["ALIVE_FOR"]) > script.start_within  # talks past the bound


def test_a_script_run_again_after_a_lost_connection_gets_the_time_again() -> None:
    fresh = T0 + datetime.timedelta(seconds=2)
    late = [*[Alive()] * 7, Rerun(), *[Alive()] * 4, *swap(), NodeVersion(node(fresh))]
    notes = follow_ticking(late, start_within=10)
    assert notes[-1] == "back: new engine, fresh node status"
    with pytest.raises(CommandTimeout):  # without the rerun, the same lines are too late
        follow_ticking([m for m in late if not isinstance(m, Rerun)], start_within=10)
