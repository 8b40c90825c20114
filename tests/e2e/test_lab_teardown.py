"""`down` removes a lab whole and at once: the race behind links still listed right after
`down` (the kernel removes a namespace's veth pairs only once its last process is gone,
asynchronously) is provoked here on purpose, with a process kept inside a host's netns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab import HostSpec, Lab

LAB = [sys.executable, "-m", "tests.lab"]


def test_down_returns_with_no_link_netns_or_process_left(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    lab = Lab.up(tmp_path / "lab", [HostSpec("ctl-1", "controller")])
    host = lab.host("ctl-1")
    # Holds a reference to the namespace, as a slow-to-exit process of the host would.
    holder = subprocess.Popen(["ip", "netns", "exec", host.netns, "sleep", "300"])
    try:
        down = subprocess.run([*LAB, "down", "--dir", str(lab.dir)], capture_output=True,
                              text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"c{lab.tag}h" not in links and host.netns not in netns
        assert holder.wait(timeout=10) != 0  # killed by down, not left running
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


LEAKY_TEST = '''
from tests.lab import HostSpec, Lab


def test_leaves_its_lab_running(tmp_path):
    Lab.up(tmp_path / "lab", [HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
'''


def test_the_reliability_report_removes_every_lab_it_started(tmp_path: Path) -> None:
    """Even one a test forgot to remove: the report's own run leaves no lab behind."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    from tests.lab import network

    before = set(network.registered_dirs())
    leaky = tmp_path / "test_leaky.py"
    leaky.write_text(LEAKY_TEST)
    root = Path(__file__).resolve().parents[2]
    report = subprocess.run([sys.executable, "-m", "tests.reliability.report", str(leaky),
                             "-k", "leaves_its_lab_running"],
                            cwd=root, capture_output=True, text=True, timeout=300)
    assert "removed 1 lab(s) the tests left running" in report.stderr, report.stdout
    # (Other runs on this machine may start labs meanwhile: only the report's count.)
    assert not [d for d in set(network.registered_dirs()) - before
                if "cargoship-reliability." in str(d)]
