"""What the lab's Kubernetes API stand-in says about itself, and the Table view kubectl asks
for: discovery documents, /version, node Tables. Standard library only (runs on a lab
host's system Python), imported by kubeapi.py.
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from kubeapi_store import Obj

VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.4+rke2r1",
           "gitCommit": "c6b0f4b4a6b4a6f0b2f3e7f1d4d0d4a8e0f3c2b1", "gitTreeState": "clean",
           "buildDate": "2024-08-14T00:00:00Z", "goVersion": "go1.22.5 X:boringcrypto",
           "compiler": "gc", "platform": "linux/amd64"}


def _resource(name: str, kind: str, namespaced: bool, verbs: str, **extra: Any) -> Obj:
    singular = "" if "/" in name else kind.lower()
    return {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind,
            "verbs": verbs.split(), **extra}


# Discovery lists only what is served here, so a client that checks it is told the truth.
POLICY = {"name": "policy", "versions": [{"groupVersion": "policy/v1", "version": "v1"}],
          "preferredVersion": {"groupVersion": "policy/v1", "version": "v1"}}
HELM = {"name": "helm.cattle.io", "versions": [{"groupVersion": "helm.cattle.io/v1",
                                                "version": "v1"}],
        "preferredVersion": {"groupVersion": "helm.cattle.io/v1", "version": "v1"}}
COORDINATION = {"name": "coordination.k8s.io", "versions": [
    {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
    "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}}
DISCOVERY: dict[str, Obj] = {
    "/version": VERSION,
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1",
              "groups": [POLICY, HELM, COORDINATION]},
    "/apis/coordination.k8s.io": {"kind": "APIGroup", "apiVersion": "v1", **COORDINATION},
    "/apis/coordination.k8s.io/v1": {"kind": "APIResourceList", "apiVersion": "v1",
                                     "groupVersion": "coordination.k8s.io/v1", "resources": [
        _resource("leases", "Lease", True, "create delete get list patch")]},
    "/apis/policy": {"kind": "APIGroup", "apiVersion": "v1", **POLICY},
    "/apis/helm.cattle.io": {"kind": "APIGroup", "apiVersion": "v1", **HELM},
    "/apis/helm.cattle.io/v1": {"kind": "APIResourceList", "apiVersion": "v1",
                                "groupVersion": "helm.cattle.io/v1", "resources": [
        _resource("helmchartconfigs", "HelmChartConfig", True,
                  "create delete get list patch update")]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        _resource("nodes", "Node", False, "create delete get list patch", shortNames=["no"]),
        _resource("nodes/status", "Node", False, "get patch"),
        _resource("pods", "Pod", True, "create delete get list patch", shortNames=["po"]),
        _resource("pods/eviction", "Eviction", True, "create", group="policy", version="v1"),
        _resource("pods/status", "Pod", True, "get patch")]},
    "/apis/policy/v1": {"kind": "APIResourceList", "apiVersion": "v1",
                        "groupVersion": "policy/v1", "resources": [
        _resource("poddisruptionbudgets", "PodDisruptionBudget", True,
                  "create delete get list patch", shortNames=["pdb"])]},
}


def node_table(listing: Obj) -> Obj:
    """A NodeList as the server-side Table kubectl asks for (`kubectl get nodes`)."""
    columns = [("Name", "string", "name"), ("Status", "string", ""), ("Roles", "string", ""),
               ("Age", "string", ""), ("Version", "string", "")]
    rows = []
    for node in listing["items"]:
        ready = next((c.get("status") for c in (node.get("status") or {}).get("conditions")
                      or [] if c.get("type") == "Ready"), "Unknown")
        status = {"True": "Ready", "False": "NotReady"}.get(ready, "Unknown")
        if (node.get("spec") or {}).get("unschedulable"):
            status += ",SchedulingDisabled"
        labels = node["metadata"].get("labels") or {}
        roles = ",".join(sorted(k.split("/", 1)[1] for k in labels
                                if k.startswith("node-role.kubernetes.io/"))) or "<none>"
        age = _age(node["metadata"].get("creationTimestamp", ""))
        rows.append({"cells": [node["metadata"]["name"], status, roles, age, VERSION[
            "gitVersion"]], "object": {"kind": "PartialObjectMetadata",
                                       "apiVersion": "meta.k8s.io/v1",
                                       "metadata": node["metadata"]}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": listing["metadata"],
            "columnDefinitions": [{"name": n, "type": t, "format": f, "description": "",
                                   "priority": 0} for n, t, f in columns],
            "rows": rows}


def _age(created: str) -> str:
    try:
        seconds = max(0, int(time.time()) - calendar.timegm(
            time.strptime(created, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return "<unknown>"
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"
