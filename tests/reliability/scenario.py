"""A small cluster for fault tests, its drift, and the files the plan will manage."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.lab import HostSpec, Lab
from tests.reliability.consistency import Managed, managed_files

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DRIFTED = "mirrors: {}\n"


@dataclass
class Scenario:
    lab: Lab
    work: Path
    managed: list[Managed]

    @property
    def config(self) -> Path:
        return self.lab.dir / "cluster.yaml"

    def plan(self, name: str = "plan.json") -> Path:
        path = self.work / name
        result = cargoship("plan", "-c", self.config, "-out", path)
        assert result.returncode == 0, result.stdout + result.stderr
        return path

    def apply(self, plan: Path, *args: str, timeout: float = 240
              ) -> subprocess.CompletedProcess[str]:
        return cargoship("apply", plan, "--confirm", *args, timeout=timeout)

    def plan_id(self, plan: Path) -> str:
        return str(json.loads(plan.read_text())["plan_id"])


def drifted_cluster(lab_factory, tmp_path: Path, *, controllers: int = 1,  # type: ignore[no-untyped-def]
                    workers: int = 2, drift: tuple[str, ...] = ("wrk-1", "wrk-2"),
                    worker_concurrency: int = 1) -> Scenario:
    """Hosts whose registries.yaml drifted on `drift`; short timeouts so faults end fast."""
    specs = [HostSpec(f"ctl-{i}", "controller") for i in range(1, controllers + 1)]
    specs += [HostSpec(f"wrk-{i}", "worker") for i in range(1, workers + 1)]
    lab = lab_factory(specs)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        concurrency={"hosts": 32, "workers": worker_concurrency}, readyTimeoutSeconds=8,
        drain={"timeoutSeconds": 10},
        ssh={"connectTimeoutSeconds": 2, "commandTimeoutSeconds": 5}))
    wanted = lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    for host in drift:
        lab.exec(host, f"printf '{DRIFTED}' > {REGISTRIES}")
    managed = managed_files(lab, [h.name for h in lab.hosts], REGISTRIES, wanted)
    return Scenario(lab, tmp_path, managed)


def start_apply(plan: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*cargoship_argv(), "apply", str(plan), "--confirm", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def wait_for_line(run: subprocess.Popen[str], needle: str, seen: list[str],
                  timeout: float = 60, stderr: bool = False) -> None:
    """Read progress lines (of stdout, or stderr) until one contains `needle` (cargoship
    flushes every line). A command that has not printed it by `timeout`, even one gone
    silent, is killed then, which ends the read, after saying where its threads were."""
    stream = run.stderr if stderr else run.stdout
    assert stream is not None
    stalled: list[str] = []
    watchdog = threading.Timer(timeout, _stop_stalled, args=(run, stalled, not stderr))
    watchdog.daemon = True
    watchdog.start()
    found = False
    try:
        for line in stream:
            seen.append(line)
            if needle in line:
                found = True
                break
    finally:
        watchdog.cancel()
        watchdog.join()
    if found and not stalled:  # (the watchdog may have killed it as the line came)
        return
    ended = f"not within {timeout:g} s (then killed):" if stalled else "output ended before"
    raise AssertionError(f"{ended} {needle!r}; it printed:\n{''.join(seen)}"
                         f"{''.join(stalled)}")


def _stop_stalled(run: subprocess.Popen[str], stalled: list[str], stacks: bool) -> None:
    """Each thread's signal mask and (`stacks`: stderr is nobody else's to read) its stack,
    which cli.py dumps on SIGUSR1; then the kill."""
    stalled.append(_signal_masks(run.pid))
    if stacks and run.stderr is not None:
        try:
            run.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            return
        stalled.append(_read_until_quiet(run.stderr.fileno()))
    run.kill()


def _read_until_quiet(fd: int, quiet: float = 0.5, within: float = 5.0) -> str:
    """What `fd` gives until it has been quiet for `quiet` seconds (or `within` is over)."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], quiet)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _signal_masks(pid: int) -> str:
    lines = []
    for status in sorted(Path(f"/proc/{pid}/task").glob("*/status")):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines()
                          if ":\t" in line)
        except OSError:
            continue
        lines.append(f"thread {status.parent.name}: blocked {fields.get('SigBlk', '?')}, "
                     f"pending {fields.get('SigPnd', '?')}, state {fields.get('State', '?')}")
    return "\n" + "\n".join(lines) + "\n"


def finish(run: subprocess.Popen[str], seen: list[str], timeout: float = 120
           ) -> tuple[int, str, str]:
    try:
        out, err = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # A command that hangs: what it said up to then, where each of its threads is
        # (cli.py dumps them on SIGUSR1) and which signals each blocks find the cause.
        masks = _signal_masks(run.pid)
        run.send_signal(signal.SIGUSR1)
        try:
            out, err = run.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        run.kill()
        out, err = run.communicate()
        err += masks
        raise AssertionError(f"still running after {timeout} s; it printed:\n"
                             f"{''.join(seen)}{out}\nstderr:\n{err}") from None
    out = "".join(seen) + out
    assert "Traceback" not in out + err, out + err
    return run.returncode, out, err
