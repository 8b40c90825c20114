"""Files cargoship would write that someone else owns (issue 28): a HelmChartConfig in a
nested manifest directory (the deploy controller walks server/manifests recursively, as
Rancher's manifests/rancher/ relies on), and a Rancher-managed cluster, whose
rancher-system-agent owns config.yaml.d/50-rancher.yaml and registries.yaml."""

from __future__ import annotations

import json

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec

MANIFESTS = "/var/lib/rancher/rke2/server/manifests"


def plan(lab) -> tuple[int, dict]:  # type: ignore[no-untyped-def,type-arg]
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--json")
    return result.returncode, json.loads(result.stdout)


def test_a_chart_config_in_a_nested_manifest_directory_is_found(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    lab.exec("ctl-1", f"mkdir -p {MANIFESTS}/rancher/deep && printf 'apiVersion: "
                      "helm.cattle.io/v1\\nkind: HelmChartConfig\\nmetadata:\\n  name: "
                      "rke2-ingress-nginx\\n  namespace: kube-system\\nspec:\\n  "
                      f"valuesContent: \"a: 1\"\\n' > {MANIFESTS}/rancher/deep/ingress.yaml")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}}))
    code, found = plan(lab)
    assert code == 1
    assert any(f"is also defined in {MANIFESTS}/rancher/deep/ingress.yaml" in p["text"]
               for p in found["problems"]), found["problems"]


def test_a_rancher_managed_cluster_is_a_problem_naming_the_owner(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    # What rancher-system-agent leaves on a node of a cluster Rancher provisioned.
    lab.exec("wrk-1", "mkdir -p /etc/rancher/rke2/config.yaml.d && printf 'node-label: "
                      "[cattle.io/os=linux]\\n' > /etc/rancher/rke2/config.yaml.d/50-rancher.yaml")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        registries={"mirrors": {"docker.io": {"endpoint": ["https://m.lab.internal"]}}}))
    code, found = plan(lab)
    assert code == 1
    texts = [(p["host"]["name"], p["text"]) for p in found["problems"]]
    assert ("wrk-1", "/etc/rancher/rke2/config.yaml.d/50-rancher.yaml is "
                     "rancher-system-agent's: this cluster is managed by Rancher, whose agent "
                     "owns the engine's config drop-in and /etc/rancher/rke2/registries.yaml "
                     "and rewrites them on every plan it applies; set registries in Rancher's "
                     "cluster config, not in cargoship's") in texts, texts
    assert not [c for c in found["changes"] if c["host"]["name"] == "wrk-1"]
