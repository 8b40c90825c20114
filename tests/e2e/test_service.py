"""The restart script (executor/swap_script.py) under a real supervisor (runit) on a lab
host: stop, write and start in one exec, the engine's state reported from the host."""

from __future__ import annotations

import itertools
import posixpath
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.host_lock import UNSAFE
from executor.readiness import EngineState
from executor.remote import HostWriter
from executor.restart import Restart
from executor.restart_messages import Message
from executor.swap_output import (
    Alive,
    Cleared,
    Event,
    Marked,
    OutputReader,
    Probed,
    Staged,
    Started,
    StepDone,
    Stopped,
)
from executor.swap_runner import Gate, RemoteSwap
from executor.swap_script import STOP_FAILED, SwapScript, finish, stop_ticks
from executor.swap_steps import write_step
from planner.hosts.ssh import ABANDONED, CommandResult
from tests.e2e.test_files import PLAN, REGISTRIES, writer
from tests.lab import HostSpec, Lab
from tests.whole_script import whole


def run_until(host: HostWriter, script: SwapScript, done: Callable[[list[Event]], bool],
              *, swap: bool = True, timeout: float = 30) -> tuple[CommandResult, list[Event]]:
    """Run the script, collecting its events, until `done` says so (then stop reading)."""
    reader = OutputReader(script.token)
    seen: list[Event] = []

    def feed(data: bytes) -> bool:
        seen.extend(reader.feed(data))
        return not done(seen)

    return host.stream_root(whole(script, swap=swap), feed, timeout), seen


def running_new(before: EngineState | None) -> Callable[[list[Event]], bool]:
    def done(seen: list[Event]) -> bool:
        return any(isinstance(e, Probed) and e.name == "state" and e.state.state == "running"
                   and before is not None and e.state.pid != before.pid for e in seen)
    return done


def shim_sv(lab: Lab, line: str) -> None:
    """An sv on wrk-1 first in the script's PATH (/usr/local/bin) that runs `line` with
    sv's arguments, then the real sv."""
    sv = Path(lab.host("wrk-1").dir, "bin", "sv")
    sv.write_text(f'#!/bin/sh\n{line}\nexec /usr/bin/sv "$@"\n')
    sv.chmod(0o755)


def counted_sv(lab_factory: Callable[..., Lab], first: str, content: bytes, *,
               stop_timeout: float, watch_seconds: float
               ) -> tuple[Lab, HostWriter, SwapScript]:
    """A worker whose sv runs `first`, then notes its command in /run/sv-calls, and a
    script writing `content` to its registries.yaml."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    shim_sv(lab, first + 'echo "$1" >> /run/sv-calls')
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(REGISTRIES, content, mode=0o600, plan_id=PLAN)],
                           stop_timeout=stop_timeout, watch_seconds=watch_seconds)
    return lab, writer(lab, "wrk-1"), script


def timed_events(host: HostWriter, script: SwapScript,
                 done: Callable[[list[Event]], bool]) -> list[tuple[float, Event]]:
    """The script's events as they arrived (monotonic time), until `done` says so."""
    arrived: list[tuple[float, Event]] = []
    reader = OutputReader(script.token)

    def feed(data: bytes) -> bool:
        arrived.extend((time.monotonic(), e) for e in reader.feed(data))
        return not done([e for _, e in arrived])

    host.stream_root(whole(script), feed, 60)
    return arrived


def engine_pid(lab: Lab, host: str) -> str:
    out = lab.exec(host, "sv status /etc/service/rke2-agent").stdout
    found = re.search(r"\(pid (\d+)\)", out)
    assert found, out
    return found.group(1)


