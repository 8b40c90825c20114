"""The pods a stock cluster runs in kube-system, for the lab's nodes to carry what a real
node carries when cargoship drains it. What matters to a drain is modelled: who controls
each pod and whether it has emptyDir volumes.

* k3s: coredns (Deployment, ConfigMap volumes: k3s manifests/coredns.yaml),
  metrics-server (Deployment, emptyDir `tmp-dir`: manifests/metrics-server/
  metrics-server-deployment.yaml), traefik (Deployment from its bundled chart, emptyDir
  `data` and `tmp`), local-path-provisioner (Deployment, ConfigMap volume).
* rke2: rke2-coredns (Deployment), rke2-metrics-server (Deployment, emptyDir `tmp-dir`),
  rke2-ingress-nginx-controller (a DaemonSet: a drain skips it).
"""

from __future__ import annotations

from typing import Any

STOCK: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    # name, controlling kind, emptyDir volumes
    "k3s": (("coredns", "ReplicaSet", ()), ("metrics-server", "ReplicaSet", ("tmp-dir",)),
            ("traefik", "ReplicaSet", ("data", "tmp")),
            ("local-path-provisioner", "ReplicaSet", ())),
    "rke2": (("rke2-coredns-rke2-coredns", "ReplicaSet", ()),
             ("rke2-metrics-server", "ReplicaSet", ("tmp-dir",)),
             ("rke2-ingress-nginx-controller", "DaemonSet", ())),
}


def stock_pod(name: str, owner: str, empty_dirs: tuple[str, ...], node: str) -> dict[str, Any]:
    suffix = node.replace(".", "-")[-10:]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{suffix}", "namespace": "kube-system",
                         "labels": {"app.kubernetes.io/name": name},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner,
                                              "name": name, "uid": f"uid-{name}",
                                              "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": name, "image": name}],
                     "volumes": [{"name": v, "emptyDir": {}} for v in empty_dirs]},
            "status": {"phase": "Running"}}


def stock_pods(distro: str, placement: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The stock pods on the nodes `placement` names for them: node -> pod names (STOCK's
    first column); a DaemonSet's pod goes on every node named for it."""
    kinds = {name: (owner, dirs) for name, owner, dirs in STOCK[distro]}
    return [stock_pod(name, *kinds[name], node) for node, names in placement.items()
            for name in names]
