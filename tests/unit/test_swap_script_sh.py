"""The restart script (executor/sh/swap.sh), run for real with sh: exactly the script a
host runs but for its place (a temporary directory) and its timing (ticks of 0.01 s),
with stub `systemctl`, `sv` and `rc-service` first on its PATH. Each stub logs what it was
asked and answers status queries from a list of states the test sets (one a query, the
last one kept); a stop or a start replaces that list as the test says. Every branch of the
stop and of the watch (stop timeout, nudge, crash loop, start timeout) in milliseconds:
the watch ends when the test stops reading, as it does when the executor stops, or at a
deadline of 0 s. tests/e2e/test_service.py stays the proof under a real supervisor."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from executor.swap_output import (
    Deadline,
    Event,
    OutputReader,
    Probed,
    Staged,
    Started,
    StepDone,
    Stopped,
)
from executor.swap_script import (
    GO,
    GONE,
    NOT_HELD,
    STOP_FAILED,
    ServiceError,
    SwapScript,
    Timing,
    Where,
    go_line,
)
from executor.swap_steps import write_step
from planner.facts.lock_holder import Place

PLAN = "c" * 32
SERVICE = "rke2-server"
QUICK = Timing(stop_tick=0.01, stop_fast_for=0.03, stop_slow_tick=0.01, start_tick=0.01,
               run_tick=0.01, alive_every=0.05, nudge_after=0.05, clock_every=0.01,
               look_every=0.01, min_watch=0)

# One stub for the three init systems, named by what it is run as. A start runs in the
# background (no-block, detached) while the script's probes run the stub too, so every
# file a probe reads is replaced whole (written aside, then renamed), never seen half
# written: a probe that read an empty `now` saw the service in no state at all.
STUB = r"""#!/bin/sh
d=@DIR@
name=${0##*/}
echo "$name $*" >> "$d/calls"
put() { cat > "$1.$$" && mv "$1.$$" "$1"; }  # `put FILE < content`: replaced whole
pop() {  # the first state answers; the next query gets the next one (the last stays)
  take
  if [ "$(wc -l < "$d/states")" -gt 1 ]; then
    tail -n +2 "$d/states" | put "$d/states"
  fi
}
take() {
  head -n 1 "$d/states" | put "$d/now"
  # runsv's own files, as the script's quick looks read them
  read -r w rest < "$d/now" || true
  # `stat=WORD TEXT`: runsv has renamed supervise/stat (WORD) but not yet the status file
  # sv reads (TEXT): runit's src/runsv.c update_status renames stat.new, then status.new.
  case "$w" in stat=*) echo "$rest" | put "$d/now"; read -r _ rest < "$d/now" || true
                       rest=; w=${w#stat=};; esac
  if [ -d "@SERVICES@/@SVC@/supervise" ]; then
    echo "${w%:}" | put "@SERVICES@/@SVC@/supervise/stat"
    case "$rest" in *"(pid "*) p=${rest#*(pid }; echo "${p%%)*}";; *) echo;; esac \
      | put "@SERVICES@/@SVC@/supervise/pid"
  fi
}
on() {  # a stop or a start: the states from here on, as the test set them
  if [ "$1" = start ]; then
    c=$(( $(cat "$d/starts" 2>/dev/null || echo 0) + 1 )); echo "$c" > "$d/starts"
    if [ -f "$d/on-start-$c" ]; then put "$d/states" < "$d/on-start-$c"; take; return; fi
  fi
  if [ -f "$d/on-$1" ]; then put "$d/states" < "$d/on-$1"; take; fi
}
case "$name ${1-}" in
  "systemctl cat") exit 0;;
  "systemctl is-active") pop; read -r w rest < "$d/now"; echo "$w";;
  "systemctl show") read -r w rest < "$d/now"; for f in $rest; do echo "$f"; done;;
  "systemctl stop") on stop;;
  "systemctl start") on start;;
  "sv status") pop; cat "$d/now";;
  "sv down") on stop;;
  # sv sends nothing when runsv's status already wants what is asked (runit's sv.c,
  # control()): during runsv's pause after a crash that is still `want up`.
  "sv up") case "$(cat "$d/now")" in
             *"want up"*) echo "sv up dropped" >> "$d/calls";;
             *) on start;;
           esac;;
  "rc-service $SVC")
    case $2 in status) pop; cat "$d/now";; stop) on stop;; start) on start;; esac;;
