"""Where the test suite's CPU goes, test by test, as a pytest plugin; then a table of it.

    python -m pytest -p tests.bench.suite_cpu -n 6 --dist loadfile   # as root
    python -m tests.bench.suite_cpu /tmp/suite-cpu.jsonl [--most 40] [--weights]

The suite is bound by CPU on 2 cores (tests/bench/FINDINGS.md), and most of a test's CPU
is spent outside pytest's process: its lab hosts' sshd, engines, API servers and etcd
members, and the `cargoship` commands it runs, all started by the test's worker. Each
xdist worker moves itself into a cgroup of its own (cgroup v1 `cpuacct`, or v2), which
every process it starts inherits, lab hosts included, and the plugin writes the cgroup's
CPU before and after each test (setup and teardown included) to CGROUP_CPU_LOG (default
/tmp/suite-cpu.jsonl), a JSON line a test, with the part of it spent inside `Lab.up` and
`Lab.down` (`lab`): what the suite would save if every lab started and stopped for free.
Where no cgroup can be made (not root, no cpuacct) it says so once and measures nothing.

`--weights` also writes each file's wall seconds to tests/file_weights.json, the order in
which the suite hands its files to the workers (tests/conftest.py).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

LOG_ENV = "CGROUP_CPU_LOG"
DEFAULT_LOG = "/tmp/suite-cpu.jsonl"
# (cgroup root, the file with its CPU, how to read seconds from it)
_HIERARCHIES = (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"),
                ("/sys/fs/cgroup", "cpu.stat"))


class _Cgroup:
    def __init__(self, path: Path, stat: str) -> None:
        self.path, self.stat = path, stat

    def seconds(self) -> float:
        text = (self.path / self.stat).read_text()
        if self.stat == "cpuacct.usage":
            return int(text) / 1e9
        usage = next(line for line in text.splitlines() if line.startswith("usage_usec"))
        return int(usage.split()[1]) / 1e6


def _join(name: str) -> _Cgroup | None:
    for root, stat in _HIERARCHIES:
        if not Path(root, stat).exists():
            continue
        path = Path(root, name)
        try:
            path.mkdir(exist_ok=True)
            (path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            continue
        return _Cgroup(path, stat)
    return None


_GROUP = pytest.StashKey[_Cgroup]()
_LAB = pytest.StashKey[list[float]]()  # CPU-s inside Lab.up and Lab.down, this test so far


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    group = _join(f"cargoship-suite-{worker}-{os.getpid()}")
    if group is None:
        print(f"suite_cpu: no cgroup for {worker}: nothing measured")
    else:
        config.stash[_GROUP] = group
        config.stash[_LAB] = [0.0]
        _count_lab_cycles(group, config.stash[_LAB])


def _count_lab_cycles(group: _Cgroup, spent: list[float]) -> None:
    """Lab.up and Lab.down wrapped (in this worker only) to add their cgroup CPU to
    `spent`; the tests of one worker run one at a time, so what the cgroup spends while one
    of them runs is that lab's starting or stopping (and the test's other labs idling). A
    call inside another (`up` taking down a lab that failed to start) is the outer one's."""
    from tests.lab.lab import Lab

    depth = [0]

    def counted(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            before = group.seconds()
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[0] += group.seconds() - before
        return wrapper

    up, down = Lab.__dict__["up"].__func__, Lab.down
    Lab.up = classmethod(counted(up))  # type: ignore[method-assign,assignment]
    Lab.down = counted(down)  # type: ignore[method-assign]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Every process still in this cgroup back to the parent, and this one removed: the
    tests are over, and the worker's zygote (tests/e2e/cli.py) ends only after this, as
    the worker does, so the directory was left behind at every run."""
    group = config.stash.get(_GROUP, None)
    if group is None:
        return
    del config.stash[_GROUP]
    parent = group.path.parent / "cgroup.procs"
    try:
        for pid in (group.path / "cgroup.procs").read_text().split():
            try:
                parent.write_text(pid)
            except OSError:
                pass  # gone meanwhile
        group.path.rmdir()
    except OSError:
        pass  # a process started meanwhile: the directory stays (rmdir it once empty)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Iterator[None]:
    group = item.config.stash.get(_GROUP, None)
    if group is None:
        yield
        return
    lab = item.config.stash[_LAB]
    lab[0] = 0.0
    cpu, wall, start = group.seconds(), time.monotonic(), time.time()
    yield
    line = {"test": item.nodeid, "cpu": round(group.seconds() - cpu, 3),
            "lab": round(lab[0], 3),
            "wall": round(time.monotonic() - wall, 2), "start": round(start, 2),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}
    with open(os.environ.get(LOG_ENV, DEFAULT_LOG), "a") as log:
        log.write(json.dumps(line) + "\n")


def _logged(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(path: Path, most: int) -> list[str]:
    tests = _logged(path)
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for test in tests:
        row = files[test["test"].split("::")[0]]
        row[0] += test["cpu"]
        row[1] += test["wall"]
        row[2] += 1
    total = sum(t["cpu"] for t in tests)
    labs = sum(t.get("lab", 0.0) for t in tests)
    lines = [f"{len(tests)} tests, {total:.0f} CPU-s in all (the workers' process trees), "
             f"{labs:.0f} of them inside Lab.up and Lab.down"]
    lines += _tail(tests)
    lines.append(f"{'CPU s':>8} {'wall s':>8} {'tests':>5} {'share':>6}  file")
    for name, (cpu, wall, count) in sorted(files.items(), key=lambda kv: -kv[1][0])[:most]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {count:5d} {cpu / total:6.1%}  {name}")
    lines.append(f"\n{'CPU s':>8} {'wall s':>8}  test")
    for test in sorted(tests, key=lambda t: -t["cpu"])[:most]:
        lines.append(f"{test['cpu']:8.1f} {test['wall']:8.1f}  {test['test']}")
    return lines


WEIGHTS = Path(__file__).resolve().parents[1] / "file_weights.json"


def weights(path: Path) -> dict[str, float]:
    """Each test file's wall seconds in the run logged at `path`, the longest first."""
    walls: dict[str, float] = defaultdict(float)
    for test in _logged(path):
        walls[test["test"].split("::")[0]] += test["wall"]
    return {name: round(wall, 1) for name, wall in sorted(walls.items(), key=lambda kv: -kv[1])}


def _tail(tests: list[dict[str, Any]]) -> list[str]:
    """How long the run went on after the first worker ran out of files: the time some
    workers sat idle while others still ran theirs."""
    ends: dict[str, float] = {}
    for test in tests:
        if "start" in test:
            end = test["start"] + test["wall"]
            ends[test["worker"]] = max(end, ends.get(test["worker"], end))
    if len(ends) < 2:
        return []
    first = min(test["start"] for test in tests if "start" in test)
    done, last = min(ends.values()), max(ends.values())
    return [f"run {last - first:.0f} s; the first of {len(ends)} workers done after "
            f"{done - first:.0f} s, {last - done:.0f} s before the last"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.suite_cpu",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, nargs="?", default=Path(DEFAULT_LOG))
    parser.add_argument("--most", type=int, default=30, help="rows in each table")
    parser.add_argument("--weights", action="store_true",
                        help=f"also write each file's wall seconds to {WEIGHTS}")
    args = parser.parse_args(argv)
    try:
        print("\n".join(report(args.log, args.most)))
        if args.weights:
            WEIGHTS.write_text(json.dumps(weights(args.log), indent=0) + "\n")
            print(f"\nwrote {WEIGHTS}")
    except (OSError, ValueError, KeyError) as exc:
        parser.error(f"{args.log}: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
