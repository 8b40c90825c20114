"""Trust chain: a run killed while it rolls back a failed change leaves enough on the host
(the in-progress marker names the plan, the step and the backups) for the next plan to
offer restoring the files from before it, not restarting on the files that just failed.
End to end on lab controllers whose API server crash-loops on a bad audit policy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.e2e.test_rollout_fidelity import (
    controllers,
    plan,
    refused_audit_policy,
    restarted_by_cargoship,
)

MARKER = "/var/lib/cargoship/in-progress.json"
AUDIT = "/etc/rancher/rke2/cargoship-audit-policy.yaml"


@pytest.mark.reliability("trust: records never lost together")
def test_a_run_killed_while_rolling_back_is_restored_not_restarted(  # type: ignore[no-untyped-def]
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    lab = controllers(lab_factory, count=2, etcd=False)  # ctl-1 first: see controllers()
    refused_audit_policy(lab)
    bad = tmp_path / "bad.json"
    plan(lab, bad)
    bad_id = json.loads(bad.read_text())["plan_id"]
    run = subprocess.Popen([*cargoship_argv(), "apply", str(bad), "--confirm"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while '"step": "rolling back"' not in lab.exec("ctl-1", f"cat {MARKER}",
                                                       check=False).stdout:
            assert run.poll() is None, "apply ended before it rolled back"
            assert time.monotonic() < deadline, "no rollback within 120 s"
            time.sleep(0.1)
        os.killpg(run.pid, signal.SIGKILL)  # the run dies mid-rollback
    finally:
        run.wait(timeout=30)
    marker = json.loads(lab.exec("ctl-1", f"cat {MARKER}").stdout)
    assert marker["plan_id"] == bad_id
    assert marker["backups"] == f"/var/lib/cargoship/backups/{bad_id}"

    # The next plan, made from a config without the bad policy, offers the restore.
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].pop(
        "auditPolicy"))
    fix = tmp_path / "fix.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", fix)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    changes = json.loads(fix.read_text())["changes"]
    actions = {(c["host"]["name"], c["action"]) for c in changes}
    assert ("ctl-1", "restore-backup") in actions and ("ctl-1", "recover") not in actions
    assert [c["target"] for c in changes if c["action"] == "restore-backup"] == [
        marker["backups"]]
    assert "would drain, stop the engine, restore the files backed up in" in planned.stdout

    # The dead run's lock stays live for a minute: remove it the documented way.
    lock_id = json.loads(lab.exec("ctl-1", "cat /run/cargoship/lock").stdout)["id"]
    unlocked = cargoship("force-unlock", "-c", lab.dir / "cluster.yaml", lock_id, "--confirm")
    assert unlocked.returncode == 0, unlocked.stdout + unlocked.stderr
    lab.record_service_requests("ctl-1")
    since = time.time()
    applied = cargoship("apply", fix, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "restored" in applied.stdout
    # Restored under an engine it stopped and started again itself (rke2 reads its files
    # only at start), not left to whatever restarts the engine next.
    restarted_by_cargoship(lab, "ctl-1", since, restarts=1)
    assert lab.exec("ctl-1", f"ls {AUDIT} {MARKER}", check=False).returncode != 0
    assert len(lab.ready_nodes()) == 2
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout  # nothing left to do
