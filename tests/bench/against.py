"""This checkout's plan against another commit's, on one lab, run for run. As root:

    python -m tests.bench.against c81c09f [--sizes 10,100] [--latency 20] [--rounds 5]

The issue-15 figures of two trees measured in two bench runs drift with whatever the
machine did between them (a lab torn down, the kernel's clean-up after it): the pairs in
tests/bench/FINDINGS.md moved by a fifth between runs. Here both trees plan the same hosts
through the same latency proxy, alternately (which goes first swaps each round), each
plan followed by the baseline client, and the medians are set side by side. The other
commit runs from a git worktree (under /tmp, removed at the end) with this checkout's
virtualenv and its own code first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from .fleet import Fleet, hosts_cpu, sshd_pids, start_fleet
from .measure import Run, compile_sources, load_average, run, settle
from .plans import cargoship

ROOT = Path(__file__).resolve().parents[2]
_LOADED = re.compile(r"start-up to the phases loaded: ([\d.]+) s wall, ([\d.]+) s CPU")


@dataclass
class Figures:
    """One tree's plans of one size: a value per round for each figure."""

    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    hosts: list[float] = field(default_factory=list)  # the lab hosts' CPU during the plan
    startups: list[float] = field(default_factory=list)  # CPU to the phases loaded
    baselines: list[float] = field(default_factory=list)  # the baseline client's wall

    def add(self, plan: Run, hosts: float, baseline: Run) -> None:
        found = _LOADED.search(plan.stdout)
        if plan.code != 0 or found is None:
            raise RuntimeError(f"a plan failed (exit {plan.code}): "
                               f"{(plan.stderr or plan.stdout).strip()[-300:]}")
        self.walls.append(plan.wall)
        self.cpus.append(plan.cpu)
        self.rss.append(plan.rss_mib)
        self.hosts.append(hosts)
        self.startups.append(float(found.group(2)))
        self.baselines.append(baseline.wall)

    def row(self, size: int) -> dict[str, float]:
        """The medians, and the issue-15 figures made of them."""
        wall, cpu, startup = median(self.walls), median(self.cpus), median(self.startups)
        return {"wall": wall, "ratio": wall / median(self.baselines), "cpu": cpu,
                "per_host_ms": (cpu - startup) / size * 1000, "startup": startup,
                "rss": median(self.rss), "hosts": median(self.hosts)}


COLUMNS = (("wall", "plan wall s", "{:.2f}"), ("ratio", "/ baseline", "{:.2f}x"),
           ("cpu", "client CPU s", "{:.2f}"), ("per_host_ms", "CPU/host ms", "{:.1f}"),
           ("startup", "start-up CPU s", "{:.3f}"), ("rss", "peak RSS MiB", "{:.1f}"),
           ("hosts", "hosts' CPU s", "{:.2f}"))


def table(rows: dict[tuple[int, str], dict[str, float]], names: tuple[str, str]) -> list[str]:
    lines = [f"{'hosts':>5} {'tree':12} " + " ".join(f"{h:>14}" for _, h, _ in COLUMNS)]
    for size in sorted({s for s, _ in rows}):
        for name in names:
            row = rows[(size, name)]
            lines.append(f"{size:>5} {name:12} " + " ".join(
                f"{fmt.format(row[key]):>14}" for key, _, fmt in COLUMNS))
    return lines


def worktree(ref: str, work: Path) -> tuple[str, Path]:
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                             check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError:
        raise SystemExit(f"against: {ref!r} is no commit of {ROOT}") from None
    path = work / f"ref-{sha[:12]}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha],
                   check=True, capture_output=True)
    return sha, path


def measure(fleet: Fleet, trees: dict[str, Path], size: int, latency: float,
            rounds: int) -> dict[str, Figures]:
    config = fleet.cluster_yaml(size, latency)
    sshd = sshd_pids(fleet.lab)
    argv = [*cargoship(), "--no-color", "plan", "-c", str(config), "--stats"]
    for path in trees.values():
        run(argv, env={"PYTHONPATH": str(path)})  # page cache, byte code, the proxy
    figures = {name: Figures() for name in trees}
    for number in range(rounds):
        order = list(trees) if number % 2 == 0 else list(reversed(trees))
        for name in order:
            before = hosts_cpu(sshd)
            plan = run(argv, env={"PYTHONPATH": str(trees[name])})
            time.sleep(0.2)  # sshd reaps the sessions' processes
            used = hosts_cpu(sshd) - before
            baseline = run([sys.executable, "-m", "tests.bench.baseline", str(config)],
                           env={"PYTHONPATH": str(ROOT)})
            figures[name].add(plan, used, baseline)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.against",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the commit to compare this checkout with")
    parser.add_argument("--sizes", default="10,100", help="host counts (default 10,100)")
    parser.add_argument("--latency", type=float, default=20, help="one-way delay, ms")
    parser.add_argument("--rounds", type=int, default=5, help="plans per tree and size")
    args = parser.parse_args(argv)
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
    except ValueError:
        parser.error(f"--sizes: not a list of host counts: {args.sizes!r}")
    if not sizes or sizes[0] < 1 or args.rounds < 1:
        parser.error("--sizes and --rounds must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="bench-against-", dir="/tmp"))
    sha, ref_tree = worktree(args.ref, work)
    # Both trees compiled, as installed: the other commit's fresh worktree has no byte
    # code, and this machine's PYTHONDONTWRITEBYTECODE would have it compiled at every
    # plan (about 0.07 s of its start-up and 0.3 ms of its CPU per host at 100 hosts).
    for tree in (ROOT, ref_tree):
        compile_sources(tree)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "HEAD"
    names = (f"this {head}", f"ref {sha[:7]}")
    trees = {names[0]: ROOT, names[1]: ref_tree}
    fleet = None
    try:
        print(f"starting {sizes[-1]} lab host(s) in {work}", flush=True)
        fleet = start_fleet(work, sizes[-1])
        waited = settle()
        before = load_average()
        rows = {}
        for size in sizes:
            print(f"{size} hosts: {args.rounds} round(s), alternated", flush=True)
            for name, figures in measure(fleet, trees, size, args.latency,
                                         args.rounds).items():
                rows[(size, name)] = figures.row(size)
        print(f"\n{args.latency:g} ms one-way; medians of {args.rounds} plan(s) each, the two "
              f"trees alternated; load average {before} when the plans began (after "
              f"{waited:.0f} s settling), {load_average()} at the end")
        print("\n".join(table(rows, names)))
    finally:
        if fleet is not None:
            fleet.stop()
            fleet.lab.down()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref_tree)],
                       capture_output=True)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
