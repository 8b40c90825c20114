"""The ports each engine needs open inbound, from the RKE2 and K3s requirements pages' inbound
rules. Left out: NodePorts 30000-32767 (only for NodePort services), etcd metrics 2381 (bound
to localhost unless exposed), CNI alternatives to the default one (Calico, Cilium, flannel
wireguard), and spegel's 5001 (opt-in)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from .model import Port

_ENGINE_PORTS: Final[Mapping[tuple[str, str], tuple[Port, ...]]] = MappingProxyType({
    ("rke2", "controller"): (
        Port("tcp", 6443, "kube-apiserver"),
        Port("tcp", 9345, "rke2 supervisor"),
        Port("tcp", 10250, "kubelet"),
        Port("tcp", 2379, "etcd client"),
        Port("tcp", 2380, "etcd peer"),
        Port("udp", 8472, "canal/flannel VXLAN"),
    ),
    ("rke2", "worker"): (
        Port("tcp", 10250, "kubelet"),
        Port("udp", 8472, "canal/flannel VXLAN"),
    ),
    ("k3s", "controller"): (
        Port("tcp", 6443, "k3s supervisor and kube-apiserver"),
        Port("tcp", 10250, "kubelet"),
        Port("tcp", 2379, "etcd client (embedded etcd)"),
        Port("tcp", 2380, "etcd peer (embedded etcd)"),
        Port("udp", 8472, "flannel VXLAN"),
    ),
    ("k3s", "worker"): (
        Port("tcp", 10250, "kubelet"),
        Port("udp", 8472, "flannel VXLAN"),
    ),
})


def engine_ports(distro: str, role: str) -> tuple[Port, ...]:
    """Ports other nodes open connections to on a node of this distro and role."""
    try:
        return _ENGINE_PORTS[distro, role]
    except KeyError:
        raise ValueError(f"no port table for distro {distro!r} role {role!r}") from None
