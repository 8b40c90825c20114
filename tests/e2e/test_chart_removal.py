"""Taking a chart out of engineConfig.charts really removes its values (issue 28): the
deploy controller leaves a deleted manifest's HelmChartConfig in force, so cargoship
empties the manifest first (the controller prunes the object), and deletes the file once
the API shows it gone. Each step is in the plan as what it is. On lab controllers whose
deploy controller prunes as k3s's does (tests/lab/deploy.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec
from tests.waiting import poller

MANIFEST = "/var/lib/rancher/rke2/server/manifests/cargoship-rke2-ingress-nginx.yaml"
CONFIG = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmchartconfigs"


def plan_apply(lab, tmp_path: Path, name: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    plan_file = tmp_path / f"{name}.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return dict(json.loads(cargoship("show", plan_file, "--json").stdout))


poll = poller(timeout=20, every=0.1)


def test_a_removed_chart_is_emptied_pruned_then_deleted(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])

    def names() -> set[str]:
        return {i["metadata"]["name"] for i in lab.api("GET", CONFIG)["items"]}

    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}}))
    plan_apply(lab, tmp_path, "add")
    poll(lambda: names() == {"rke2-ingress-nginx"})
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].pop("charts"))
    emptied = plan_apply(lab, tmp_path, "empty")
    assert [(c["action"], c["target"]) for c in emptied["changes"]] == [
        ("write-file-in-place", MANIFEST)], emptied["changes"]
    assert "-      replicaCount: 2" in emptied["changes"][0]["diff"]  # what goes, shown
    assert lab.exec("ctl-1", f"cat {MANIFEST}").stdout.startswith("# cargoship no longer")
    poll(lambda: names() == set())  # pruned: the values are no longer in force
    deleted = plan_apply(lab, tmp_path, "delete")
    assert [(c["action"], c["target"]) for c in deleted["changes"]] == [
        ("delete-file-in-place", MANIFEST)], deleted["changes"]
    assert lab.exec("ctl-1", f"test -e {MANIFEST} || echo gone").stdout.strip() == "gone"
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert again.returncode == 0 and "No changes" in again.stdout, again.stdout
