"""A label cargoship set on a node whose host no longer has that profile is planned for
removal and removed (issue 28): "No changes" used to be said with the old
node-role.kubernetes.io/<profile> label left on the node. Only labels cargoship set (its
cargoship.io/labels annotation, or a profile cluster.yaml names) are ever removed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec


def plan_apply(lab, tmp_path: Path, name: str) -> tuple[dict, str]:  # type: ignore[no-untyped-def,type-arg]
    plan_file = tmp_path / f"{name}.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    shown = cargoship("show", plan_file, "--json")
    return json.loads(shown.stdout), applied.stdout


def test_a_host_leaving_its_profile_loses_the_label_cargoship_set(lab_factory,
                                                                   tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])

    def profiles(data: dict, hosts: dict[int, str]) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}, "gpu": {}}
        for index, entry in enumerate(data["spec"]["hosts"]):
            entry.pop("profile", None)
            if index in hosts:
                entry["profile"] = hosts[index]
        data["spec"]["options"].update(labelProfiles=True)

    edit_config(lab.dir / "cluster.yaml", lambda d: profiles(d, {1: "edge", 2: "edge"}))
    plan_apply(lab, tmp_path, "first")
    # A label of the user's own, under the same prefix: never cargoship's to remove.
    lab.api("PATCH", "/api/v1/nodes/wrk-1", {"metadata": {"labels": {
        "node-role.kubernetes.io/storage": "true"}}}, "application/merge-patch+json")
    node = lab.api("GET", "/api/v1/nodes/wrk-1")["metadata"]
    assert node["annotations"]["cargoship.io/labels"] == "node-role.kubernetes.io/edge"
    # wrk-1 leaves its profile, wrk-2 moves to another one.
    edit_config(lab.dir / "cluster.yaml", lambda d: profiles(d, {2: "gpu"}))
    plan, applied = plan_apply(lab, tmp_path, "second")
    removals = sorted((c["node"], c["label"]) for c in plan["changes"]
                      if c["action"] == "unlabel-node")
    assert removals == [("wrk-1", "node-role.kubernetes.io/edge"),
                        ("wrk-2", "node-role.kubernetes.io/edge")], plan["changes"]
    assert "removed label node-role.kubernetes.io/edge from node wrk-1" in applied
    labels = {n: lab.api("GET", f"/api/v1/nodes/{n}")["metadata"]["labels"]
              for n in ("wrk-1", "wrk-2")}
    assert "node-role.kubernetes.io/edge" not in labels["wrk-1"]
    assert labels["wrk-1"]["node-role.kubernetes.io/storage"] == "true"
    assert "node-role.kubernetes.io/edge" not in labels["wrk-2"]
    assert labels["wrk-2"]["node-role.kubernetes.io/gpu"] == "true"
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert again.returncode == 0 and "No changes" in again.stdout, again.stdout
