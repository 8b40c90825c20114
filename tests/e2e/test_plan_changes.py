"""`cargoship plan` assesses the mutating phases against live hosts, read-only."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_plan_preflight import phase_block
from tests.lab import HostSpec

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
# What the plan must leave untouched on every host, and how to see a change to it.
# Every file's name, type, size, mtime, mode and owner, but the etcd member's data (its
# WAL and database change with every write to the API: the nodes' heartbeats).
FINGERPRINT = ("find /etc /var/lib/rancher /tmp /run -path '*/server/db/etcd' -prune -o "
               "-printf '%p %y %s %T@ %m %U\\n' 2>/dev/null | sort | sha256sum")


def small_cluster(lab_factory):  # type: ignore[no-untyped-def]
    # Two servers: on an external datastore (etcd=False), as two etcd members have no
    # quorum to spare and a plan to restart either is refused (test_quorum_gate.py).
    return lab_factory([HostSpec("ctl-1", "controller"), HostSpec("ctl-2", "controller"),
                        HostSpec("wrk-1", "worker"), HostSpec("wrk-2", "worker")], etcd=False)


def changes(plan_file: Path) -> list[tuple[str, str, str, bool]]:
    data = json.loads(plan_file.read_text())
    return [(c["host"]["name"], c["action"], c["target"], c["restart"])
            for c in data["changes"]]


def test_in_sync_cluster_has_no_changes(healthy_lab) -> None:
    result = cargoship("plan", "-c", healthy_lab.dir / "cluster.yaml", "--detailed-exitcode")
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith(
        "No changes. Every host matches the desired engine config.\n")
    assert "Sync Registry Config Controller  [reported, not run] no changes" in result.stdout
    assert "Sync Registry Config Worker  [reported, not run] no changes" in result.stdout


def test_drifted_registries_on_one_worker(lab_factory, tmp_path: Path) -> None:
    lab = small_cluster(lab_factory)
    lab.exec("wrk-2", f"printf 'mirrors:\\n  docker.io:\\n    endpoint: [\"https://evil.example\"]"
                      f"\\n' > {REGISTRIES}")
    plan = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan,
                       "--detailed-exitcode", "--diff")
    assert result.returncode == 2, result.stdout
    assert changes(plan) == [("wrk-2", "write-file", REGISTRIES, True)]
    block = phase_block(result.stdout, "Sync Registry Config Worker")
    assert f"write-file {REGISTRIES} (drain + restart)" in block
    assert "-    - https://evil.example" in block
    assert "+    - https://mirror.lab.internal:5000" in block
    assert "Sync Registry Config Controller  [reported, not run] no changes" in result.stdout
    # The servers' config names their datastore: the plan says why etcd gates nothing.
    assert "external datastore (datastore-endpoint): not gated on etcd" in result.stdout
    data = json.loads(plan.read_text())
    assert data["changes"][0]["drain"] is True
    assert data["summary"]["hosts_changed"] == 1


def test_audit_policy_changes_controllers_only(lab_factory, tmp_path: Path) -> None:
    lab = small_cluster(lab_factory)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        auditPolicy={"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                     "rules": [{"level": "Metadata"}]}))
    plan = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan).returncode == 0
    found = changes(plan)
    assert {host for host, *_ in found} == {"ctl-1", "ctl-2"}
    assert sorted({target for _, _, target, _ in found}) == [
        "/etc/rancher/rke2/cargoship-audit-policy.yaml",
        "/etc/rancher/rke2/config.yaml.d/50-cargoship.yaml"]
    assert all(action == "write-file" and restart for _, action, _, restart in found)


def test_chart_values_are_in_place_on_controllers(lab_factory, tmp_path: Path) -> None:
    lab = small_cluster(lab_factory)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 3}}}}))
    plan = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan)
    target = "/var/lib/rancher/rke2/server/manifests/cargoship-rke2-ingress-nginx.yaml"
    assert changes(plan) == [("ctl-1", "write-file-in-place", target, False),
                             ("ctl-2", "write-file-in-place", target, False)]
    assert json.loads(plan.read_text())["summary"]["restarts"] == 0
    assert f"write-file-in-place {target} (in place)" in result.stdout


def test_plan_writes_nothing_and_takes_no_lock(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"),
                       HostSpec("wrk-1", "worker", user="alice", sudo=True)])
    lab.exec("wrk-1", f"echo 'mirrors: {{}}' > {REGISTRIES}")  # so there is a change to plan

    def fingerprints() -> dict[str, str]:
        return {h.name: lab.exec(h.name, FINGERPRINT).stdout for h in lab.hosts}

    before = fingerprints()
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", tmp_path / "p.json")
    assert result.returncode == 0
    assert "write-file /etc/rancher/rke2/registries.yaml" in result.stdout
    assert fingerprints() == before
    for host in lab.hosts:
        assert lab.exec(host.name, "test -e /run/cargoship/lock", check=False).returncode == 1


def test_a_live_lock_of_another_run_is_a_warning(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    holder = {"id": "lk-1", "holder": "bob@ci-runner", "pid": 4242, "plan_id": "p" * 32,
              "since": "2026-12-01T03:00:00Z"}
    lab.exec("ctl-1", f"mkdir -p /run/cargoship && echo '{json.dumps(holder)}' > "
                      "/run/cargoship/lock")
    lab.exec("wrk-1", f"mkdir -p /run/cargoship && echo '{json.dumps(holder)}' > "
                      "/run/cargoship/lock && touch -d '-5 min' /run/cargoship/lock")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 0
    assert "Warnings (1):" in result.stdout
    assert ("ctl-1 (" in result.stdout.split("Warnings (1):")[1]
            and "held by another run: bob@ci-runner (lock lk-1" in result.stdout)
    assert "stale lock would be taken over: bob@ci-runner" in phase_block(
        result.stdout, "Acquire exclusive host lock")


def test_show_renders_checks_and_refuses(healthy_lab, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", healthy_lab.dir / "cluster.yaml", "-out", plan)
    assert planned.returncode == 0
    shown = cargoship("show", plan)
    assert shown.returncode == 0
    # show prints what plan printed (minus plan's own trailing "saved to" line), then
    # the plan's signatures.
    rendered, signatures = shown.stdout.split("\nSignatures: ", 1)
    assert planned.stdout.startswith(rendered) and signatures == "none\n"
    as_json = cargoship("show", plan, "--json")
    assert json.loads(as_json.stdout) == json.loads(plan.read_text())
    markdown = cargoship("show", plan, "--markdown").stdout
    assert markdown.startswith(f"### cargoship plan for `{healthy_lab.write_cluster_yaml and ''}")\
        or markdown.startswith("### cargoship plan for `lab-")
    assert "| # | phase | dry run | outcome |" in markdown

    truncated = tmp_path / "truncated.json"
    truncated.write_text(plan.read_text()[:500])
    refused = cargoship("show", truncated)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"error: {truncated}: not valid JSON at line "
        + refused.stderr.split("at line ")[1].split("\n")[0]]
    assert "truncated or edited?" in refused.stderr

    edited = tmp_path / "edited.json"
    data = json.loads(plan.read_text())
    data["hosts"][0]["address"] = "10.66.6.6"
    edited.write_text(json.dumps(data))
    refused = cargoship("show", edited)
    assert refused.returncode == 1 and "integrity digest does not match" in refused.stderr

    future = tmp_path / "future.json"
    data = json.loads(plan.read_text())
    data["format_version"] = "3.0"
    future.write_text(json.dumps(data))
    refused = cargoship("show", future)
    assert refused.returncode == 1 and "plan format version 3.0 is not supported" in \
        refused.stderr
    missing = cargoship("show", tmp_path / "nope.json")
    assert missing.returncode == 1 and "cannot read plan" in missing.stderr


def test_secrets_never_reach_the_plan_or_the_output(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    secret_env, secret_file = "env-secret-7f3a9c", "file-secret-91bd02"
    # Beside the cluster config: a secret file elsewhere needs allowAnyPath (issue 25).
    (lab.dir / "token").write_text(secret_file + "\n")
    lab.exec("ctl-1", f"printf 'configs:\\n  r.example.com:\\n    auth:\\n      password: "
                      f"live-secret-55e1\\n' > {REGISTRIES}")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"]["registries"]
                .update(configs={"r.example.com": {"auth": {
                    "username": "robot", "password": {"fromEnv": "CS_E2E_PW"},
                    "identity_token": {"fromFile": str(lab.dir / "token")}}}}))
    plan = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan,
                       env={"CS_E2E_PW": secret_env})
    assert result.returncode == 0, result.stderr
    # Led by the change by key, masked exactly as the diff masks it.
    assert ('~ configs."r.example.com".auth.password: "***" -> "*** (changed)"'
            in result.stdout)
    assert '+ configs."r.example.com".auth.username: "robot"' in result.stdout
    assert "password: '*** (changed)'" in cargoship("show", plan, "--diff").stdout
    artifacts = [result.stdout, result.stderr, plan.read_text(),
                 cargoship("show", plan).stdout, cargoship("show", plan, "--markdown").stdout,
                 cargoship("show", plan, "--full").stdout,
                 cargoship("show", plan, "--markdown", "--full").stdout]
    for text in artifacts:
        for secret in (secret_env, secret_file, "live-secret-55e1"):
            assert secret not in text
