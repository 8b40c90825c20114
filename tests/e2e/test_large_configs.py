"""A cluster.yaml with many charts, through the `cargoship` command on lab hosts: the
commands that read and write them are longer than an SSH exec request may carry (about
34 KB: 15 charts did it, and every plan on a controller failed with "SSH connection is
closed"), and their root part longer than one argument may be (128 KiB)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec

CHARTS = 150
MANIFESTS = "/var/lib/rancher/rke2/server/manifests"


@pytest.mark.parametrize("user", ["root", "ops"])
def test_a_hundred_and_fifty_charts_are_planned_applied_and_then_in_sync(
        lab_factory, tmp_path: Path, user: str) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller", user=user)])
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={f"chart-number-{i:03d}": {"values": {"replicas": i}} for i in range(CHARTS)}))
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file,
                     "--detailed-exitcode")
    assert made.returncode == 2, made.stdout + made.stderr
    assert len(json.loads(plan_file.read_text())["changes"]) == CHARTS
    applied = cargoship("apply", plan_file, "--confirm")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    listed = lab.exec("ctl-1", f"ls {MANIFESTS} | grep -c "
                               "'^cargoship-chart-number-[0-9]*[.]yaml$'").stdout
    assert int(listed) == CHARTS
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr
