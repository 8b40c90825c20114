"""Locks no local user can hold or forge (issue 25, point 3), through the `cargoship`
command on lab hosts.

/run/cargoship and /var/lib/cargoship are root's alone (0700, their files 0600): an
unprivileged user on a host can no longer open, so no longer flock, the swap lock that a
restart waits for with the node drained. Either directory owned by anyone else, writable by
anyone else or a link is refused before anything changes. A restart script whose apply was
killed (SIGKILL: its connection closes, its input ends) stops nothing: before its GO, and
after it while it waits for the swap lock.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.host_lock import WAIT_TIMEOUT
from executor.swap_output import OutputReader, Stopped
from executor.swap_script import SwapScript
from executor.swap_steps import write_step
from tests import waiting
from tests.e2e.cli import cargoship
from tests.e2e.test_files import writer
from tests.lab import HostSpec, Lab
from tests.reliability.scenario import (
    DRIFTED,
    REGISTRIES,
    drifted_cluster,
    start_apply,
    wait_for_line,
)
from tests.whole_script import whole

pytestmark = pytest.mark.reliability("trust: locks no local user can hold or forge")

SERVICE = "/etc/service/rke2-agent"


def engine_pid(lab: Lab, host: str) -> str:
    out = lab.exec(host, f"/usr/bin/sv status {SERVICE}").stdout
    found = re.search(r"^run: [^(]*\(pid (\d+)\)", out)
    assert found, out
    return found.group(1)


def staged_temps(lab: Lab, host: str) -> list[str]:
    return [n for n in lab.exec(host, f"ls -A {Path(REGISTRIES).parent}").stdout.split()
            if n.startswith(".cargoship.")]


def scripts_left(lab: Lab, host: str) -> list[str]:
    """Restart scripts (and their subshells) still running on the host."""
    return lab.exec(host, "pgrep -x -f 'sh -s' || true").stdout.split()


def until(what: str, check: Callable[[], bool], timeout: float = 10) -> None:
    waiting.until(check, timeout, what=what)


def hold_steady(lab: Lab, host: str, pid: str, seconds: float) -> None:
    """For `seconds`: the engine runs its same process, on the drifted file, with nothing
    staged beside it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert engine_pid(lab, host) == pid, "the engine was restarted"
        assert lab.exec(host, f"cat {REGISTRIES}").stdout == DRIFTED
        time.sleep(0.2)
    assert staged_temps(lab, host) == []


def listing(lab: Lab, host: str) -> str:
    """Both directories and everything in them, with owners, modes and times."""
    return lab.exec(host, "ls -laR --time-style=full-iso /run/cargoship/ /var/lib/cargoship/ "
                          "2>&1", check=False).stdout


def modes(lab: Lab, host: str, *paths: str) -> list[str]:
    return lab.exec(host, "stat -c '%a %U:%G' " + " ".join(paths)).stdout.splitlines()


def test_a_local_user_can_no_longer_hold_the_locks(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"),
                       HostSpec("wrk-1", "worker", user="alice", sudo=True)])
    config = lab.dir / "cluster.yaml"
    wanted = lab.exec("wrk-1", f"cat {REGISTRIES}").stdout

    def drift_plan_apply(name: str) -> None:
        lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
        made = cargoship("plan", "-c", config, "-out", tmp_path / name)
        assert made.returncode == 0, made.stdout + made.stderr
        applied = cargoship("apply", tmp_path / name, "--confirm", timeout=120)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == wanted

    drift_plan_apply("first.json")  # what the probe found: the files a restart leaves
    # As the lab's non-root user and as nobody, no lock can be taken, not even for a moment.
    for user in ("alice", "nobody"):
        for path in ("/run/cargoship/swap.lock", "/run/cargoship/lock.mutex",
                     "/run/cargoship/lock"):
            held = lab.exec("wrk-1", f"su -s /bin/sh {user} -c 'flock -n {path} true'",
                            check=False)
            assert held.returncode != 0, (user, path, held)
            assert "Permission denied" in held.stderr, (user, path, held)
    assert modes(lab, "wrk-1", "/run/cargoship", "/run/cargoship/swap.lock",
                 "/run/cargoship/lock.mutex", "/var/lib/cargoship") == [
        "700 root:root", "600 root:root", "600 root:root", "700 root:root"]
    # Left trying in the background, as the probe did: it fails at once, and a restart
    # goes through as ever.
    lab.exec("wrk-1", "su -s /bin/sh alice -c 'flock /run/cargoship/swap.lock sleep 300 "
                      "</dev/null >/dev/null 2>/tmp/holder.err &'")
    until("the holder gave up", lambda: "Permission denied" in lab.exec(
        "wrk-1", "cat /tmp/holder.err").stdout)
    # ps exits 1 when it lists nothing: alice's flock (and the su before it) may be gone
    # already, not even a zombie left (seen in CI).
    listed = lab.exec("wrk-1", "ps -u alice -o stat=,comm=", check=False)
    assert listed.returncode in (0, 1), listed
    alive = listed.stdout.splitlines()
    assert not [p for p in alive if p.endswith("flock") and not p.startswith("Z")], alive
    drift_plan_apply("second.json")


