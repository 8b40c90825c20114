"""Secrets appear nowhere but where they belong, end to end on lab hosts.

Unique secret values are planted: registry credentials from the environment and from files
(username, password, auth, identity_token), the cluster's admin token (in the engine's
admin kubeconfig on the controllers) and the credentials of another context in the local
kubeconfig (an OIDC id-token, a client key). Then every command a user runs is run - plan,
show in every format, apply with -v and --log-file, the apply record, history, and failing
runs (a secret changed since the plan, an engine that won't start, a secret in the wrong
place) - and every artifact and every output is searched for each secret, as is and
base64-encoded. The files meant to hold credentials must be 0600 and owned by root.
"""

from __future__ import annotations

import base64
import json
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cli import cargoship, edit_config
from tests.lab import Lab
from tests.reliability.labs import shared_lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from shared_lab(tmp_path_factory)


class Planted:
    """The secrets of one test, and every place they must not be."""

    def __init__(self, lab: Lab, tmp: Path) -> None:
        self.tmp = tmp
        self.values = {name: f"{name}-{secrets.token_hex(8)}" for name in (
            "env-user", "env-password", "env-auth", "file-password", "file-identity-token",
            "oidc-id-token", "client-key")}
        # The admin's client key, as the engines' admin kubeconfig holds it (and the
        # lab's datastore token, which no client of cargoship's ever sees).
        self.values["admin-key"] = base64.b64encode(
            (lab.pki_dir / "client-admin.key").read_bytes()).decode()
        self.values["admin-token"] = lab.token
        self.env = {"REG_USER": self.values["env-user"], "REG_PW": self.values["env-password"],
                    "REG_AUTH": self.values["env-auth"]}
        self.outputs: list[tuple[str, str]] = []  # (what, text)

    def run(self, what: str, *argv: str | Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> Any:
        result = cargoship(*argv, env={**self.env, **(env or {})}, timeout=timeout)
        self.outputs += [(f"{what} stdout", result.stdout), (f"{what} stderr", result.stderr)]
        return result

    def leaks(self, texts: list[tuple[str, str]]) -> list[str]:
        found = []
        for what, text in texts:
            for name, value in self.values.items():
                encoded = base64.b64encode(value.encode()).decode()
                for form, needle in (("as is", value), ("base64", encoded),
                                     ("base64 (unpadded)", encoded.rstrip("="))):
                    if needle in text:
                        found.append(f"{name} ({form}) in {what}")
        return found


def _secret_file(path: Path, value: str) -> str:
    path.write_text(value + "\n")
    path.chmod(0o600)
    return str(path)


def _configure(lab: Lab, planted: Planted, config: Path, kubeconfig: Path) -> None:
    tmp = planted.tmp
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "corp",
        "clusters": [{"name": "corp", "cluster": {"server": "https://corp.example:6443"}}],
        "contexts": [{"name": "corp", "context": {"cluster": "corp", "user": "corp"}}],
        "users": [{"name": "corp", "user": {
            "client-key-data": planted.values["client-key"],
            "auth-provider": {"name": "oidc", "config": {
                "id-token": planted.values["oidc-id-token"], "client-id": "kubectl"}}}}]}))
    kubeconfig.chmod(0o600)

    def edit(data: dict[str, Any]) -> None:
        spec = data["spec"]
        spec["engineConfig"]["registries"]["configs"] = {
            "reg1.lab.internal": {"auth": {"username": {"fromEnv": "REG_USER"},
                                           "password": {"fromEnv": "REG_PW"}}},
            "reg2.lab.internal": {"auth": {
                "password": {"fromFile": _secret_file(tmp / "pw", planted.values[
                    "file-password"])},
                "auth": {"fromEnv": "REG_AUTH"},
                "identity_token": {"fromFile": _secret_file(tmp / "idt", planted.values[
                    "file-identity-token"])}}},
        }
        spec["profiles"] = {"edge": {}}
        spec["hosts"][1]["profile"] = "edge"
        spec["options"].update(labelProfiles=True, readyTimeoutSeconds=8,
                               kubeconfig={"enabled": True, "path": str(kubeconfig),
                                           "context": "lab"})

    config.write_text((lab.dir / "cluster.yaml").read_text())
    edit_config(config, edit)


def _host_files(lab: Lab, pattern: str) -> list[tuple[str, str]]:
    found = []
    for host in ("ctl-1", "wrk-1"):
        listing = lab.exec(host, f"ls {pattern} 2>/dev/null", check=False).stdout.split()
        found += [(f"{host}:{path}", lab.exec(host, f"cat {path}").stdout) for path in listing]
    return found


def _mode_owner(lab: Lab, host: str, path: str) -> tuple[str, str]:
    mode, owner = lab.exec(host, f"stat -c '%a %u:%g' {path}").stdout.split()
    return mode, owner