def test_stop_write_start_in_one_exec(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker", user="alice")])
    marker = Path(lab.host("wrk-1").dir) / "rancher-var" / "rke2" / "lab-engine.json"
    assert marker.exists()
    host = writer(lab, "wrk-1")
    secret = b"configs: {r.io: {auth: {password: pw-5e2a}}}\n"
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(REGISTRIES, secret, mode=0o600, plan_id=PLAN)],
                           stop_timeout=15, watch_seconds=30)
    trips = host.round_trips
    result, seen = run_until(host, script, lambda s: any(
        isinstance(e, Probed) and e.name == "state" and e.state.state == "running"
        for e in s))
    assert host.round_trips == trips + 1  # one exec for all of it
    assert result.exit_code == ABANDONED  # we stopped listening; the host's watch exits
    kinds = [type(e).__name__ + (f":{e.name}" if isinstance(e, Probed) else "") for e in seen]
    # No probe right before a worker's start: only a controller's says something new then.
    assert kinds[:6] == ["Staged", "Marked", "Probed:before", "Stopped", "StepDone",
                         "Started"]
    before = next(e.state for e in seen if isinstance(e, Probed) and e.name == "before")
    after = [e.state for e in seen if isinstance(e, Probed) and e.name == "state"][-1]
    assert before.state == "running" and after.state == "running"
    assert before.pid != after.pid  # a new engine process
    stopped = next(e for e in seen if isinstance(e, Stopped))
    assert abs(stopped.at - time.time()) < 30
    done = next(e for e in seen if isinstance(e, StepDone))
    assert (done.index, done.result) == (0, "backup")
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout.encode() == secret
    assert lab.exec("wrk-1", f"stat -c %a {REGISTRIES}").stdout.strip() == "600"
    # The engine stopped in between: its events log says so, in order.
    events = lab.exec("wrk-1", "cat /var/log/lab-engine/events.log").stdout.split("\n")
    assert [ln.split()[1] for ln in events if ln][-3:] == ["stopped", "starting", "ready"] \
        or [ln.split()[1] for ln in events if ln][-4:-1] == ["stopped", "starting", "ready"]
    # The host's watch goes away once nobody reads it.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = lab.exec("wrk-1", "pgrep -x -f 'sh -s' || true").stdout.split()
        if not left:
            break
        time.sleep(0.1)
    assert not left, "the host's watch outlived its reader"
    host.close()


def test_the_content_is_never_on_a_command_line(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = writer(lab, "wrk-1")
    secret = b"password: pw-" + b"9" * 40 + b"\n"
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(REGISTRIES, secret, mode=0o600, plan_id=PLAN)],
                           stop_timeout=15, watch_seconds=30)
    lines: list[str] = []
    stop = threading.Event()

    def watch_ps() -> None:
        while not stop.is_set():
            lines.extend(lab.exec("wrk-1", "ps -eo args").stdout.splitlines())

    watcher = threading.Thread(target=watch_ps)
    watcher.start()
    try:
        run_until(host, script, lambda s: any(isinstance(e, Started) for e in s))
    finally:
        stop.set()
        watcher.join()
    assert any("sh -s" in ln for ln in lines)  # the watcher did see the script run
    assert not [ln for ln in lines if "pw-999" in ln or "cGFzc3dvcmQ" in ln]
    host.close()


def test_a_missing_service_fails_before_anything_is_written(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker", engine_installed=False)])
    host = writer(lab, "wrk-1")
    before = lab.exec("wrk-1", f"cat {REGISTRIES} 2>/dev/null || echo none").stdout
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(REGISTRIES, b"x: 1\n", mode=0o600, plan_id=PLAN)],
                           stop_timeout=2, watch_seconds=5)
    result, seen = run_until(host, script, lambda s: False)
    assert result.exit_code == 4
    assert re.search(rb"stopping rke2-agent failed", result.stderr), result.stderr
    assert not [e for e in seen if isinstance(e, StepDone | Started)]
    assert lab.exec("wrk-1", f"cat {REGISTRIES} 2>/dev/null || echo none").stdout == before
    host.close()


