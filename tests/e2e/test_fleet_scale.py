"""A fleet where most hosts are unreachable: the plan ends after about one connect
timeout, not one per wave of hosts, and says what it is doing while it waits."""

from __future__ import annotations

import itertools
import re
import subprocess
import time
from pathlib import Path

import yaml

from tests.e2e.cli import cargoship_argv
from tests.lab import HostSpec

TIMEOUT = 12  # seconds: long enough for two progress lines in between
DEAD = 64


def test_unreachable_hosts_cost_one_connect_timeout_with_progress_lines(
        lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    ctl = lab.host("ctl-1")
    # 64 more "hosts": ports of ctl-1 whose packets are dropped (a host down, a firewall).
    lab.exec("ctl-1", "nft add table inet dead && nft add chain inet dead input "
                      "'{ type filter hook input priority 0; policy accept; }' && "
                      "nft add rule inet dead input tcp dport 20000-20999 drop")
    config = yaml.safe_load((lab.dir / "cluster.yaml").read_text())
    template = config["spec"]["hosts"][0]
    for i in range(DEAD):
        config["spec"]["hosts"].append({"role": "worker", "ssh": {
            **template["ssh"], "address": ctl.address, "port": 20000 + i}})
    # 8 at a time: one timeout per wave would be 8 waves, 96 s.
    config["spec"]["options"] = {"concurrency": {"hosts": 8},
                                 "ssh": {"connectTimeoutSeconds": TIMEOUT}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    started = time.monotonic()
    result = subprocess.run([*cargoship_argv(), "plan", "-c", str(path)], capture_output=True,
                            text=True, timeout=300, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    timed_out = [line for line in result.stdout.splitlines()
                 if f"timed out after {TIMEOUT}s" in line]
    assert len(timed_out) == DEAD, result.stdout
    assert wall < 2.5 * TIMEOUT, f"{wall:.1f}s: the dead hosts were waited for in waves"
    # stdout was a pipe: progress lines on stderr, at most 10 s apart.
    beats = [int(m.group(1)) for m in re.finditer(r"^cargoship: (\d+)s, (.*)$",
                                                  result.stderr, re.MULTILINE)]
    assert len(beats) >= 2 and beats[0] <= 10, result.stderr
    assert all(b - a <= 10 for a, b in itertools.pairwise(beats)), beats
    assert "Connect to hosts: 1 of 65 host(s) connected" in result.stderr, result.stderr
