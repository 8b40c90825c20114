"""Ways in: a bastion host, the one-shot engine-config-sync --dry-run, and k3s clusters."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_plan_preflight import phase_block
from tests.lab import HostSpec


def test_hosts_behind_a_bastion(lab_factory) -> None:
    # The bastion is a lab host outside the cluster; its key is in the same known_hosts,
    # since strict checking applies to every hop.
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("bastion", "worker", engine_installed=False)])
    jump = lab.host("bastion").address

    def via_bastion(data: dict) -> None:  # type: ignore[type-arg]
        del data["spec"]["hosts"][2]
        for host in data["spec"]["hosts"]:
            host["ssh"]["bastion"] = {"address": jump,
                                      "keyPath": str(lab.dir / "id_ed25519")}

    edit_config(lab.dir / "cluster.yaml", via_bastion)
    # Only the bastion can reach the hosts' sshd: the direct path is closed.
    for host in ("ctl-1", "wrk-1"):
        lab.exec(host, "nft add table inet viajump && nft add chain inet viajump input "
                       "'{ type filter hook input priority 0; policy accept; }' && "
                       f"nft add rule inet viajump input tcp dport 22 ip saddr != {jump} drop")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode",
                       "--verbose")
    assert result.returncode == 0, result.stdout
    assert "connected as root to" in phase_block(result.stdout, "Connect to hosts")
    # Without the bastion the same hosts are unreachable.
    edit_config(lab.dir / "cluster.yaml", lambda d: [h["ssh"].pop("bastion")
                                                      for h in d["spec"]["hosts"]])
    data_path = lab.dir / "cluster.yaml"
    edit_config(data_path, lambda d: d["spec"]["options"].update(
        ssh={"connectTimeoutSeconds": 2}))
    direct = cargoship("plan", "-c", data_path)
    assert direct.returncode == 1 and "cannot connect to" in direct.stdout


def test_engine_config_sync_dry_run_reports_like_plan(healthy_lab) -> None:
    dry = cargoship("engine-config-sync", "-c", healthy_lab.dir / "cluster.yaml", "--dry-run")
    assert dry.returncode == 0, dry.stdout
    plan = cargoship("plan", "-c", healthy_lab.dir / "cluster.yaml")
    strip = [line for line in dry.stdout.splitlines() if not line.startswith("cargoship plan ")
             and "(0." not in line and "(1." not in line and "host key" not in line]
    assert strip == [line for line in plan.stdout.splitlines()
                     if not line.startswith("cargoship plan ") and "(0." not in line
                     and "(1." not in line and "host key" not in line]


def test_k3s_cluster_paths(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("server-1", "controller"), HostSpec("agent-1", "worker")],
                      distro="k3s")
    in_sync = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode",
                        "--verbose")
    assert in_sync.returncode == 0, in_sync.stdout
    assert "k3s v1.30.4+k3s1 installed (as pinned), service running" in in_sync.stdout
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"traefik": {"values": {"ports": {"web": {"port": 8080}}}}},
        podSecurity={"apiVersion": "apiserver.config.k8s.io/v1",
                     "kind": "AdmissionConfiguration",
                     "plugins": [{"name": "PodSecurity", "configuration": {
                         "apiVersion": "pod-security.admission.config.k8s.io/v1",
                         "kind": "PodSecurityConfiguration",
                         "defaults": {"enforce": "restricted"}}}]}))
    plan = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan).returncode == 0
    targets = sorted((c["host"]["name"], c["target"], c["restart"])
                     for c in json.loads(plan.read_text())["changes"])
    assert targets == [
        ("server-1", "/etc/rancher/k3s/cargoship-pod-security.yaml", True),
        ("server-1", "/etc/rancher/k3s/config.yaml.d/50-cargoship.yaml", True),
        ("server-1", "/var/lib/rancher/k3s/server/manifests/cargoship-traefik.yaml", False),
    ]


def test_ssh_config_aliases_and_identity_are_honoured(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller", user="alice")])
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host prod-ctl-1\n  HostName {lab.host('ctl-1').address}\n  User alice\n"
        f"  IdentityFile {lab.dir / 'id_ed25519'}\n")
    (home / ".ssh" / "known_hosts").write_text((lab.dir / "known_hosts").read_text())

    def by_alias(data: dict) -> None:  # type: ignore[type-arg]
        # Only the alias: address, user, key and known_hosts all come from ~/.ssh.
        data["spec"]["hosts"][0]["ssh"] = {"address": "prod-ctl-1"}

    edit_config(lab.dir / "cluster.yaml", by_alias)
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose",
                       env={"HOME": str(home)})
    assert result.returncode == 0, result.stdout
    assert "connected as alice to prod-ctl-1:22" in result.stdout
    assert "alice with passwordless sudo" in result.stdout
    assert "hostname ctl-1" in result.stdout


def test_debug_log_file_has_details_and_no_secrets(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"]["registries"]
                .update(configs={"r.example.com": {"auth": {"password": {"fromEnv": "PW"}}}}))
    log = tmp_path / "debug.log"
    result = cargoship("--log-file", log, "plan", "-c", lab.dir / "cluster.yaml",
                       env={"PW": "log-secret-93a1"})
    assert result.returncode == 0, result.stderr
    text = log.read_text()
    assert "DEBUG cargoship.planner: phase 1 Connect to hosts" in text
    assert "log-secret-93a1" not in text and "log-secret-93a1" not in result.stdout
    assert result.stderr == ""  # debug goes to the file, not the terminal