def test_an_engine_that_cannot_run_is_reported_as_it_is(lab_factory) -> None:
    """The run script gone: runit reports the service down-and-wanted or failing; the host
    keeps reporting each change until its own deadline."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = writer(lab, "wrk-1")
    lab.exec("wrk-1", "chmod -x /etc/service/rke2-agent/run")
    script = SwapScript.of("runit", "rke2-agent", False, [], stop_timeout=15,
                           watch_seconds=3)
    result, seen = run_until(host, script, lambda s: False)
    assert result.exit_code == 0  # the host's watch ran out of time: its deadline
    states = [e.state.state for e in seen if isinstance(e, Probed) and e.name == "state"]
    assert states and "running" not in states, states
    assert type(seen[-1]).__name__ == "Deadline"
    host.close()


def test_after_a_lost_connection_only_the_watch_runs_again(lab_factory) -> None:
    """swap=False: no stop, no write, no start: the engine keeps its process."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = writer(lab, "wrk-1")
    first = engine_pid(lab, "wrk-1")
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(REGISTRIES, b"x: 1\n", mode=0o600, plan_id=PLAN)],
                           stop_timeout=15, watch_seconds=30)
    result, seen = run_until(host, script, lambda s: any(
        isinstance(e, Probed) and e.name == "state" for e in s), swap=False)
    assert result.exit_code == ABANDONED
    assert not [e for e in seen if isinstance(e, Stopped | StepDone | Started)]
    assert engine_pid(lab, "wrk-1") == first
    assert "x: 1" not in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    host.close()


def test_a_slow_stop_is_not_silence(lab_factory) -> None:
    """A stop that blocks (systemctl waits for the unit to go) still has the script say
    something every second: the executor takes 15 s of silence for a lost connection."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    shim_sv(lab, '[ "$1" = down ] && sleep 3')
    host = writer(lab, "wrk-1")
    script = SwapScript.of("runit", "rke2-agent", False, [], stop_timeout=15,
                           watch_seconds=30)
    arrived = timed_events(host, script, lambda s: any(isinstance(e, Started) for e in s))
    before = next(t for t, e in arrived if isinstance(e, Probed) and e.name == "before")
    stopped = next(t for t, e in arrived if isinstance(e, Stopped))
    assert stopped - before >= 3  # the stop did block
    during = [t for t, e in arrived if isinstance(e, Alive) and before < t < stopped]
    assert len(during) >= 2, arrived
    assert max(b - a for a, b in itertools.pairwise([before, *during, stopped])) < 2
    host.close()


def test_a_stop_that_never_comes_is_looked_at_without_sv_and_given_up(lab_factory) -> None:
    """`sv down` that does nothing: the script reads runit's supervise/stat every 0.02 s for
    half a second, then every 0.1 s (`sv status` would run only if it said something else
    than run, finish or down), and gives up at the stop timeout with the state it last
    saw; nothing is written or started."""
    lab, host, script = counted_sv(lab_factory, '[ "$1" = down ] && exit 0; ', b"x: 3\n",
                                   stop_timeout=2, watch_seconds=5)
    started = time.monotonic()
    result, seen = run_until(host, script, lambda s: False)
    assert time.monotonic() - started >= 2
    assert result.exit_code == STOP_FAILED
    assert b"rke2-agent did not stop within 2 s: state runit run:" in result.stderr
    assert not [e for e in seen if isinstance(e, Stopped | StepDone | Started)]
    calls = lab.exec("wrk-1", "cat /run/sv-calls").stdout.split()
    # The probe before the stop and the one for the message. With a probe at every tick
    # (25 ticks 0.02 s apart, then 15 more 0.1 s apart) it would be 41.
    assert stop_ticks(2)[1] == 40
    assert calls.count("status") == 2, calls
    host.close()


def test_a_stop_on_runit_is_seen_without_sv(lab_factory) -> None:
    """From `sv down` to the engine seen down, the script reads runsv's supervise/stat with
    a shell builtin: the only `sv status` of a worker's whole swap is the probe before it
    (no probe at each tick of the stop, none to confirm it, none right before the start)."""
    lab, host, script = counted_sv(lab_factory, "", b"x: 4\n", stop_timeout=15,
                                   watch_seconds=30)
    # Statuses stop_look asks again after, by design, are noted apart: one that says runsv
    # has not yet taken the stop ("want up", on a loaded machine), and one still saying
    # "run: ..., want down" though supervise/stat says down. runsv writes stat before the
    # `status` file sv reads (runit src/runsv.c, update_status: stat.new renamed, then
    # status.new), so an `sv status` between the two renames sees the old state (CI run with
    # the engines' etcd timing, 2026-12-05: ['status', 'down', 'status', 'status', 'up']).
    shim_sv(lab, 'if [ "$1" = status ]; then o=$(/usr/bin/sv "$@"); r=$?; case "$o" in '
                 '*"want up"*) echo status-want-up;; run:*"want down"*) echo status-stale;; '
                 '*) echo status;; esac >> /run/sv-calls; '
                 'printf "%s\\n" "$o"; exit $r; fi; echo "$1" >> /run/sv-calls')
    result, seen = run_until(host, script, lambda s: any(isinstance(e, Started) for e in s))
    assert result.exit_code == ABANDONED  # we stopped listening once it had started
    assert [type(e).__name__ for e in seen if isinstance(e, Stopped | StepDone | Started)] == [
        "Stopped", "StepDone", "Started"]
    calls = lab.exec("wrk-1", "cat /run/sv-calls").stdout.split()
    # The `before` probe, and one look that runsv has taken the stop (stop_look).
    assert calls[:calls.index("up")].count("status") == 2, calls
    assert calls.count("down") == 1
    host.close()


def test_a_crash_looping_engine_stopped_in_runsvs_pause_starts_at_the_first_ask(
        lab_factory) -> None:
    """An engine whose run script fails at once crash-loops, and runit's runsv sleeps a
    second after each quick exit (runsv.c: sleep(1)), reading no request meanwhile: the
    service reads `down`, our `sv down` unread. The stop must wait until runsv takes it,
    or the start's `sv up` is skipped (sv.c control(): the status still wants up), runsv
    then takes the queued down, and only the nudge, two seconds on, starts the engine.
    That is a rollback's restart: the config it undoes made the engine crash-loop."""
    lab, host, _ = counted_sv(lab_factory, "", b"", stop_timeout=15, watch_seconds=30)
    run = "/etc/service/rke2-agent/run"
    good = lab.exec("wrk-1", f"cat {run}").stdout.encode()
    lab.exec("wrk-1", f"printf '#!/bin/sh\\nexit 1\\n' > {run}.new && mv {run}.new {run} && "
             "sv term /etc/service/rke2-agent")
    _until("the engine crash-looping", lambda: "want up" in lab.exec(
        "wrk-1", "sv status /etc/service/rke2-agent").stdout)
    lab.exec("wrk-1", "rm -f /run/sv-calls")
    # The rollback: its step puts the working run script back.
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(run, good, mode=0o755, plan_id=PLAN)],
                           stop_timeout=15, watch_seconds=30)
    result, _ = run_until(host, script, lambda s: any(
        isinstance(e, Probed) and e.name == "state" and e.state.state == "running"
        for e in s))
    assert result.exit_code == ABANDONED, result  # it ran again: we stopped listening
    calls = lab.exec("wrk-1", "cat /run/sv-calls").stdout.split()
    assert calls.count("up") == 1, calls  # taken at once: no nudge was needed
    host.close()


