"""Host content never runs on the operator's machine: a controller's admin kubeconfig with
an exec credential plugin, a proxy and file references (issue 25, point 1).

The admin kubeconfig comes from a controller; root there writes what it likes into it.
The official client runs a `users[].user.exec` plugin as a local command, with
cargoship's whole environment; merge-kubeconfig copied it into the operator's own
kubeconfig for kubectl to run later. cargoship now takes only the server, the inline CA
and the inline client certificate/key or token from it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec

ADMIN = "/etc/rancher/rke2/rke2.yaml"
EDGE = "node-role.kubernetes.io/edge"


def _poison(lab, sentinel: Path) -> None:  # type: ignore[no-untyped-def]
    """ctl-1's admin kubeconfig, as root on ctl-1 would rewrite it."""
    admin = json.loads(lab.exec("ctl-1", f"cat {ADMIN}").stdout)
    admin["users"][0]["user"]["exec"] = {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/bin/sh",
        "args": ["-c", f"touch {sentinel}; echo '{{\"apiVersion\": \"client.authentication"
                       ".k8s.io/v1beta1\", \"kind\": \"ExecCredential\", \"status\": "
                       "{\"token\": \"x\"}}'"]}
    admin["users"][0]["user"]["client-key"] = "/root/.ssh/id_ed25519"
    admin["clusters"][0]["cluster"]["proxy-url"] = "http://203.0.113.9:3128"
    admin["clusters"][0]["cluster"]["certificate-authority"] = "/etc/passwd"
    admin["clusters"][0]["extensions"] = [{"name": "x", "extension": {"a": 1}}]
    lab.exec("ctl-1", f"cat > {ADMIN}", input=json.dumps(admin))


@pytest.mark.reliability("trust: host content never runs on the operator's machine")
def test_an_exec_plugin_in_a_controllers_kubeconfig_never_runs_nor_is_merged(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    local = tmp_path / "kubeconfig"

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}}
        data["spec"]["hosts"][1]["profile"] = "edge"
        data["spec"]["options"].update(labelProfiles=True, kubeconfig={
            "enabled": True, "path": str(local), "context": "lab"})

    edit_config(lab.dir / "cluster.yaml", edit)
    sentinel = tmp_path / "exec-plugin-ran"
    _poison(lab, sentinel)
    plan = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not sentinel.exists(), "plan ran the host's exec plugin on this machine"
    actions = sorted(c["action"] for c in json.loads(plan.read_text())["changes"])
    assert actions == ["label-node", "merge-kubeconfig"], actions
    for text in (result.stdout, plan.read_text()):
        assert "/bin/sh" not in text and "exec-plugin-ran" not in text
        assert "203.0.113.9" not in text and "/etc/passwd" not in text

    applied = cargoship("apply", plan, "--confirm")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert not sentinel.exists(), "apply ran the host's exec plugin on this machine"
    merged = yaml.safe_load(local.read_text())
    user = next(u["user"] for u in merged["users"] if u["name"] == "lab")
    cluster = next(c["cluster"] for c in merged["clusters"] if c["name"] == "lab")
    assert sorted(user) == ["client-certificate-data", "client-key-data"], user
    assert sorted(cluster) == ["certificate-authority-data", "server"], cluster
    node = lab.api("GET", "/api/v1/nodes/wrk-1")
    assert node["metadata"]["labels"][EDGE] == "true"  # it still works, with what it needs


@pytest.mark.reliability("trust: host content never runs on the operator's machine")
def test_a_kubeconfig_with_only_an_exec_plugin_is_a_problem_not_a_command(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        kubeconfig={"enabled": True, "path": str(tmp_path / "kubeconfig")}))
    sentinel = tmp_path / "exec-plugin-ran"
    _poison(lab, sentinel)
    admin = json.loads(lab.exec("ctl-1", f"cat {ADMIN}").stdout)
    for key in ("client-certificate-data", "client-key-data"):
        del admin["users"][0]["user"][key]
    lab.exec("ctl-1", f"cat > {ADMIN}", input=json.dumps(admin))
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "admin kubeconfig has no inline client certificate and key, nor a token " \
           "(not used: client-key, exec)" in result.stdout, result.stdout
    assert not sentinel.exists()
