"""A host speaks only for its own node.

The node cargoship cordons, drains, waits for and labels for a host is named by that
host's engine config (node-name), which root on the host writes. Root on a worker that
sets `node-name: ctl-1` would have apply drain ctl-1 and judge the worker "back" by
ctl-1's status. So before anything is done to a node for a host, the node's InternalIP
(the kubelet posts it: its --node-ip, else the host's default interface) must be one of
that host's own addresses.
"""

from __future__ import annotations

from typing import Any

from planner.errors import CargoshipError


class NodeIdentityError(CargoshipError):
    """The node named for a host is not that host's."""


def internal_ips(node: dict[str, Any]) -> list[str]:
    """The node's InternalIP addresses (a node checked by api_shape.node)."""
    addresses = (node.get("status") or {}).get("addresses") or []
    return [str(a.get("address")) for a in addresses
            if isinstance(a, dict) and a.get("type") == "InternalIP"]


def check(node: dict[str, Any], name: str, host: str, addresses: frozenset[str]) -> None:
    """Raise NodeIdentityError unless node `name` is the node of `host` (whose own
    addresses are `addresses`)."""
    ips = internal_ips(node)
    if not ips:
        raise NodeIdentityError(f"node {name} has no InternalIP, so it cannot be told to be "
                                f"{host}'s own node; nothing was done to it")
    if not set(ips) & addresses:
        raise NodeIdentityError(
            f"node {name} is not {host}'s: its InternalIP {', '.join(ips)} is none of the "
            f"host's addresses ({', '.join(sorted(addresses))}); nothing was done to it "
            f"(check node-name in {host}'s engine config)")
