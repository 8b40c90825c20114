"""The README's setup, as documented: `scripts/demo.sh` in a root shell where `sudo` does
not exist, showing the job (drift planned, shown, applied, nothing left) in under a
minute, printing the commands it runs, and removing its lab at the end."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.lab import network

ROOT = Path(__file__).resolve().parents[2]


def setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Setup", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_setup_needs_no_sudo() -> None:
    commands = setup_commands()
    assert commands == ["scripts/demo.sh", "scripts/test.sh"]
    for script in ("demo.sh", "test.sh", "setup.sh", "bench.sh"):
        body = (ROOT / "scripts" / script).read_text()
        assert not re.search(r"^\s*sudo\b|[;&|(]\s*sudo\b", body, re.M), script


def test_the_demo_shows_the_job_in_under_a_minute(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the demo runs as root (the lab needs namespaces)")
    # A machine without sudo: any call to it fails loudly.
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "sudo").write_text("#!/bin/sh\necho 'sudo: command not found' >&2\nexit 127\n")
    (shims / "sudo").chmod(0o755)
    lab = tmp_path / "demo-lab"
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "LAB": str(lab)}
    started = time.monotonic()
    demo = subprocess.run([str(ROOT / "scripts" / "demo.sh")], capture_output=True,
                          text=True, env=env, timeout=180, cwd=tmp_path)
    seconds = time.monotonic() - started
    out = re.sub(r"\x1b\[[0-9;]*m", "", demo.stdout)
    assert demo.returncode == 0, out + demo.stderr
    assert "sudo: command not found" not in demo.stderr
    print(f"demo took {seconds:.1f}s")
    assert seconds < 60, f"the demo took {seconds:.0f}s"
    # The commands, printed as a newcomer would type them, in order.
    typed = re.findall(rf"^{re.escape(str(lab))}\$ (.*)$", out, re.M)
    assert typed == ["cargoship plan -c cluster.yaml -out plan.json --detailed-exitcode",
                     "cargoship show plan.json", "cargoship apply plan.json --confirm",
                     "cargoship plan -c cluster.yaml --detailed-exitcode"]
    first, show, apply, last = re.split(rf"^{re.escape(str(lab))}\$ .*$", out, flags=re.M)[1:]
    # Realistic drift: a stale mirror list on two workers, a chart value on the controller.
    # (compact: one line for the two workers' identical change, led by what it changes)
    assert "write-file /etc/rancher/rke2/registries.yaml (drain + restart) on wrk-2, wrk-3 " \
           "(same change on 2 hosts)" in first, first
    assert re.search(r"write-file-in-place .*cargoship-rke2-ingress-nginx.yaml \(in place\) "
                     r"on ctl-1$", first, re.M), first
    assert "~ spec.valuesContent.controller.replicaCount: 3 -> 2" in first
    assert "wrk-1" not in first.split("Sync", 1)[1]
    assert "write-file /etc/rancher/rke2/registries.yaml" in show
    assert "Apply complete after" in apply and "2 engine restart(s)" in apply
    assert "No changes" in last
    # The lab is gone with the demo.
    assert not [d for d in network.registered_dirs() if d == lab.resolve()]
    assert not (lab / "lab.json").exists()
