"""The benchmark (python -m tests.bench) at its smallest, so it keeps working.

No timing is asserted: figures on a shared machine say nothing about correctness. The
Ansible part runs when ansible-playbook is installed (pip install -e '.[bench]'), and is
skipped, not installed, otherwise.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.ansible import playbook_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (namespaces)")
def test_the_benchmark_runs_and_prints_every_figure(tmp_path: Path) -> None:
    # A restart of two seconds, the lab's least (tests/lab/spec.py Timing): a restarted
    # kubelet posts its node's status once, and a post in the second of the stop could
    # not prove it is fresh.
    argv = [sys.executable, "-m", "tests.bench", "--sizes", "2", "--latencies", "20",
            "--reps", "1", "--rollout-workers", "2", "--concurrency", "2", "--drain", "0.2",
            "--restart", "2", "--no-install", "--work", str(tmp_path / "bench")]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "Plan: `cargoship plan --stats`" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("2   20 ms |"))
    assert row.split()[7] == "1", row  # one round trip per host per phase
    assert "Round trips per host by phase" in out
    # The whole read side in the snapshot taken on connecting (issue 15).
    assert "1  Connect to hosts" in out and "0  Validate hosts" in out
    assert "Plan vs the baseline client" in out
    rows = [line for line in out.splitlines() if line.strip().startswith("2   20 ms |")]
    base = rows[1]  # the plan table's row, then the baseline table's
    assert base.split("|")[1].split()[2].endswith("x"), base  # the wall ratio
    assert "Targets (issue 15):" in out
    # Start-up is every import: to the phases loaded, with the first dial's figure beside it.
    assert re.search(r"start-up \(imports\) of `plan` at most 0\.3 s: [\d.]+ s wall, [\d.]+ s "
                     r"CPU \(process start to the phases loaded; to the first dial: ", out), out
    assert "ms with start-up cut at the first dial)" in out
    # The plans wait for the freshly started lab to settle, as the rollout does after it.
    assert re.search(r"note: the plans began after \d+ s waiting for the machine to settle",
                     out), out
    assert "Apply rollout: 1 controller(s) + 2 workers" in out
    # Each host's span in the rollout, read from the executor's log (3 hosts).
    assert re.search(r"rollout overhead per node outside the drain and restart waits at most "
                     r"0\.3 s: c=2: mean -?[\d.]+ s, max -?[\d.]+ s", out), out
    assert any(line.strip().startswith("2 |") for line in out.splitlines())
    assert "Targets (issue 6):" in out
    assert "at most 1 remote command round trip per host per phase: max 1" in out
    if playbook_command() is not None:
        assert "x" in row.rsplit("|", 1)[1], row  # the Ansible ratio
    # Nothing of the benchmark's labs is left behind.
    assert not (tmp_path / "bench" / "lab" / "lab.json").exists()
    assert not (tmp_path / "bench" / "rollout-lab" / "lab.json").exists()
