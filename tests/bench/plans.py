"""`cargoship plan --stats` on the fleet: wall, CPU and peak RSS of the whole command, and
the round trips per host per phase that the host layer counted."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

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
    runs, host_cpu = [], {}
    for _ in range(reps):
        before = hosts_cpu(sshd)
        one = run([*cargoship(), "--no-color", "plan", "-c", str(config), "--stats"])
        time.sleep(0.2)  # sshd reaps the sessions' processes
        runs.append(one)
        host_cpu[id(one)] = hosts_cpu(sshd) - before
    chosen = median_run(runs)
    worst, per_phase = parse_stats(chosen.stdout)
    return PlanResult(size, delay_ms, chosen, spread(runs), worst, per_phase,
                      host_cpu[id(chosen)])
