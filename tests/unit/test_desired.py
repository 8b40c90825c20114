"""Desired files per distro and role, and structural comparison with what hosts have."""

from __future__ import annotations

from pathlib import Path

import yaml

from planner.config.model import ClusterConfig, Engine, HostConfig, SshConfig
from planner.config.secrets import Secret
from planner.desired.compare import compare
from planner.desired.engine_files import desired_files
from planner.facts.file_reads import LiveFile
from tests.cpu_deadline import deadline

SALT = b"salt"


def config(distro: str = "rke2", **engine: object) -> ClusterConfig:
    version = "v1.30.4+rke2r1" if distro == "rke2" else "v1.30.4+k3s1"
    return ClusterConfig(Path("c.yaml"), "t", Engine(distro, version),  # type: ignore[arg-type]
                         (HostConfig(0, "controller", SshConfig("10.0.0.1")),),
                         engine_config=dict(engine))


REGISTRIES = {"mirrors": {"docker.io": {"endpoint": ["https://m.example.com"]}},
              "configs": {"m.example.com": {"auth": {"username": "robot",
                                                     "password": Secret("env:P", "pw-1")}}}}
AUDIT = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}


def test_workers_get_registries_only_controllers_everything() -> None:
    cfg = config(registries=REGISTRIES, auditPolicy=AUDIT,
                 charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}})
    worker = desired_files(cfg, "worker")
    controller = desired_files(cfg, "controller")
    assert [(f.path, f.restart) for f in worker] == [
        ("/etc/rancher/rke2/registries.yaml", True)]
    assert [(f.path, f.restart) for f in controller] == [
        ("/etc/rancher/rke2/registries.yaml", True),
        ("/etc/rancher/rke2/cargoship-audit-policy.yaml", True),
        ("/etc/rancher/rke2/config.yaml.d/50-cargoship.yaml", True),
        ("/var/lib/rancher/rke2/server/manifests/cargoship-rke2-ingress-nginx.yaml", False),
    ]
    assert yaml.safe_load(controller[2].content()) == {
        "audit-policy-file": "/etc/rancher/rke2/cargoship-audit-policy.yaml"}
    assert all(f.mode == 0o600 for f in controller)


def test_k3s_paths_and_dropin_flags() -> None:
    cfg = config("k3s", auditPolicy=AUDIT)
    files = desired_files(cfg, "controller")
    assert [f.path for f in files] == ["/etc/rancher/k3s/cargoship-audit-policy.yaml",
                                       "/etc/rancher/k3s/config.yaml.d/50-cargoship.yaml"]
    # Appended (`+`) to the flags config.yaml gives, never replacing them.
    dropin = yaml.safe_load(files[1].content())
    assert list(dropin) == ["kube-apiserver-arg+"]
    assert "audit-policy-file=/etc/rancher/k3s/cargoship-audit-policy.yaml" in \
        dropin["kube-apiserver-arg+"]


def test_same_structure_other_formatting_is_no_change() -> None:
    [wanted] = desired_files(config(registries=REGISTRIES), "worker")
    live = ("configs:\n  m.example.com: {auth: {password: pw-1, username: robot}}\n"
            "mirrors:\n  docker.io:\n    endpoint:\n    - https://m.example.com\n")
    assert compare(wanted, LiveFile(wanted.path, True, live.encode(), 0o600, "0:0"), SALT) is None


def test_changed_secret_is_a_change_with_the_value_masked() -> None:
    [wanted] = desired_files(config(registries=REGISTRIES), "worker")
    live = yaml.safe_dump({**REGISTRIES, "configs": {"m.example.com": {"auth": {
        "username": "robot", "password": "old-secret-value"}}}})
    change = compare(wanted, LiveFile(wanted.path, True, live.encode(), 0o600, "0:0"), SALT)
    assert change is not None and change.action == "update"
    assert "old-secret-value" not in change.diff and "pw-1" not in change.diff
    assert "-      password: '***'" in change.diff
    assert "+      password: '*** (changed)'" in change.diff
    assert change.structure == (
        "values changed: root['configs']['m.example.com']['auth']['password']",)
    assert change.before != change.after and change.after.startswith("hmac-sha256:")