def test_a_lock_directory_not_roots_alone_is_refused(lab_factory, tmp_path: Path) -> None:
    s = drifted_cluster(lab_factory, tmp_path, workers=1, drift=("wrk-1",))
    plan = s.plan("clean.json")  # made before the tampering: an apply must still refuse it
    pid = engine_pid(s.lab, "wrk-1")
    address = s.lab.host("wrk-1").address  # a plan names it so before it knows its name
    cases = {
        "/run/cargoship is owned by uid 65534: refusing":
            "mkdir /run/cargoship && chown nobody /run/cargoship && chmod 0755 /run/cargoship",
        "/run/cargoship is mode 0777 (writable by others): refusing":
            "mkdir /run/cargoship && chmod 0777 /run/cargoship",
        "/run/cargoship is a symbolic link: refusing":
            "mkdir -m 0700 /tmp/elsewhere && ln -s /tmp/elsewhere /run/cargoship",
        "/run/cargoship/swap.lock is owned by uid 65534: refusing to use /run/cargoship":
            "mkdir -m 0700 /run/cargoship && install -o nobody -m 0600 /dev/null "
            "/run/cargoship/swap.lock",
        "/var/lib/cargoship is owned by uid 65534: refusing":
            "chown nobody /var/lib/cargoship",
    }
    for said, tamper in cases.items():
        s.lab.exec("wrk-1", "rm -rf /run/cargoship /tmp/elsewhere; mkdir -p /var/lib/cargoship"
                            " && chown root /var/lib/cargoship && " + tamper)
        before = listing(s.lab, "wrk-1")

        planned = cargoship("plan", "-c", s.config)
        assert planned.returncode == 1, planned.stdout + planned.stderr
        problem = [ln for ln in planned.stdout.splitlines() if said in ln]
        assert problem and address in problem[0], (said, planned.stdout)

        refused = s.apply(plan, timeout=120)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        lines = [ln for ln in refused.stderr.splitlines() if said in ln]
        assert len(lines) == 1 and address in lines[0], (said, refused.stderr)
        assert "nothing was changed" in lines[0]
        # Nothing changed: not the tampered directory, the engine, the file or the marker.
        assert listing(s.lab, "wrk-1") == before
        assert engine_pid(s.lab, "wrk-1") == pid
        assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
        assert staged_temps(s.lab, "wrk-1") == []
        assert s.lab.exec("ctl-1", "test -e /run/cargoship/lock", check=False).returncode == 1
    # Put right (a 0755 one, as an earlier cargoship made it, is made root's alone), the
    # same plan applies.
    s.lab.exec("wrk-1", "rm -rf /run/cargoship /tmp/elsewhere && mkdir -m 0755 /run/cargoship"
                        " && chown root /var/lib/cargoship")
    applied = s.apply(plan, timeout=120)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert modes(s.lab, "wrk-1", "/run/cargoship", "/var/lib/cargoship") == [
        "700 root:root", "700 root:root"]