def test_a_starting_engine_is_watched_without_sv_at_every_tick(lab_factory) -> None:
    """While the engine starts, the watch runs `sv status` only when runit's supervise/
    changes, or once a second: at every 0.05 s tick, sv and its subshells made each host
    of a wave of restarts run hundreds of programs on the lab's shared CPUs."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    lab.set_engine_start_delay(2.5)
    shim_sv(lab, 'echo "$1" >> /run/sv-calls')
    host = writer(lab, "wrk-1")
    script = SwapScript.of("runit", "rke2-agent", False, [], stop_timeout=15,
                           watch_seconds=30)

    def back(seen: list[Event]) -> bool:
        before = [e.state for e in seen if isinstance(e, Probed) and e.name == "before"]
        return bool(before) and running_new(before[0])(seen)

    arrived = timed_events(host, script, back)
    started = next(t for t, e in arrived if isinstance(e, Started))
    assert arrived[-1][0] - started >= 2  # it did watch a start of over two seconds
    calls = lab.exec("wrk-1", "cat /run/sv-calls").stdout.split()
    # Every 0.05 s for 2.5 s would be 50; changes and once a second are well under 20.
    assert calls.count("status") < 20, calls
    host.close()


def test_the_files_change_under_the_swap_lock(lab_factory) -> None:
    """From before the stop until the start was asked for, the script holds the swap lock
    that a plan's snapshot waits for (planner/facts/lock_holder.py); the engine does not inherit
    it."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    slow_sv = Path(lab.host("wrk-1").dir, "bin", "sv")  # a stop that takes its time
    slow_sv.write_text('#!/bin/sh\n[ "$1" = down ] && sleep 2\nexec /usr/bin/sv "$@"\n')
    slow_sv.chmod(0o755)
    lab.exec("wrk-1", "mkdir -p /run/cargoship")  # as the run's host lock leaves it
    host = writer(lab, "wrk-1")
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(REGISTRIES, b"mirrors: {}\n", mode=0o600, plan_id=PLAN)],
                           stop_timeout=15, watch_seconds=30)
    reader = OutputReader(script.token)
    free: dict[str, bool] = {}

    def lock_free() -> bool:
        # Never creating it: the script makes it, root's alone (0600).
        return lab.exec("wrk-1", "test ! -e /run/cargoship/swap.lock || "
                                 "flock -n -s /run/cargoship/swap.lock true",
                        check=False).returncode == 0

    def held_soon() -> bool:
        # The `before` probe is said just ahead of the swap taking the lock; the stop
        # then takes 2 s under it: the lock must be seen held well within that.
        deadline = time.monotonic() + 1.5
        while lock_free():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def feed(data: bytes) -> bool:
        for event in reader.feed(data):
            if isinstance(event, Probed) and event.name == "before":
                free["stopping"] = not held_soon()
            if isinstance(event, Started):
                free["started"] = lock_free()
                return False
        return True

    host.stream_root(whole(script), feed, 60)
    assert free == {"stopping": False, "started": True}
    assert lab.exec("wrk-1", "stat -c %a /run/cargoship/swap.lock").stdout.strip() == "600"
    pid = engine_pid(lab, "wrk-1")
    held = lab.exec("wrk-1", f"ls -l /proc/{pid}/fd", check=False).stdout
    assert "swap.lock" not in held
    host.close()


