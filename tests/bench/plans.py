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


_STARTUP = re.compile(r"start-up before the first dial: ([\d.]+) s wall, ([\d.]+) s CPU")


def bench_startup(reps: int = 5) -> Run:
    """What a real plan pays before it dials its first host: a plan of one host that
    refuses at once, its wall and CPU time from process start to the Connect phase's
    first dial, as `plan --stats` reports them (the interpreter's start-up, every import
    and the config's loading). `plan --help` skipped most imports, so it proved nothing."""
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
        runs = []
        for _ in range(reps):
            one = run(argv)
            found = _STARTUP.search(one.stdout)
            if found is None:
                raise RuntimeError(f"no start-up figure in plan --stats: {one.stdout[-500:]}")
            runs.append(dataclasses.replace(one, wall=float(found.group(1)),
                                            cpu=float(found.group(2))))
    return median_run(runs)
