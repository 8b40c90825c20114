"""Run mutations in scratch copies of the repository and say which tests killed them.

Each worker owns one scratch copy (the files git knows, nothing else: no .venv, no
caches). A mutation is written into that copy, the tests named for it run there (-x: the
first failure is enough), and the file is put back. Bytecode is never written, so a
restored file can't be shadowed by the mutant's .pyc (same size, same second).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .mutate import Mutation, Stale, mutate

ROOT = Path(__file__).resolve().parents[2]
_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)", re.M)
_WHERE = re.compile(r"^(tests/\S+\.py):\d+", re.M)


@dataclass
class Outcome:
    mutation: Mutation
    verdict: str  # killed | survived | stale | timeout
    by: str = ""  # the test that killed it, or why it is stale
    seconds: float = 0.0


def scratch_copy(into: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if not src.is_file():  # deleted in the working tree, not yet in git
            continue
        dst = into / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    return into


def run_tests(copy: Path, tests: Iterable[str], timeout: float, first_failure: bool = True,
              ) -> tuple[int | None, str]:
    """pytest in `copy`: (exit code or None on timeout, its output)."""
    base = Path(tempfile.mkdtemp(prefix="cargoship-mutation-"))
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
            "--no-header", f"--basetemp={base}", *(["-x"] if first_failure else []), *tests]
    proc = subprocess.Popen(argv, cwd=copy, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    finally:
        # Labs a killed or failed run left behind go with it.
        subprocess.run([sys.executable, "-m", "tests.lab", "down", "--all", "--under",
                        str(base)], cwd=copy, env=env, capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)
    return code, out


def run_one(copy: Path, m: Mutation, timeout: float) -> Outcome:
    started = time.monotonic()
    target = copy / m.path
    original = target.read_text()
    try:
        target.write_text(mutate(original, m))
    except (Stale, OSError) as exc:
        return Outcome(m, "stale", str(exc))
    try:
        code, out = run_tests(copy, m.tests, timeout)
    finally:
        target.write_text(original)
    took = time.monotonic() - started
    if code is None:
        return Outcome(m, "timeout", f"tests still running after {timeout:.0f} s", took)
    if code == 0:
        return Outcome(m, "survived", "", took)
    if code not in (1, 2):  # 2: interrupted (-x stops with 1), 3-5: pytest's own trouble
        return Outcome(m, "stale", f"pytest exit {code}: {out.strip().splitlines()[-1:]}",
                       took)
    hit = _FAILED.search(out)
    if hit:
        return Outcome(m, "killed", f"{hit.group(1).lower()} {hit.group(2)}", took)
    # No test failed by name: the mutant ended the session itself (a signal handler
    # raising KeyboardInterrupt into pytest, say). Still killed; say where it stopped.
    where = _WHERE.findall(out)
    banner = [line.strip("! ") for line in out.splitlines() if line.startswith("!!!")]
    last = [line for line in out.splitlines() if line.strip()][-1:] or ["no output"]
    return Outcome(m, "killed", f"the test session was ended by {banner[0] if banner else '?'}"
                                f"{f' in {where[-1]}' if where else ''} "
                                f"({last[0].strip('= ')[:80]})", took)


def run_all(mutations: list[Mutation], jobs: int, timeout: float,
            report: Callable[[Outcome], None]) -> list[Outcome]:
    workdir = Path(tempfile.mkdtemp(prefix="cargoship-mutants-"))
    free = [scratch_copy(workdir / f"copy{i}") for i in range(jobs)]
    lock = threading.Lock()
    outcomes: list[Outcome] = []

    def work(m: Mutation) -> None:
        with lock:
            copy = free.pop()
        try:
            outcome = run_one(copy, m, timeout)
        finally:
            with lock:
                free.append(copy)
        with lock:
            outcomes.append(outcome)
            report(outcome)

    try:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(work, mutations))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    order = {id(m): i for i, m in enumerate(mutations)}
    return sorted(outcomes, key=lambda o: order[id(o.mutation)])


def baseline(mutations: list[Mutation], timeout: float) -> tuple[bool, str]:
    """The named tests pass on the code as it is: otherwise 'killed' would mean nothing."""
    tests = sorted({t for m in mutations for t in m.tests})
    with tempfile.TemporaryDirectory(prefix="cargoship-baseline-") as tmp:
        copy = scratch_copy(Path(tmp) / "copy")
        code, out = run_tests(copy, ["-n", "3", "--dist", "loadfile", *tests], timeout,
                              first_failure=False)
    return code == 0, out
