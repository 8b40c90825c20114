"""Ways in: a bastion host, the one-shot engine-config-sync --dry-run, and k3s clusters."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_plan_preflight import phase_block
from tests.lab import HostSpec, Lab


def behind_bastion(lab: Lab) -> None:
    """Every host but the lab's "bastion" reached through it, and only through it: the
    direct path to their sshd is closed. The bastion's key is in the same known_hosts,
    since strict checking applies to every hop."""
    jump = lab.host("bastion").address

    def via_bastion(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["hosts"] = [h for h in data["spec"]["hosts"]
                                 if h["ssh"]["address"] != jump]
        for host in data["spec"]["hosts"]:
            host["ssh"]["bastion"] = {"address": jump,
                                      "keyPath": str(lab.dir / "id_ed25519")}

    edit_config(lab.dir / "cluster.yaml", via_bastion)
    rule = ("nft add table inet viajump && nft add chain inet viajump input "
            "'{ type filter hook input priority 0; policy accept; }' && "
            f"nft add rule inet viajump input tcp dport 22 ip saddr != {jump} drop")
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda h: lab.exec(h.name, rule),
                      [h for h in lab.hosts if h.name != "bastion"]))


def test_hosts_behind_a_bastion(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("bastion", "worker", engine_installed=False)])
    behind_bastion(lab)
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


def test_a_hundred_hosts_share_one_connection_to_their_bastion(lab_factory) -> None:
    # Connecting 128 hosts at once (the default concurrency) with a connection each to a
    # bastion running OpenSSH's default MaxStartups 10:30:100 lost about a third of them
    # ("Error reading SSH protocol banner"). No Kubernetes API: a plan does not need it,
    # and 100 engines posting node status would load the machine more than the plan.
    specs = [HostSpec("ctl-1", "controller")]
    specs += [HostSpec(f"wrk-{i}", "worker") for i in range(1, 100)]
    lab = lab_factory([*specs, HostSpec("bastion", "worker", engine_installed=False)],
                      kube_api=False)
    behind_bastion(lab)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        concurrency={"hosts": 128, "workers": 2}))
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert result.returncode == 0, result.stdout
    assert phase_block(result.stdout, "Connect to hosts").count("connected as root to") == 100
    assert lab.ssh_logins("bastion") == 1


def test_proxyjump_in_ssh_config_reaches_hosts_through_the_bastion(lab_factory,
                                                                   tmp_path: Path) -> None:
    # No bastion in cluster.yaml: ~/.ssh/config's ProxyJump alone gets through, with one
    # connection to the jump host for both hosts, its key checked in the same known_hosts.
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("bastion", "worker", engine_installed=False)])
    behind_bastion(lab)
    edit_config(lab.dir / "cluster.yaml", lambda d: [h["ssh"].pop("bastion")
                                                      for h in d["spec"]["hosts"]])
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    targets = " ".join(h.address for h in lab.hosts if h.name != "bastion")
    (home / ".ssh" / "config").write_text(
        f"Host jump\n  HostName {lab.host('bastion').address}\n  User root\n"
        f"  IdentityFile {lab.dir / 'id_ed25519'}\n"
        f"Host {targets}\n  ProxyJump jump\n")
    before = lab.ssh_logins("bastion")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode",
                       "--verbose", env={"HOME": str(home)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert phase_block(result.stdout, "Connect to hosts").count("connected as root to") == 2
    assert lab.ssh_logins("bastion") - before == 1


def test_apply_holds_one_connection_per_host(lab_factory, tmp_path: Path) -> None:
    # The drift check used to connect to every host again, beside the sessions held for
    # the rollout: two logins per host, each with a connection of its own to the bastion.
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("bastion", "worker", engine_installed=False)])
    behind_bastion(lab)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}}))
    plan = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan)
    assert planned.returncode == 0, planned.stdout
    before = {h.name: lab.ssh_logins(h.name) for h in lab.hosts}
    result = cargoship("apply", plan, "--confirm")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " applied; record: " in result.stdout
    assert {h.name: lab.ssh_logins(h.name) - before[h.name] for h in lab.hosts} == \
        {"ctl-1": 1, "wrk-1": 1, "bastion": 1}


def test_engine_config_sync_dry_run_reports_like_plan(healthy_lab) -> None:
    dry = cargoship("engine-config-sync", "-c", healthy_lab.dir / "cluster.yaml", "--dry-run")
    assert dry.returncode == 0, dry.stdout
    plan = cargoship("plan", "-c", healthy_lab.dir / "cluster.yaml")

    def strip(text: str) -> list[str]:
        # The plan's id, its run time (however long a loaded machine takes) and host keys
        # differ between runs; nothing else may.
        return [re.sub(r" \(\d+(\.\d+)?s\)$", "", line) for line in text.splitlines()
                if not line.startswith("cargoship plan ") and "host key" not in line]

    assert strip(dry.stdout) == strip(plan.stdout)


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

    # A port there that is no port: the host's one line says which file setting, not
    # int()'s words.
    with (home / ".ssh" / "config").open("a") as config:
        config.write("  Port 22x\n")
    bad = cargoship("plan", "-c", lab.dir / "cluster.yaml", env={"HOME": str(home)})
    assert bad.returncode == 1, bad.stdout
    assert "prod-ctl-1: Connect to hosts: cannot connect: ssh_config: Port of prod-ctl-1: " \
           "'22x' is not a port (1-65535)" in bad.stdout, bad.stdout


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
