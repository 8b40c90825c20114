"""`cargoship plan --stats` on the fleet: wall, CPU and peak RSS of the whole command, and
the round trips per host per phase that the host layer counted; interleaved with the
baseline client (baseline.py) on the same hosts and proxy, run for run."""

from __future__ import annotations

import dataclasses
import re
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.e2e.cli import cargoship_argv

from .fleet import Fleet, hosts_cpu, sshd_pids
from .measure import Run, median_run, run, spread


def cargoship() -> list[str]:
    return cargoship_argv()  # the command exactly as the tests run it


@dataclass(frozen=True)
class PlanResult:
    size: int
    delay_ms: float
    run: Run
    spread: str
    max_round_trips: int
    per_phase: dict[str, int]  # phase title -> max round trips of one host
    hosts_cpu: float  # CPU the lab hosts' sshd spent on the chosen run (same machine)
    baseline: Run  # the minimal client's median run on the same hosts, interleaved

    @property
    def ok(self) -> bool:
        return self.run.code == 0


_ROW = re.compile(r"^\s+(\d+) (.{46}) +(\d+) +(\d+) +(\d+) +[\d.]+$")


def parse_stats(stdout: str) -> tuple[int, dict[str, int]]:
    per_phase: dict[str, int] = {}
    worst = -1
    for line in stdout.splitlines():
        m = _ROW.match(line)
        if m:
            per_phase[m.group(2).strip()] = int(m.group(4))
        m2 = re.search(r"max round trips per host per phase: (\d+)", line)
        if m2:
            worst = int(m2.group(1))
    return worst, per_phase


def bench_plan(fleet: Fleet, size: int, delay_ms: float, reps: int) -> PlanResult:
    config = fleet.cluster_yaml(size, delay_ms)
    run([*cargoship(), "plan", "-c", str(config)])  # warm the page cache and the proxy
    sshd = sshd_pids(fleet.lab)
    runs, host_cpu, baselines = [], {}, []
    for _ in range(reps):
        before = hosts_cpu(sshd)
        one = run([*cargoship(), "--no-color", "plan", "-c", str(config), "--stats"])
        time.sleep(0.2)  # sshd reaps the sessions' processes
        runs.append(one)
        host_cpu[id(one)] = hosts_cpu(sshd) - before
        # Right after, on the same hosts and proxy: machine load hits both alike.
        baselines.append(run([sys.executable, "-m", "tests.bench.baseline", str(config)]))
        time.sleep(0.2)
    chosen = median_run(runs)
    worst, per_phase = parse_stats(chosen.stdout)
    return PlanResult(size, delay_ms, chosen, spread(runs), worst, per_phase,
                      host_cpu[id(chosen)], median_run(baselines))


_FIRST_DIAL = re.compile(r"start-up before the first dial: ([\d.]+) s wall, ([\d.]+) s CPU")
_LOADED = re.compile(r"start-up to the phases loaded: ([\d.]+) s wall, ([\d.]+) s CPU")


@dataclass(frozen=True)
class StartupResult:
    """A plan's start-up, as `plan --stats` reports it, from process start: to the phases
    loaded (every import, those made while the handshakes run included: the issue's
    "start-up (imports)"), and to the first dial (the imports before it only)."""
    loaded: Run
    first_dial: Run


def bench_startup(reps: int = 5) -> StartupResult:
    """What a real plan pays before it works on its hosts: a plan of one host that
    refuses at once, its wall and CPU time from process start to the phases loaded and to
    the Connect phase's first dial, as `plan --stats` reports them (the interpreter's
    start-up, every import and the config's loading). `plan --help` skipped most imports,
    so it proved nothing. The run with the median wall to the phases loaded gives both."""
    with tempfile.TemporaryDirectory() as work, socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refused at once
        config = Path(work) / "cluster.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "cargoship/v1", "kind": "Cluster", "metadata": {"name": "startup"},
            "spec": {"engine": {"distro": "rke2", "version": "v1.30.4+rke2r1"},
                     "hosts": [{"role": "controller", "ssh": {
                         "address": "127.0.0.1", "port": closed.getsockname()[1],
                         "user": "root", "knownHosts": str(Path(work) / "known_hosts")}}]}}))
        argv = [*cargoship(), "--no-color", "plan", "-c", str(config), "--stats"]
        run(argv)  # once first: the page cache, and byte code where it may be written
        runs: list[tuple[Run, Run]] = []
        for _ in range(reps):
            one = run(argv)
            loaded, dialled = _LOADED.search(one.stdout), _FIRST_DIAL.search(one.stdout)
            if loaded is None or dialled is None:
                raise RuntimeError(f"no start-up figures in plan --stats: {one.stdout[-500:]}")
            runs.append((dataclasses.replace(one, wall=float(loaded.group(1)),
                                             cpu=float(loaded.group(2))),
                         dataclasses.replace(one, wall=float(dialled.group(1)),
                                             cpu=float(dialled.group(2)))))
    chosen = median_run([loaded for loaded, _ in runs])
    return StartupResult(chosen, next(d for loaded, d in runs if loaded is chosen))