def test_the_swap_lock_is_never_taken_through_a_link(lab_factory) -> None:
    """A link planted as the lock file is neither followed nor changed: the lock directory
    is not root's alone then, so the script refuses before the stop (nothing stopped), and
    the file the link names keeps its mode and content."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    lab.exec("wrk-1", "mkdir -p /run/cargoship; printf 'keep\\n' > /root/target; "
                      "chmod 600 /root/target; ln -s /root/target /run/cargoship/swap.lock")
    host = writer(lab, "wrk-1")
    before = engine_pid(lab, "wrk-1")
    script = SwapScript.of("runit", "rke2-agent", False, [], stop_timeout=15, watch_seconds=30)
    result, _ = run_until(host, script, lambda s: False)
    assert result.exit_code == UNSAFE, result
    assert engine_pid(lab, "wrk-1") == before  # never stopped
    assert lab.exec("wrk-1", "stat -c %a /root/target; cat /root/target").stdout == "600\nkeep\n"
    assert lab.exec("wrk-1", "test -L /run/cargoship/swap.lock", check=False).returncode == 0
    host.close()


def _until(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.05)


def _waiting_shells(lab: Lab) -> list[str]:
    return lab.exec("wrk-1", "pgrep -x -f 'sh -s' || true").stdout.split()


def _runner_gone() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("cargoship-swap-")]


def _sent_ahead(lab: Lab, content: bytes) -> tuple[RemoteSwap, Gate, queue.Queue[Message]]:
    host = writer(lab, "wrk-1")
    script = SwapScript.of("runit", "rke2-agent", False,
                           [write_step(REGISTRIES, content, mode=0o600, plan_id=PLAN)],
                           stop_timeout=15, watch_seconds=30)
    messages: queue.Queue[Message] = queue.Queue()
    gate = Gate()
    swap = RemoteSwap(host, script, 60, messages.put, gate)
    swap.start()
    # Preloaded, it stages the file and says so; at its turn it is marked (no marker
    # here), then waits for its GO.
    assert isinstance(messages.get(timeout=30), Staged)
    assert messages.empty()
    gate.begin(script.begin())
    assert isinstance(messages.get(timeout=30), Marked)
    before = messages.get(timeout=30)  # the engine as it is at the host's turn
    assert isinstance(before, Probed) and before.name == "before", before
    assert before.state.state == "running"
    assert _waiting_shells(lab)
    return swap, gate, messages


def _staged(lab: Lab) -> list[str]:
    return lab.exec("wrk-1", f"ls -A {posixpath.dirname(REGISTRIES)}").stdout.split()


def test_a_script_sent_ahead_waits_for_its_go(lab_factory) -> None:
    """Restart.prepare sends the script while the node drains: on the host a shell has it
    and waits, nothing stopped or written; let go, it restarts as ever."""
    lab = lab_factory([HostSpec("wrk-1", "worker", user="alice")])
    first = engine_pid(lab, "wrk-1")
    swap, gate, messages = _sent_ahead(lab, b"ahead: 1\n")
    assert engine_pid(lab, "wrk-1") == first
    assert "ahead: 1" not in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    # The new content is staged beside its target: on disk, with its mode, not in place.
    staged = [name for name in _staged(lab) if name.startswith(".cargoship.")]
    assert len(staged) == 1, staged
    temp = f"{posixpath.dirname(REGISTRIES)}/{staged[0]}"
    assert lab.exec("wrk-1", f"stat -c %a {temp}").stdout.strip() == "600"
    assert lab.exec("wrk-1", f"cat {temp}").stdout == "ahead: 1\n"
    gate.open()
    seen: list[Message] = []
    deadline = time.monotonic() + 30
    while not any(isinstance(m, Started) for m in seen):
        seen.append(messages.get(timeout=max(0.1, deadline - time.monotonic())))
    swap.stop()
    assert [type(m).__name__ for m in seen][:2] == ["Stopped", "StepDone"]
    assert "ahead: 1" in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    assert not [name for name in _staged(lab) if name.startswith(".cargoship.")]
    _until("a new engine", lambda: engine_pid(lab, "wrk-1") != first)


def test_a_script_sent_ahead_and_cancelled_runs_nothing(lab_factory) -> None:
    """A drain that failed cancels the script sent ahead: its shell reaches the end of its
    input, removes the file it staged and leaves; the engine and the files are as they
    were, and the runner ends without a word (nobody is listening)."""
    lab = lab_factory([HostSpec("wrk-1", "worker", user="alice")])
    first = engine_pid(lab, "wrk-1")
    before = lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    _, gate, messages = _sent_ahead(lab, b"never: 1\n")
    assert [name for name in _staged(lab) if name.startswith(".cargoship.")]
    gate.cancel()
    _until("the shell gone", lambda: not _waiting_shells(lab))
    _until("the runner done", _runner_gone)
    assert messages.empty()
    assert engine_pid(lab, "wrk-1") == first
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == before
    assert not [name for name in _staged(lab) if name.startswith(".cargoship.")]
    assert not lab.exec("wrk-1", "ls /run/cargoship/swap.lock 2>/dev/null || true").stdout



def test_a_cancelled_script_has_removed_what_it_staged_when_cancel_returns(
        lab_factory) -> None:
    """The rollout cancels a preloaded or prepared script that will never run (a failed
    drain, a rollout that stopped) and then goes on, the apply's clean-up of a killed
    run's temp files among what comes next: cancel returns once the script has ended on
    the host, its staged file removed, so nothing it staged is taken for a killed run's."""
    lab = lab_factory([HostSpec("wrk-1", "worker", user="alice")])
    first = engine_pid(lab, "wrk-1")
    restart = Restart(writer(lab, "wrk-1"), "runit", "rke2-agent", "wrk-1", False, None,
                      None, 30, lambda what: None)
    steps = [write_step(REGISTRIES, b"never: 1\n", mode=0o600, plan_id=PLAN)]
    restart.preload(steps)
    restart.prepare(steps)  # staged, and at its turn (no marker here)
    assert [name for name in _staged(lab) if name.startswith(".cargoship.")]
    # The script's removal of its temp file takes half a second: an `rm` first in its
    # PATH that waits, then runs the real one.
    rm = Path(lab.host("wrk-1").dir, "bin", "rm")
    rm.write_text('#!/bin/sh\nsleep 0.5\nexec /bin/rm "$@"\n')
    rm.chmod(0o755)
    restart.cancel()
    assert not [name for name in _staged(lab) if name.startswith(".cargoship.")]
    assert not _waiting_shells(lab)
    assert engine_pid(lab, "wrk-1") == first


