"""rke2's API server after a restart, through the `cargoship` command (issue 27): the API
server that answers must be the pod of the manifest the start wrote, not the old static
pod still serving; and a crash loop is seen in the API server's mirror pod's restart
count (the kubelet's count), not only in its log files."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.lab import FAST_NODES, HostSpec, Lab

TIMING = FAST_NODES  # nodes watched changing within seconds
FAULT = "/var/lib/rancher/rke2/lab-fault"
CONTAINER = "/var/lib/rancher/rke2/agent/lab-apiserver-container.json"
NEW_MIRROR = "https://mirror2.lab.internal:5000"


def two_controllers(lab_factory) -> Lab:  # type: ignore[no-untyped-def]
    # On an external datastore (etcd=False), so ctl-1 restarts first: of three etcd members,
    # the leader's controller would restart last, whichever that is.
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("ctl-2", "controller")],
                      timing=TIMING, etcd=False)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=30, drain={"timeoutSeconds": 10}))
    return lab


def plan(lab: Lab, path: Path) -> None:
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", path)
    assert result.returncode == 0, result.stdout + result.stderr


def container(lab: Lab, host: str) -> dict:  # type: ignore[type-arg]
    return json.loads(lab.exec(host, f"cat {CONTAINER}").stdout)


def test_the_old_api_server_pod_still_serving_is_not_back(lab_factory,
                                                          tmp_path: Path) -> None:
    """ctl-1's start writes a manifest of a new uid, but its old API server pod serves on
    (ready, its etcd fine) for 4 s after the engine is READY: cargoship waits for the new
    pod before it calls ctl-1 back and stops ctl-2."""
    lab = two_controllers(lab_factory)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"]["registries"][
        "mirrors"]["docker.io"].update(endpoint=[NEW_MIRROR]))
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    old = container(lab, "ctl-1")
    lab.exec("ctl-1", f"echo apiserver-late:4 > {FAULT}")
    since = time.time()
    result = cargoship("apply", plan_file, "--confirm", timeout=180)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "waiting: API server: the kube-apiserver pod serving is not the one of the " \
           "manifest this start wrote" in out, out
    new = container(lab, "ctl-1")
    assert new["uid"] != old["uid"] and new["started_unix"] > since
    ready = [w for w, n in lab.events("ctl-1") if n == "ready" and w >= since]
    assert ready and new["started_unix"] >= ready[0] + 3  # the old pod served meanwhile
    # ctl-2 was stopped only once ctl-1's new API server ran.
    stopping = [w for w, n in lab.events("ctl-2") if n == "stopping" and w >= since]
    assert stopping and stopping[0] > new["started_unix"], (stopping, new)