esac
exit 0
"""

RUNNING = {"systemd": "active MainPID={pid} NRestarts=0 SubState=running",
           "runit": "run: /s/" + SERVICE + ": (pid {pid}) 1s",
           "openrc": " * status: started"}
STOPPED = {"systemd": "inactive MainPID=0 NRestarts=0 SubState=dead",
           "runit": "down: /s/" + SERVICE + ": 0s, normally up",
           "openrc": " * status: stopped"}
STARTING = {"systemd": "activating MainPID={pid} NRestarts=0 SubState=start",
            "runit": "run: /s/" + SERVICE + ": (pid {pid}) 0s",
            "openrc": " * status: starting"}


@dataclass
class Host:
    """A temporary directory standing in for a host: its init system's stub, its
    services, its lock and state directories and a file the restart changes."""

    root: Path
    init: str

    @property
    def place(self) -> Place:
        return Place(str(self.root / "run"), str(self.root / "state"), os.geteuid(),
                     os.getegid())

    @property
    def where(self) -> Where:
        return Where(path=f"{self.root / 'bin'}:{os.environ['PATH']}",
                     runit_dirs=(str(self.root / "service"),),
                     initd=str(self.root / "initd"),
                     apiserver_logs=str(self.root / "pods" / "kube-apiserver-*"))

    @property
    def target(self) -> Path:
        return self.root / "etc" / "registries.yaml"

    def states(self, *lines: str, when: str = "states") -> None:
        """The answers to status queries, one each, the last one kept: now, or from the
        stop (`on-stop`), from every start (`on-start`), from start N (`on-start-N`)."""
        (self.root / "stub" / when).write_text("".join(f"{line}\n" for line in lines))

    def calls(self) -> list[str]:
        log = self.root / "stub" / "calls"
        return log.read_text().splitlines() if log.exists() else []

    def asked(self, verb: str) -> int:
        """How many times the init system was asked to `verb` (stop, start)."""
        words = {"systemd": f"systemctl {verb}",
                 "runit": {"stop": "sv down", "start": "sv up"}[verb],
                 "openrc": f"rc-service {SERVICE} {verb}"}[self.init]
        return sum(call.startswith(words) for call in self.calls())


@pytest.fixture(params=["systemd", "runit", "openrc"])
def host(request: pytest.FixtureRequest, tmp_path: Path) -> Host:
    return make_host(tmp_path, request.param)


def make_host(root: Path, init: str) -> Host:
    stub, bin_dir = root / "stub", root / "bin"
    stub.mkdir()
    bin_dir.mkdir()
    text = STUB.replace("@DIR@", str(stub)).replace("@SVC@", SERVICE)
    text = text.replace("$SVC", SERVICE).replace("@SERVICES@", str(root / "service"))
    for name in ("systemctl", "sv", "rc-service"):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    service = root / "service" / SERVICE
    (service / "supervise").mkdir(parents=True)
    (root / "initd").mkdir()
    (root / "initd" / SERVICE).write_text("")
    (root / "etc").mkdir()
    made = Host(root, init)
    made.target.write_text("old: 1\n")
    made.states(RUNNING[init].format(pid=11))
    return made


@dataclass
class Run:
    code: int
    events: list[Event]
    stderr: str
    seconds: float


def run(host: Host, *, stop_timeout: float = 0.05, watch_seconds: float = 0,
        controller: bool = False, swap: bool = True, go: str = GO,
        until: Callable[[list[Event]], bool] | None = None, lock: str | None = None,
        hold_input: bool = False, timing: Timing = QUICK,
        edit: Callable[[str], str] = lambda text: text, limit: float = 60) -> Run:
    """The script with one write, as a host gets it (`sh -s`, its input ending after GO),
    read as the executor reads it; with `until`, the reading stops once it holds, as the
    executor's does once the host is back. `hold_input`: the input stays open (the apply
    is alive) until the script ends. `edit` changes the script's text first; after
    `limit` seconds the script and everything it started are killed (a script that
    stalls fails its test rather than hanging it)."""
    script = SwapScript.of(host.init, SERVICE, controller,
                           [write_step(str(host.target), b"new: 2\n", mode=0o640,
                                       plan_id=PLAN, place=host.place)],
                           stop_timeout=stop_timeout, watch_seconds=watch_seconds,
                           place=host.place, timing=timing, where=host.where)
    text = edit(script.head(swap=swap) + (script.begin() if swap else "") + go)
    if lock is not None:
        Path(host.place.lock_dir).mkdir(mode=0o700, exist_ok=True)
        Path(host.place.lock_path).write_text(lock)
    err = host.root / "stderr"
    started = time.monotonic()
    with err.open("w") as stderr:
        proc = subprocess.Popen(["sh", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None
        watchdog = threading.Timer(limit, os.killpg, args=(proc.pid, signal.SIGKILL))
        watchdog.start()
        proc.stdin.write(text.encode())
        proc.stdin.flush()
        if not hold_input:
            proc.stdin.close()
        reader, events = OutputReader(script.token), list[Event]()
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            events += reader.feed(line)
            if until is not None and until(events):
                break
        proc.stdout.close()  # the executor stops reading: the next line fails to write
        proc.stdin.close()  # ... and ends the input it held
        code = proc.wait(10)
        watchdog.cancel()
    return Run(code, events, err.read_text(), time.monotonic() - started)


def states(events: list[Event]) -> list[str]:
    return [e.state.state for e in events if isinstance(e, Probed) and e.name == "state"]


def test_a_restart_stops_commits_starts_and_watches_until_its_deadline(host: Host) -> None:
    host.states(STOPPED[host.init], when="on-stop")
    host.states(RUNNING[host.init].format(pid=12), when="on-start")
    # The start is asked without waiting for it (a start can block forever), so the watch's
    # first look may come before the init system has acted on it: `stopped` until then.
    # Read until the service is seen running, as the executor does.
    # No nudge meanwhile (a late start is the nudge test's): one start, however slow.
    done = run(host, watch_seconds=60, until=lambda ev: "running" in states(ev),
               timing=replace(QUICK, nudge_after=60))
    kinds = [type(e).__name__ for e in done.events]
    assert kinds[:6] == ["Staged", "Marked", "Probed", "Stopped", "StepDone", "Started"], \
        done.stderr
    assert done.events[4] == StepDone(0, "backup")
    seen = states(done.events)
    assert seen[-1] == "running" and set(seen[:-1]) <= {"stopped"}, seen
    assert host.target.read_text() == "new: 2\n" and host.target.stat().st_mode & 0o777 == 0o640
    backup = Path(host.place.state_dir) / "backups" / PLAN / str(host.target).lstrip("/")
    assert backup.read_text() == "old: 1\n"
    assert (host.asked("stop"), host.asked("start")) == (1, 1)
    assert not list(host.target.parent.glob(".cargoship.*"))  # nothing staged left over
    assert done.seconds < 20  # not the 60 s watch sat out (a loaded machine takes its time)


def test_a_stop_that_never_finishes_fails_and_changes_nothing(host: Host) -> None:
    # No on-stop: the service runs on whatever the stop was asked.
    done = run(host, stop_timeout=0.05)
    assert done.code == STOP_FAILED
    assert done.stderr.startswith(f"{SERVICE} did not stop within 0.05 s: state {host.init} ")
    assert not any(isinstance(e, Stopped) for e in done.events)
    assert (host.asked("stop"), host.asked("start")) == (1, 0)
    assert host.target.read_text() == "old: 1\n"
    assert not list(host.target.parent.glob(".cargoship.*"))  # the staged file removed
    assert done.seconds < 20  # not the 60 s watch sat out (a loaded machine takes its time)


def test_a_service_still_down_after_its_start_is_nudged(host: Host) -> None:
    host.states(STOPPED[host.init], when="on-stop")
    host.states(STOPPED[host.init], when="on-start-1")  # the first start is dropped
    host.states(RUNNING[host.init].format(pid=13), when="on-start-2")
    done = run(host, watch_seconds=60, until=lambda ev: "running" in states(ev))
    assert host.asked("start") == 2  # the nudge, once it stayed plainly down
    assert states(done.events) == ["stopped", "running"]
    assert done.seconds < 20  # not the 60 s watch sat out (a loaded machine takes its time)


def test_a_crash_loop_is_reported_as_it_goes_and_never_nudged(tmp_path: Path) -> None:
    """runit between two attempts says `want up`: it restarts the service itself, so the
    script must not ask again; each attempt shows as a new process."""
    host = make_host(tmp_path, "runit")
    host.states(STOPPED["runit"], when="on-stop")
    want_up = f"down: /s/{SERVICE}: 0s, normally up, want up"
    loop = [RUNNING["runit"].format(pid=20), want_up, want_up, want_up, want_up, want_up,
            want_up, RUNNING["runit"].format(pid=21), want_up, want_up, want_up, want_up,
            want_up, want_up, RUNNING["runit"].format(pid=22)]
    host.states(*loop, when="on-start")
    done = run(host, watch_seconds=60,
               until=lambda ev: any(isinstance(e, Probed) and e.state.pid == 22 for e in ev))
    pids = [e.state.pid for e in done.events if isinstance(e, Probed) and e.name == "state"]
    assert [pid for pid in pids if pid] == [20, 21, 22]
    assert any(e.state.auto_restart for e in done.events if isinstance(e, Probed))
    assert host.asked("start") == 1  # the loop's own restarts, never a nudge
    assert done.seconds < 20  # not the 60 s watch sat out (a loaded machine takes its time)


def test_a_start_that_never_becomes_active_is_watched_until_the_deadline(host: Host) -> None:
    host.states(STOPPED[host.init], when="on-stop")
    host.states(STARTING[host.init].format(pid=14), when="on-start")
    # runit's `check` is its readiness: running, not passing it, is starting.
    check = host.root / "service" / SERVICE / "check"
    check.write_text("#!/bin/sh\nexit 1\n")
    check.chmod(0o755)
    done = run(host, watch_seconds=0)
    assert isinstance(done.events[-1], Deadline) and done.code == 0
    assert "running" not in states(done.events)
    assert host.asked("start") == 1  # starting is not down: no nudge
    assert done.seconds < 20  # not the 60 s watch sat out (a loaded machine takes its time)


def test_a_slow_start_is_looked_at_less_often_the_longer_it_takes(tmp_path: Path) -> None:
    """Until the engine runs, each look comes a twentieth of the time waited so far after
    the last one, between the start tick and the run tick: a real start (30-120 s) costs
    a few hundred looks, not thousands. `sleep` is a stub that notes its argument."""
    host = make_host(tmp_path, "systemd")
    real_sleep = shutil.which("sleep")
    assert real_sleep is not None
    sleep = host.root / "bin" / "sleep"
    sleep.write_text(f"#!/bin/sh\necho \"sleep $*\" >> {host.root / 'stub' / 'calls'}\n"
                     f"exec {real_sleep} \"$@\"\n")
    sleep.chmod(0o755)
    host.states(STOPPED["systemd"], when="on-stop")
    starting = 70  # looks: each `systemctl is-active` answers the next state
    host.states(*[STARTING["systemd"].format(pid=15)] * starting,
                RUNNING["systemd"].format(pid=15), when="on-start")
    timing = replace(QUICK, start_tick=0.01, run_tick=0.05, nudge_after=60)
    done = run(host, watch_seconds=60, until=lambda ev: "running" in states(ev),
               timing=timing)
    assert states(done.events)[-1] == "running", done.stderr
    calls = host.calls()
    after_start = calls[calls.index(f"systemctl start --no-block {SERVICE}") + 1:]
    # In hundredths, as the script counts; `sleep 1` is the keepalive's, ended at the start.
    ticks = [round(float(c.split()[1]) * 100) for c in after_start
             if c.startswith("sleep ") and c != "sleep 1"][:starting]
    expected, waited = [], 0
    for _ in range(starting):
        expected.append(max(1, min(5, waited // 20)))
        waited += expected[-1]
    assert ticks == expected
    assert expected[0] == 1 and expected[-1] == 5  # from the start tick up to the run tick


def test_only_a_controller_is_probed_right_before_its_start(host: Host) -> None:
    host.states(STOPPED[host.init], when="on-stop")
    host.states(RUNNING[host.init].format(pid=12), when="on-start")
    for controller in (True, False):
        done = run(host, controller=controller)
        names = [e.name for e in done.events if isinstance(e, Probed)]
        assert names.count("before") == 1 and ("starting" in names) == controller


def test_a_runit_stop_is_seen_in_supervise_without_asking_sv(tmp_path: Path) -> None:
    host = make_host(tmp_path, "runit")
    host.states(STOPPED["runit"], when="on-stop")
    host.states(RUNNING["runit"].format(pid=12), when="on-start")
    run(host)
    calls = host.calls()
    between = calls[calls.index(f"sv down {host.root}/service/{SERVICE}") + 1:
                     calls.index(f"sv up {host.root}/service/{SERVICE}")]
    # supervise/stat said `down`: one `sv status`, that runsv took the stop, no polling.
    assert between == [f"sv status {host.root}/service/{SERVICE}"]


def test_a_runit_stop_during_runsvs_pause_after_a_crash_waits_until_runsv_takes_it(
        tmp_path: Path) -> None:
    """A crash-looping engine reads `down` while runsv sleeps its second before the next
    attempt, our `sv down` unread: the stop waits until the status no longer wants up, so
    the start's `sv up` is not skipped (then only the nudge, seconds later, would start
    the engine: the rollback of a crash-looping config came back 3 s late)."""
    host = make_host(tmp_path, "runit")
    want_up = f"down: /s/{SERVICE}: 0s, normally up, want up"
    host.states(want_up, want_up, STOPPED["runit"], when="on-stop")
    host.states(RUNNING["runit"].format(pid=12), when="on-start")
    done = run(host, watch_seconds=60, until=lambda ev: "running" in states(ev))
    assert "sv up dropped" not in host.calls()
    assert host.asked("start") == 1  # no nudge: the one start was taken
    assert states(done.events) == ["running"]


def test_a_runit_stop_read_in_stat_before_sv_status_has_it_is_looked_at_again(
        tmp_path: Path) -> None:
    """runsv renames supervise/stat before the status file `sv status` reads (runit's
    src/runsv.c, update_status): in between, stat says `down` while sv still says `run:
    ..., want down`. That look is not the stop: the script looks again, then goes on."""
    host = make_host(tmp_path, "runit")
    stale = f"stat=down run: /s/{SERVICE}: (pid 11) 3s, want down, got TERM"
    host.states(stale, STOPPED["runit"], when="on-stop")
    host.states(RUNNING["runit"].format(pid=12), when="on-start")
    done = run(host, watch_seconds=60, until=lambda ev: "running" in states(ev))
    calls = host.calls()
    between = calls[calls.index(f"sv down {host.root}/service/{SERVICE}") + 1:
                     calls.index(f"sv up {host.root}/service/{SERVICE}")]
    assert between == [f"sv status {host.root}/service/{SERVICE}"] * 2
    assert host.asked("start") == 1 and states(done.events) == ["running"]
    assert host.target.read_text() == "new: 2\n"


def test_the_watch_alone_never_stops_or_changes_anything(host: Host) -> None:
    done = run(host, swap=False)
    assert [type(e).__name__ for e in done.events] == ["Probed", "Deadline"]
    assert host.calls().count("sv down") == 0 and host.asked("stop") == 0
    assert host.asked("start") == 0 and host.target.read_text() == "old: 1\n"


def test_a_lock_that_is_not_the_applys_stops_nothing(tmp_path: Path) -> None:
    host = make_host(tmp_path, "systemd")
    done = run(host, go=go_line("00ab12"), lock='{"id": "ffff", "holder": "x"}\n',
               hold_input=True)
    assert done.code == NOT_HELD and host.asked("stop") == 0
    assert done.stderr == (f"{host.place.lock_path} no longer holds lock 00ab12 (taken over "
                           "or removed); nothing was stopped\n")
    assert host.target.read_text() == "old: 1\n"
    assert not list(host.target.parent.glob(".cargoship.*"))
    assert isinstance(done.events[0], Staged)


def test_an_input_that_ends_after_go_stops_nothing(tmp_path: Path) -> None:
    """GO with a lock id and nothing after it: the watcher sees the input end (the apply
    is gone) and the swap gives up before the stop."""
    host = make_host(tmp_path, "systemd")
    lock = '{"id": "00ab12", "holder": "x"}\n'
    done = run(host, go=go_line("00ab12"), lock=lock)
    assert done.code == GONE and host.asked("stop") == 0
    assert host.target.read_text() == "old: 1\n"
    # Nothing of the script's outlives it: its keepalive, started as the watcher's USR1
    # came, had lost its TERM and held the output open for 150 s (one run in five).
    assert done.seconds < 20


# A subshell forked this way never takes a TERM: what dash does with one that arrives
# before the subshell has reset the traps it inherited (it is noted, then dropped), which
# a loaded host makes likely for a subshell killed a few milliseconds after its fork.
DEAF = "( trap '' TERM; "


def test_the_input_watcher_is_ended_at_go_even_when_a_term_would_not_reach_it(
        tmp_path: Path) -> None:
    """The watcher of the input (go) is forked right before `swap`, which kills it at the
    point of no return. Its TERM lost, it read on, and `swap` waited for it until the
    input ended: the restart stalled at its GO while the keepalive talked (CI, 174-330 s).
    KILL cannot be lost."""
    host = make_host(tmp_path, "systemd")
    host.states(RUNNING["systemd"].format(pid=10))
    host.states(STOPPED["systemd"], when="on-stop")
    host.states(RUNNING["systemd"].format(pid=11), when="on-start")
    watcher = "( exec 0<&8 8<&- 9<&-;"
    done = run(host, go=go_line("00ab12"), lock='{"id": "00ab12", "holder": "x"}\n',
               hold_input=True, until=lambda events: any(isinstance(e, Started)
                                                         for e in events),
               edit=lambda text: text.replace(watcher, DEAF + watcher[2:], 1), limit=30)
    assert text_has(watcher)
    assert any(isinstance(e, Started) for e in done.events), (done.events, done.stderr)
    assert host.asked("stop") == 1 and host.target.read_text() == "new: 2\n"
    assert done.seconds < 20


def test_the_keepalive_is_gone_at_the_start_even_when_a_term_would_not_reach_it(
        tmp_path: Path) -> None:
    """The keepalive says `alive` until the start; left running, it held the channel open
    and talked for ALIVE_FOR (minutes) after the script was done."""
    host = make_host(tmp_path, "systemd")
    host.states(RUNNING["systemd"].format(pid=10))
    host.states(STOPPED["systemd"], when="on-stop")
    host.states(RUNNING["systemd"].format(pid=11), when="on-start")
    keepalive = "( i=0; while"
    done = run(host, edit=lambda text: text.replace(keepalive, DEAF + keepalive[2:], 1),
               limit=30)
    assert text_has(keepalive)
    assert done.code == 0 and any(isinstance(e, Started) for e in done.events), done.stderr
    assert done.seconds < 20  # its output ended with the script, not 150 s later


def text_has(fragment: str) -> bool:
    """Whether the shipped script still holds `fragment` (the tests above edit it)."""
    return fragment in SwapScript.of("systemd", SERVICE, False, [], stop_timeout=1,
                                     watch_seconds=1).head()


def test_an_init_system_the_script_does_not_know_is_refused_before_anything_runs() -> None:
    with pytest.raises(ServiceError, match="cannot restart rke2-server: unsupported init "
                                           "system 'upstart'"):
        SwapScript.of("upstart", "rke2-server", True, [], stop_timeout=1, watch_seconds=1)
