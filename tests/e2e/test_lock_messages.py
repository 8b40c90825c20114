"""Locks speak (through the command, on lab hosts): a waiting apply names the holder, since
when, and counts down without -v; a plan warns once per lock, not once per host; the
force-unlock hint is a command that works as printed, and it asks before removing."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import subprocess
from pathlib import Path

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.lab import HostSpec, Lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
HOSTS = ("ctl-1", "wrk-1", "wrk-2")


def hold_lock(lab: Lab, lock_id: str) -> None:
    holder = {"id": lock_id, "holder": "bob@ci-runner", "pid": 7, "plan_id": "p-1",
              "since": "2026-12-01T09:30:00+00:00"}
    for host in HOSTS:
        lab.exec(host, f"mkdir -p /run/cargoship && echo '{json.dumps(holder)}' > "
                       "/run/cargoship/lock")


def run_answering(command: list[str], answer: str) -> tuple[int, str]:
    """Run a command with a terminal as stdin (as a person would), typing `answer`."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(command, stdin=slave, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        os.write(master, answer.encode())
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(master)
        os.close(slave)
    assert "Traceback" not in out, out
    return proc.returncode, out


def test_locks_speak(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    config = edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=20, drain={"timeoutSeconds": 10}))
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", config, "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr

    hold_lock(lab, "b0b0b0b0")
    # One warning for the one lock that holds three hosts, naming them all.
    planned = cargoship("plan", "-c", config)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.count("is held by another run") == 1, planned.stdout
    assert "held by another run on 3 hosts (" in planned.stdout
    assert f"cargoship force-unlock -c {config} b0b0b0b0" in planned.stdout

    # A waiting apply, without -v: holder, since when, and seconds left going down.
    waited = cargoship("apply", plan_file, "--confirm", "--lock-timeout", "4")
    assert waited.returncode == 1
    waits = re.findall(r"waiting for the lock of \S+: held by bob@ci-runner \(lock b0b0b0b0, "
                       r"plan p-1\) since 2026-12-01T09:30:00\+00:00; (\d+)s left",
                       waited.stderr)
    assert len(waits) >= 2 and int(waits[0]) > int(waits[-1]), waited.stderr
    assert "DEBUG" not in waited.stderr
    hint = re.search(r"if it crashed: (cargoship force-unlock .*)$", waited.stderr, re.M)
    assert hint, waited.stderr
    assert hint.group(1) == f"cargoship force-unlock -c {plan_file} b0b0b0b0"

    # The hint works as printed; it asks first, and only 'yes' removes.
    argv = [*cargoship_argv(), *shlex.split(hint.group(1))[1:]]
    code, out = run_answering(argv, "no\n")
    assert code == 1 and "Lock b0b0b0b0 on 3 host(s)" in out and "bob@ci-runner" in out
    assert "nothing was removed" in out
    assert lab.exec("wrk-1", "test -e /run/cargoship/lock", check=False).returncode == 0
    code, out = run_answering(argv, "yes\n")
    assert code == 0 and "Removed lock b0b0b0b0 from 3 host(s)" in out, out
    for host in HOSTS:
        assert lab.exec(host, "test -e /run/cargoship/lock", check=False).returncode == 1

    # The plan's hint (naming cluster.yaml) works too, with --confirm and no terminal.
    hold_lock(lab, "b0b0b0b1")
    removed = cargoship("force-unlock", "-c", config, "b0b0b0b1", "--confirm")
    assert removed.returncode == 0 and "from 3 host(s)" in removed.stdout, removed.stderr
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
