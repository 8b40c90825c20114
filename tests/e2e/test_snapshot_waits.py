"""A plan never reads a host halfway through a change. An apply whose client dies mid-
restart leaves its remote script to finish the change on its own (it must not leave the
engine stopped); that script holds the swap lock until it has asked for the start, and the
host snapshot waits for the lock before it reads anything: the plan sees the files as the
change left them, not as they were halfway."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.e2e.cli import cargoship
from tests.lab import HostSpec

REGISTRIES = "/etc/rancher/rke2/registries.yaml"


def test_a_plan_waits_for_a_change_still_running_on_the_host(lab_factory,
                                                             tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    # In the place of a restart script whose client died: it holds the lock, and writes
    # its file a few seconds later, as a stop that takes its time would make it.
    lab.exec("ctl-1", "mkdir -p /run/cargoship; ( exec 9>>/run/cargoship/swap.lock; "
                      "flock -x 9; touch /run/cargoship/held; sleep 4; "
                      f"printf 'mirrors:\\n  written.late: {{}}\\n' > {REGISTRIES}; "
                      "rm /run/cargoship/held ) </dev/null >/dev/null 2>&1 &")
    deadline = time.monotonic() + 10
    while lab.exec("ctl-1", "test -e /run/cargoship/held", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the stand-in never took the lock"
        time.sleep(0.05)

    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--json")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert lab.exec("ctl-1", "test -e /run/cargoship/held", check=False).returncode != 0
    diffs = [c["diff"] for c in json.loads(planned.stdout)["changes"]
             if c["target"] == REGISTRIES]
    assert diffs and "written.late" in diffs[0], diffs