def test_an_apply_killed_before_go_stops_nothing(lab_factory, tmp_path: Path) -> None:
    """Killed at its cordon while its script still probes the engine (a slow `sv status`):
    the script's next line fails to write (SIGPIPE) and its input ends; either way it
    leaves, removing what it staged."""
    s = drifted_cluster(lab_factory, tmp_path, workers=1, drift=("wrk-1",))
    plan = s.plan()
    pid = engine_pid(s.lab, "wrk-1")
    sv = Path(s.lab.host("wrk-1").dir, "bin", "sv")
    sv.write_text('#!/bin/sh\n[ "$1" = status ] && sleep 1\nexec /usr/bin/sv "$@"\n')
    sv.chmod(0o755)
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, "] cordoned", seen)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    until("the orphaned script gone", lambda: not scripts_left(s.lab, "wrk-1"))
    hold_steady(s.lab, "wrk-1", pid, 3)


def test_an_apply_killed_after_go_stops_nothing(lab_factory, tmp_path: Path) -> None:
    """Killed once its script has its GO and waits for the swap lock (here held by a plan's
    snapshot, as it were): the script sees its input end and leaves; the lock let go,
    nothing is stopped, written or started."""
    s = drifted_cluster(lab_factory, tmp_path, workers=1, drift=("wrk-1",))
    plan = s.plan()
    pid = engine_pid(s.lab, "wrk-1")
    s.lab.exec("wrk-1", "mkdir -p -m 0700 /run/cargoship && : >>/run/cargoship/swap.lock && "
                        "touch /tmp/hold && ( flock -s 9; while [ -e /tmp/hold ]; do "
                        "sleep 0.05; done ) 9</run/cargoship/swap.lock >/dev/null 2>&1 &")
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    try:
        wait_for_line(run, "] drained node", seen)
        # GO follows the drain at once; let go, the script's keepalive joins its shell,
        # and then it waits for the lock.
        until("the script let go", lambda: len(scripts_left(s.lab, "wrk-1")) >= 2)
        time.sleep(1)
        assert engine_pid(s.lab, "wrk-1") == pid  # still waiting for the lock
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        time.sleep(0.5)
    finally:
        s.lab.exec("wrk-1", "rm -f /tmp/hold")  # the lock is free from here on
        if run.poll() is None:
            run.kill()
    hold_steady(s.lab, "wrk-1", pid, 3)
    until("the orphaned script gone", lambda: not scripts_left(s.lab, "wrk-1"))


class QuickWait(SwapScript):
    """The restart script with a 2 s wait for the swap lock (stop timeout + 30 s at most
    otherwise: too long for a test)."""

    @property
    def swap_lock_wait(self) -> int:
        return 2


def test_a_swap_lock_held_too_long_is_a_clear_error_and_stops_nothing(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker", user="alice")])
    pid = engine_pid(lab, "wrk-1")
    lab.exec("wrk-1", "mkdir -p -m 0700 /run/cargoship && : >>/run/cargoship/swap.lock && "
                      "touch /tmp/hold && ( flock -x 9; while [ -e /tmp/hold ]; do "
                      "sleep 0.05; done ) 9</run/cargoship/swap.lock >/dev/null 2>&1 &")
    script = QuickWait.of("runit", "rke2-agent", False,
                          [write_step(REGISTRIES, b"mirrors: {}\n", mode=0o600,
                                      plan_id="0" * 32)], stop_timeout=15, watch_seconds=30)
    reader, seen = OutputReader(script.token), []

    def feed(data: bytes) -> bool:
        seen.extend(reader.feed(data))
        return True

    host = writer(lab, "wrk-1")
    try:
        started = time.monotonic()
        result = host.stream_root(whole(script), feed, 60)
        took = time.monotonic() - started
    finally:
        lab.exec("wrk-1", "rm -f /tmp/hold")
        host.close()
    assert result.exit_code == WAIT_TIMEOUT
    assert result.stderr.decode().splitlines() == [
        "timed out after 2 s waiting for /run/cargoship/swap.lock (held by another process); "
        "nothing was stopped"]
    assert 2 <= took < 10
    assert not [e for e in seen if isinstance(e, Stopped)]
    assert engine_pid(lab, "wrk-1") == pid and staged_temps(lab, "wrk-1") == []
