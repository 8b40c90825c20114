"""`cargoship plan --stats` on the fleet: wall, CPU and peak RSS of the whole command, and
the round trips per host per phase that the host layer counted; interleaved with the
baseline client (baseline.py) on the same hosts and proxy, run for run."""

from __future__ import annotations

import re
import sys
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


def bench_startup(reps: int = 5) -> Run:
    """`cargoship plan --help`: the interpreter and every module `plan` imports, no work."""
    return median_run([run([*cargoship(), "plan", "--help"]) for _ in range(reps)])