@pytest.mark.reliability("secrets")
def test_planted_secrets_appear_in_no_artifact(lab: Lab, tmp_path: Path, tally) -> None:  # type: ignore[no-untyped-def]
    planted = Planted(lab, tmp_path)
    config, kubeconfig = tmp_path / "cluster.yaml", tmp_path / "kubeconfig"
    _configure(lab, planted, config, kubeconfig)
    plan_file, logs = tmp_path / "plan.json", tmp_path / "logs"
    logs.mkdir()

    # With nothing else to change, the kubeconfig merge is assessed: its diff shows the
    # local kubeconfig, other users' credentials included, masked.
    tally.case()
    only_kube = tmp_path / "kube-only.yaml"
    only_kube.write_text((lab.dir / "cluster.yaml").read_text())
    edit_config(only_kube, lambda d: d["spec"]["options"].update(kubeconfig={
        "enabled": True, "path": str(kubeconfig), "context": "lab"}))
    kube_plan = planted.run("plan (kubeconfig)", "plan", "-c", only_kube, "-out",
                            tmp_path / "kube-plan.json", "--diff")
    assert kube_plan.returncode == 0, kube_plan.stdout + kube_plan.stderr
    assert "would merge context lab" in kube_plan.stdout and "id-token: '***'" in \
        kube_plan.stdout, kube_plan.stdout

    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")  # a restart, so a drain
    tally.case()
    planned = planted.run("plan", "-v", "--log-file", logs / "plan.log", "plan", "-c", config,
                          "-out", plan_file)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "DEBUG" in planned.stderr  # -v really logged
    for flags in ([], ["--json"], ["--markdown"], ["--markdown", "--split-dir", tmp_path / "md"]):
        tally.case()
        shown = planted.run("show", "show", plan_file, *flags)
        assert shown.returncode == 0, shown.stderr
    tally.case()
    applied = planted.run("apply", "-v", "--log-file", logs / "apply.log", "apply", plan_file,
                          "--confirm")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    _credentials_are_root_only(lab, planted, kubeconfig)
    record = plan_file.with_name("plan.applied.json")
    for flags in ([], ["--json"]):
        tally.case()
        assert planted.run("record", "show", record, *flags).returncode == 0
    tally.case()
    assert planted.run("history", "history", "-c", config).returncode == 0

    # Failing runs. A secret changed between plan and apply:
    tally.case()
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    second = tmp_path / "second.json"
    assert planted.run("plan 2", "plan", "-c", config, "-out", second).returncode == 0
    planted.values["env-password-2"] = f"env-password-2-{secrets.token_hex(8)}"
    changed = planted.run("apply (secret changed)", "-v", "apply", second, "--confirm",
                          env={"REG_PW": planted.values["env-password-2"]})
    assert changed.returncode == 1 and "changed since the plan was made" in changed.stderr
    # An engine that won't start with the new file: rolled back, with a per-host account.
    tally.case()
    edit_config(config, lambda d: d["spec"]["engineConfig"]["registries"]["mirrors"].update(
        {"quay.io": {"endpoint": ["https://mirror.broken.invalid"]}}))
    third = tmp_path / "third.json"
    assert planted.run("plan 3", "plan", "-c", config, "-out", third).returncode == 0
    # (--log-file, not -v: the debug log of a failed host carries its traceback, which
    # the command's stderr must not.)
    failed = planted.run("apply (engine fails)", "--log-file", logs / "failed.log", "apply",
                         third, "--confirm")
    assert failed.returncode == 1 and "rolled back" in failed.stdout, failed.stdout
    # A secret written where it doesn't belong:
    tally.case()
    misplaced = tmp_path / "misplaced.yaml"
    misplaced.write_text(config.read_text())
    edit_config(misplaced, lambda d: d["spec"]["engineConfig"]["registries"]["configs"][
        "reg1.lab.internal"]["auth"].update(password={"fromEnv": "REG_PW", "value":
                                                      planted.values["env-password"]}))
    assert planted.run("validate (misplaced)", "validate", "-c", misplaced).returncode == 1

    artifacts = [(str(p), p.read_text(errors="replace")) for p in sorted(tmp_path.rglob("*"))
                 if p.is_file() and p not in (kubeconfig, tmp_path / "pw", tmp_path / "idt",
                                              config, misplaced, only_kube)]
    assert {Path(a).name for a, _ in artifacts} >= {
        "plan.json", "plan.applied.json", "plan.log", "apply.log", "failed.log", "plan-1.md",
        "second.json", "third.json", "third.applied.json", "kube-plan.json"}
    on_hosts = _host_files(lab, "/var/lib/cargoship/applied/*.json /run/cargoship/*")
    assert len([a for a in on_hosts if "/applied/" in a[0]]) >= 4
    assert planted.leaks(planted.outputs + artifacts + on_hosts) == []



def _credentials_are_root_only(lab: Lab, planted: Planted, kubeconfig: Path) -> None:
    """Where credentials do belong, only root may read them."""
    for host in ("ctl-1", "wrk-1"):
        content = lab.exec(host, f"cat {REGISTRIES}").stdout
        assert planted.values["file-password"] in content
        assert _mode_owner(lab, host, REGISTRIES) == ("600", "0:0")
        backups = lab.exec(host, "find /var/lib/cargoship/backups -type f").stdout.split()
        assert backups
        for backup in backups:
            assert _mode_owner(lab, host, backup) == ("600", "0:0"), backup
    merged = yaml.safe_load(kubeconfig.read_text())
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    assert {u["name"]: u["user"] for u in merged["users"]}["lab"]["client-key-data"] == \
        planted.values["admin-key"]
    assert json.dumps(merged).count(planted.values["oidc-id-token"]) == 1  # kept, untouched
