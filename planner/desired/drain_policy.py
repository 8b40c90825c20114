"""Whether a host whose engine restarts is cordoned and drained first: options.drain.when,
per kind of change.

An engine restart does not stop the node's containers: k3s and RKE2 run containerd as a
child whose containers carry on (the units' KillMode=process), and the kubelet picks them
up again when it is back. So a drain is a choice, not a necessity, for the files cargoship
writes: it moves workloads away from the minute the node's kubelet (and, on a controller,
its API server) is gone, at the price of evicting them. The default stays `always`: a
node whose kubelet is down cannot restart a failing pod or answer a probe, and evictions
are what a PodDisruptionBudget can pace; `never` is for those who know their pods ride
out that minute (or cannot be evicted, like the stock emptyDir ones).

What the engine must restart for without a file cargoship renders (finishing an
interrupted apply, restoring a backup, a file it no longer writes) is drained as ever.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config.model import Options

# Each kind of file cargoship writes that the engine reads at start: its key in
# options.drain.when.
KEYS = {"registries": "registries", "audit-policy": "controlPlane",
        "pod-security": "controlPlane", "config-dropin": "controlPlane"}


def setting(options: Options, key: str) -> str:
    return options.drain_registries if key == "registries" else options.drain_control_plane


def drains(options: Options, kind: str | None) -> bool:
    """Whether a restart for a file of this kind (None: no file of a known kind) drains."""
    key = KEYS.get(kind) if kind is not None else None
    return key is None or setting(options, key) == "always"


def restarts_in_place(options: Options, kinds: Iterable[str | None]) -> str | None:
    """Why a host restarting for files of these kinds is not drained, in words for the
    plan; None when it is drained."""
    kinds = list(kinds)
    if not kinds or any(drains(options, kind) for kind in kinds):
        return None
    keys = sorted({KEYS[kind] for kind in kinds if kind is not None})
    said = ", ".join(f"options.drain.when.{key}: never" for key in keys)
    return f"{said}; an engine restart leaves the node's containers running"
