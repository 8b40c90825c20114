"""Run a command and measure it: wall time, CPU time (user + system, the command and every
process it waited for) and peak RSS (the largest of those processes), from wait4()."""

from __future__ import annotations

import compileall
import os
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    code: int
    wall: float
    cpu: float
    rss_mib: float
    stdout: str
    stderr: str


def run(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 900) -> Run:
    out_path = Path(f"/tmp/bench-run-{os.getpid()}.out")
    err_path = out_path.with_suffix(".err")
    with open(out_path, "w+b") as out, open(err_path, "w+b") as err:
        started = time.monotonic()
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, cwd=cwd)
        deadline = started + timeout
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                time.sleep(0.002)
        except BaseException:
            proc.kill()  # interrupted: the command goes too
            proc.wait()
            raise
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    return Run(tuple(argv), proc.returncode, wall, usage.ru_utime + usage.ru_stime,
               usage.ru_maxrss / 1024, stdout, stderr)


def median_run(runs: Sequence[Run]) -> Run:
    """The run with the median wall time (so its CPU and RSS belong to the same run)."""
    ordered = sorted(runs, key=lambda r: r.wall)
    return ordered[(len(ordered) - 1) // 2]


def spread(runs: Sequence[Run]) -> str:
    walls = [r.wall for r in runs]
    if len(walls) < 2:
        return ""
    return f"{min(walls):.2f}-{max(walls):.2f}"


def busy_cores(window: float) -> float:
    """How many CPUs' worth of time the whole machine spent busy over `window` seconds."""
    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait
    total, idle = sample()
    time.sleep(window)
    total2, idle2 = sample()
    return (os.cpu_count() or 1) * (1 - (idle2 - idle) / max(1, total2 - total))


def settle(busy: float = 0.3, window: float = 3.0, limit: float = 300.0) -> float:
    """Wait (at most `limit` s) until the machine is nearly idle over `window` s. A lab of
    500 hosts keeps the machine busy after it is up (its engines starting) and after it is
    torn down (the kernel's namespace clean-up, for minutes): neither is the figure being
    measured. Returns the seconds waited."""
    started = time.monotonic()
    while busy_cores(window) > busy and time.monotonic() - started < limit:
        pass
    return time.monotonic() - started


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


CHECKOUT = Path(__file__).resolve().parents[2]


def compile_sources(root: Path = CHECKOUT) -> None:
    """Byte-compile cargoship's own modules (this checkout's, or the tree at `root`), as
    installing a package does: an editable install run with PYTHONDONTWRITEBYTECODE would
    compile them again on every run and charge that to cargoship's start-up and, for the
    modules a plan imports late, to its CPU per host (the baseline's paramiko is
    compiled)."""
    for package in ("cargoship", "planner", "executor", "schemas"):
        compileall.compile_dir(root / package, quiet=1)