@pytest.mark.parametrize(("command", "code"), [("touch /run/finished-here", 0),
                                               ("exit 3", 3)])
def test_a_held_script_runs_its_last_command_once_its_host_is_back(lab_factory, command: str,
                                                                   code: int) -> None:
    """After GO the script's input stays open: once the host is back the executor sends it
    one more command (the in-progress marker's removal), which runs on the same
    connection and says how it ended, while the watch goes on until nobody reads it."""
    lab = lab_factory([HostSpec("wrk-1", "worker", user="alice")])
    first = engine_pid(lab, "wrk-1")
    swap, gate, messages = _sent_ahead(lab, b"held: 1\n")
    gate.open()
    seen: list[Message] = []
    deadline = time.monotonic() + 30

    def running_again() -> bool:
        return any(isinstance(m, Probed) and m.name == "state" and m.state.state == "running"
                   and m.state.pid != first for m in seen)

    while not running_again():
        seen.append(messages.get(timeout=max(0.1, deadline - time.monotonic())))
    trips = swap.writer.round_trips
    assert gate.finish(finish(command))
    assert not gate.finish(finish(command))  # one last command, no more
    after: list[Message] = []
    while not any(isinstance(m, Cleared) for m in after):
        after.append(messages.get(timeout=max(0.1, deadline - time.monotonic())))
    assert [m for m in after if isinstance(m, Cleared)] == [Cleared(code)]
    assert swap.writer.round_trips == trips  # on the script's own connection
    if code == 0:
        assert lab.exec("wrk-1", "ls /run/finished-here").stdout.strip() == "/run/finished-here"
    # The watch goes on (an `alive` line every second) until nobody reads it.
    while not any(isinstance(m, Alive) for m in after[after.index(Cleared(code)):]):
        after.append(messages.get(timeout=max(0.1, deadline - time.monotonic())))
    swap.stop()
    _until("the watch gone", lambda: not _waiting_shells(lab))
    _until("the runner done", _runner_gone)
    assert "held: 1" in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
