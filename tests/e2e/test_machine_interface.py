"""The plan and its commands as a machine interface: JSON output of every command a script
calls, each held to its schema in schemas/; typed actions, and the executor refusing one
it has no handler for; label and kubeconfig changes in records and history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import schemas
from tests.digest_rule import recompute
from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_apply import engine_pid
from tests.lab import HostSpec, Lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
EDGE = "node-role.kubernetes.io/edge"


def conforms(name: str, text: str) -> Any:
    data = json.loads(text)
    errors = sorted(schemas.validator(name).iter_errors(data), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]
    return data


def lab_with_cluster_steps(lab_factory, tmp_path: Path) -> Lab:  # type: ignore[no-untyped-def]
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])

    def edit(data: dict[str, Any]) -> None:
        data["spec"]["profiles"] = {"edge": {}}
        for host in data["spec"]["hosts"][1:]:
            host["profile"] = "edge"
        data["spec"]["options"].update(
            labelProfiles=True, readyTimeoutSeconds=20, drain={"timeoutSeconds": 10},
            kubeconfig={"enabled": True, "path": str(tmp_path / "kubeconfig"),
                        "context": "lab"})

    edit_config(lab.dir / "cluster.yaml", edit)
    return lab


def test_every_command_speaks_json_held_to_its_schema(lab_factory, tmp_path: Path) -> None:
    lab = lab_with_cluster_steps(lab_factory, tmp_path)
    config = lab.dir / "cluster.yaml"
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")  # restarts: label unassessed

    valid = cargoship("validate", "-c", config, "--json")
    assert valid.returncode == 0, valid.stderr
    data = conforms("validate-output.schema.json", valid.stdout)
    assert data["valid"] is True and [h["port"] for h in data["hosts"]] == [22, 22, 22]
    broken = tmp_path / "broken.yaml"
    broken.write_text(config.read_text().replace("port: 22", "port: '22'", 1))
    invalid = cargoship("validate", "-c", broken, "--json")
    assert invalid.returncode == 1 and invalid.stderr.startswith("error: ")
    data = conforms("validate-output.schema.json", invalid.stdout)
    assert data["valid"] is False and data["errors"][0]["path"] == "spec.hosts[0].ssh.port"

    plan_file = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", config, "-out", plan_file, "--json")
    assert planned.returncode == 0, planned.stderr
    plan = conforms("plan.schema.json", planned.stdout)
    assert plan == json.loads(plan_file.read_text())  # the plan document itself
    assert "saved to" in planned.stderr and "saved to" not in planned.stdout
    wrk = {h["name"]: h for h in plan["hosts"]}
    assert [(c["action"], c["host"]) for c in plan["changes"]] == [
        ("write-file", {"name": "wrk-1", "address": wrk["wrk-1"]["address"], "port": 22}),
        ("merge-kubeconfig", None),
        ("label-node", {"name": "wrk-2", "address": wrk["wrk-2"]["address"], "port": 22})]
    assert [(u["action"], u["host"]["name"]) for u in plan["unassessed"]] == [
        ("label-node", "wrk-1")]

    applied = cargoship("apply", plan_file, "--confirm", "--json", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "] wrote " + REGISTRIES in applied.stderr  # progress for people: stderr
    result = conforms("apply-output.schema.json", applied.stdout)
    assert result["outcome"] == "applied" and result["duration_seconds"] > 0
    assert Path(result["record"]) == tmp_path / "plan.applied.json"
    assert {h["host"]["name"]: h["status"] for h in result["hosts"]} == {
        "ctl-1": "unchanged", "wrk-1": "applied", "wrk-2": "unchanged"}
    story = sorted((c["action"], c["host"]["name"] if c["host"] else None, c["planned"],
                    c["status"]) for c in result["changes"])
    assert story == [("label-node", "wrk-1", False, "done"),
                     ("label-node", "wrk-2", True, "done"),
                     ("merge-kubeconfig", None, True, "done"),
                     ("write-file", "wrk-1", True, "done")]
    nodes = {n["metadata"]["name"]: n["metadata"].get("labels", {})
             for n in lab.api("GET", "/api/v1/nodes")["items"]}
    assert nodes["wrk-1"].get(EDGE) == nodes["wrk-2"].get(EDGE) == "true"
    assert "lab" in (tmp_path / "kubeconfig").read_text()

    shown = cargoship("show", tmp_path / "plan.applied.json", "--json")
    record = conforms("apply-record.schema.json", shown.stdout)
    assert record["outcome"] == "applied" and len(record["changes"]) == 4
    on_host = conforms("apply-record.schema.json", lab.exec(
        "wrk-2", f"cat /var/lib/cargoship/applied/{plan['plan_id']}.json").stdout)
    assert on_host["host"] == {"name": "wrk-2", "address": wrk["wrk-2"]["address"], "port": 22}
    text = cargoship("show", tmp_path / "plan.applied.json").stdout
    assert "label-node node/wrk-2: done" in text and "merge-kubeconfig" in text

    history = cargoship("history", "-c", config, "--json")
    assert history.returncode == 0, history.stderr
    data = conforms("history-output.schema.json", history.stdout)
    assert data["hosts_match"] is True and data["pending_changes"] == 0
    [entry] = data["plans"]
    assert entry["state"] == "applied (current)" and entry["plan_id"] == plan["plan_id"]
    assert sorted(c["action"] for c in entry["changes"]) == [
        "label-node", "label-node", "merge-kubeconfig", "write-file"]
    lines = cargoship("history", "-c", config).stdout.splitlines()
    assert any("wrk-2 (" in line and "label-node node/wrk-2: done" in line for line in lines)
    assert any(line.strip().startswith("local: merge-kubeconfig") for line in lines)

    again = cargoship("apply", plan_file, "--confirm", "--json")
    assert again.returncode == 1 and "already applied" in again.stderr
    refused = conforms("apply-output.schema.json", again.stdout)
    assert refused["outcome"] == "refused" and "already applied" in refused["error"]


def test_a_plan_with_an_action_without_handler_is_refused_untouched(
        lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file).returncode == 0
    data = json.loads(plan_file.read_text())
    assert data["digest"] == recompute(data)  # README's rule, not the codec's code
    data["changes"][0]["action"] = "reformat-disk"
    data["digest"] = recompute(data)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    shown = cargoship("show", edited)  # readable: the digest holds, the schema too
    assert shown.returncode == 0 and "reformat-disk /etc/rancher" in shown.stdout
    pid = engine_pid(lab, "wrk-1")

    refused = cargoship("apply", edited, "--confirm")
    assert refused.returncode == 1
    address = lab.host("wrk-1").address
    assert refused.stderr == (
        f"error: plan {data['plan_id']}: change 'reformat-disk' on wrk-1 ({address}) "
        f"({REGISTRIES}) is an action this cargoship has no handler for; nothing was "
        "changed (re-plan with this version)\n")
    assert refused.stdout == ""  # not even connected: no lock, no drift check
    as_json = cargoship("apply", edited, "--confirm", "--json")
    assert json.loads(as_json.stdout)["outcome"] == "refused"
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"
    assert engine_pid(lab, "wrk-1") == pid
    for host in ("ctl-1", "wrk-1"):
        assert lab.exec(host, "ls -A /var/lib/cargoship/applied /var/lib/cargoship/backups "
                              "/run/cargoship/lock 2>/dev/null || true").stdout == ""
    assert not (tmp_path / "edited.applied.json").exists()

    # Unassessed items are typed too: one asking for an action nothing can finish.
    data = json.loads(plan_file.read_text())
    data["unassessed"] = [{"phase": "Some later phase", "host": data["changes"][0]["host"],
                           "reason": "reads x", "action": "reformat-disk"}]
    data["digest"] = recompute(data)
    edited.write_text(json.dumps(data))
    refused = cargoship("apply", edited, "--confirm")
    assert refused.returncode == 1 and "unassessed on wrk-1 (" in refused.stderr and \
        "has action 'reformat-disk', which this cargoship can't finish" in refused.stderr

    # The plan format went up a major: a 1.x plan is refused with what to do.
    data = json.loads(plan_file.read_text())
    data["format_version"] = "1.0"
    edited.write_text(json.dumps(data))
    old = cargoship("apply", edited, "--confirm")
    assert old.returncode == 1 and "plan format version 1.0 is not supported by this " \
        "cargoship (reads 2.x); re-plan with this version" in old.stderr