def test_absent_file_is_created_and_wrong_mode_is_an_update() -> None:
    [wanted] = desired_files(config(registries=REGISTRIES), "worker")
    created = compare(wanted, LiveFile(wanted.path, False), SALT)
    assert created is not None and created.action == "create" and created.before is None
    same = wanted.content().encode()
    loose = compare(wanted, LiveFile(wanted.path, True, same, 0o644, "0:0"), SALT)
    assert loose is not None and "mode 644 -> 600" in loose.diff


def test_chart_values_compare_by_structure_inside_values_content() -> None:
    cfg = config(charts={"traefik": {"values": {"a": 1, "b": [1, 2]}}})
    [wanted] = desired_files(cfg, "controller")
    live = {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
            "metadata": {"namespace": "kube-system", "name": "traefik"},
            "spec": {"valuesContent": "b:\n- 1\n- 2\na: 1\n"}}
    same = compare(wanted, LiveFile(wanted.path, True, yaml.safe_dump(live).encode(), 0o600,
                                    "0:0"), SALT)
    assert same is None
    live["spec"]["valuesContent"] = "a: 2\nb: [1, 2]\n"  # type: ignore[index]
    changed = compare(wanted, LiveFile(wanted.path, True, yaml.safe_dump(live).encode(), 0o600,
                                       "0:0"), SALT)
    assert changed is not None and "valuesContent']['a']" in changed.structure[0]
    assert not wanted.restart


def test_unparseable_live_file_is_replaced_without_showing_it() -> None:
    [wanted] = desired_files(config(registries=REGISTRIES), "worker")
    change = compare(wanted, LiveFile(wanted.path, True, b"{{{{ password: leaked", 0o600, "0:0"),
                     SALT)
    assert change is not None and "leaked" not in change.diff
    assert "not valid YAML" in change.diff


def test_owner_or_group_other_than_root_is_a_change_like_mode() -> None:
    [wanted] = desired_files(config(registries=REGISTRIES), "worker")
    same = wanted.content().encode()
    for owner in ("1000:0", "0:1000"):
        change = compare(wanted, LiveFile(wanted.path, True, same, 0o600, owner), SALT)
        assert change is not None and change.action == "update"
        assert f"owner {owner} -> 0:0" in change.diff
    both = compare(wanted, LiveFile(wanted.path, True, same, 0o644, "1000:1000"), SALT)
    assert both is not None and "mode 644 -> 600, owner 1000:1000 -> 0:0" in both.diff


def test_alias_bomb_in_a_live_file_is_refused_quickly() -> None:
    [wanted] = desired_files(config(registries=REGISTRIES), "worker")
    bomb = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(8))
    assert len(bomb) < 600
    # Bounded: with the refusal gone, the bomb was expanded for minutes (and gigabytes)
    # before any assertion could say so, and the mutation suite waited out its timeout.
    with deadline(5, "comparing a live alias bomb"):
        change = compare(wanted, LiveFile(wanted.path, True, bomb.encode(), 0o600, "0:0"),
                         SALT)
    assert change is not None and "refused" in change.diff and "x, x" not in change.diff


def test_credential_like_keys_in_any_file_are_masked() -> None:
    cfg = config(charts={"c": {"values": {"auth": {"apiToken": "tok-1", "clientSecret": "s-1",
                                                   "plain": "visible"}}}})
    [wanted] = desired_files(cfg, "controller")
    live = {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
            "metadata": {"namespace": "kube-system", "name": "c"},
            "spec": {"valuesContent": "auth: {apiToken: tok-0, clientSecret: s-0}\n"}}
    change = compare(wanted, LiveFile(wanted.path, True, yaml.safe_dump(live).encode(), 0o600,
                                      "0:0"), SALT)
    assert change is not None
    assert "tok-" not in change.diff and "s-1" not in change.diff and "s-0" not in change.diff
