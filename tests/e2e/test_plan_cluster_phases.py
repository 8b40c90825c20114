"""Kubeconfig and node-label assessment through the lab's Kubernetes API, and unassessed
items where a reported phase would change what a later one reads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_plan_preflight import phase_block
from tests.lab import HostSpec

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
EDGE = "node-role.kubernetes.io/edge"


def cluster(lab_factory, **options):  # type: ignore[no-untyped-def]
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker"), HostSpec("wrk-3", "worker")])

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}}
        for host in data["spec"]["hosts"][1:3]:
            host["profile"] = "edge"
        data["spec"]["options"].update(options)

    edit_config(lab.dir / "cluster.yaml", edit)
    return lab


def test_missing_and_wrong_labels_become_label_changes(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, labelProfiles=True)
    lab.api("PATCH", "/api/v1/nodes/wrk-2", {"metadata": {"labels": {EDGE: "false"}}},
            "application/merge-patch+json")
    plan = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan,
                       "--detailed-exitcode")
    assert result.returncode == 2, result.stdout
    data = json.loads(plan.read_text())
    assert [(c["host"]["name"], c["action"], c["target"], c["node"], c["label"], c["before"],
             c["after"]) for c in data["changes"]] == [
        ("wrk-1", "label-node", "node/wrk-1", "wrk-1", EDGE, None, "true"),
        ("wrk-2", "label-node", "node/wrk-2", "wrk-2", EDGE, "false", "true")]
    assert [c["host"]["address"] for c in data["changes"]] == [
        lab.host("wrk-1").address, lab.host("wrk-2").address]
    assert f"+ {EDGE}=true" in phase_block(result.stdout, "Labeling nodes with their profile group")
    # wrk-3 has no profile: nothing to do there; with the labels in place, nothing at all.
    for node in ("wrk-1", "wrk-2"):
        lab.api("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {EDGE: "true"}}},
                "application/merge-patch+json")
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout


def test_labels_of_a_node_being_restarted_are_unassessed(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, labelProfiles=True)
    lab.exec("wrk-1", f"echo 'mirrors: {{}}' > {REGISTRIES}")
    plan = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan,
                       "--detailed-exitcode")
    assert result.returncode == 2
    data = json.loads(plan.read_text())
    assert [(u["action"], u["phase"], u["host"]["name"], u["reason"])
            for u in data["unassessed"]] == [
        ("label-node", "Labeling nodes with their profile group", "wrk-1",
         "reads its node object, which 'Sync Registry Config Worker' would change first; "
         f"once it can be read, apply would set {EDGE}=true on node wrk-1 (where missing "
         "or different) and remove the node-role.kubernetes.io/* labels cargoship set there "
         "for other profiles")]
    assert data["complete"] is False
    # wrk-2 could be assessed and still is.
    assert [c["target"] for c in data["changes"]] == [REGISTRIES, "node/wrk-2"]
    block = phase_block(result.stdout, "Labeling nodes with their profile group")
    assert "unassessed: reads its node object" in block
    assert "1 unassessed" in result.stdout


def test_kubeconfig_merge_is_planned_with_credentials_masked(lab_factory,
                                                             tmp_path: Path) -> None:
    local = tmp_path / "kubeconfig"
    local.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "other", "cluster": {"server": "https://other:6443"}}],
        "users": [{"name": "other", "user": {"token": "other-token-3e1f"}}],
        "contexts": [{"name": "other", "context": {"cluster": "other", "user": "other"}}]}))
    lab = cluster(lab_factory, kubeconfig={"enabled": True, "path": str(local),
                                           "context": "lab"})
    plan = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan, "--diff")
    assert result.returncode == 0, result.stdout
    block = phase_block(result.stdout, "Updating kubeconfig file with the current cluster")
    ctl = lab.host("ctl-1").address
    assert f"would merge context lab (server https://{ctl}:6443, from the controller's own " \
        f"address) into {local}" in block
    assert "+  name: lab" in block or "+- name: lab" in block
    assert "client-key-data: '***'" in block
    key = base64.b64encode((lab.pki_dir / "client-admin.key").read_bytes()).decode()
    for text in (result.stdout, plan.read_text()):
        assert key not in text and "other-token-3e1f" not in text
    merge = json.loads(plan.read_text())["changes"][0]
    assert (merge["action"], merge["host"], merge["context"]) == ("merge-kubeconfig", None, "lab")

    # A restart of the first controller rewrites its admin kubeconfig: unassessed then.
    lab.exec("ctl-1", f"echo 'mirrors: {{}}' > {REGISTRIES}")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    block = phase_block(result.stdout, "Updating kubeconfig file with the current cluster")
    assert ("unassessed: reads /etc/rancher/rke2/rke2.yaml, which 'Sync Registry Config "
            "Controller' would change first") in block
    # What it would do, in the plan a reviewer signs: the context, the server, the file.
    assert (f"once it can be read, apply would merge context lab (server https://{ctl}:6443, "
            f"the admin credentials of ctl-1 ({ctl})) into {local}") in block, block
