"""10. Labeling nodes with their profile group: if enabled, each node of a host with a
profile gets node-role.kubernetes.io/<profile>=true where missing or different, and a
label cargoship set (listed in the node's cargoship.io/labels annotation, or the label of a
profile cluster.yaml names) on a node whose host no longer has that profile is removed.

Assessed read-only through the Kubernetes API (official client, node list).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..context import HostState, PlanContext, PlannedChange
from ..hosts.batch import Fact
from ..plan.actions import LABEL_NODE, LABEL_PREFIX, LABELLED_ANNOTATION, UNLABEL_NODE
from .admin_access import admin_prefetch, first_controller, read_admin
from .base import Phase, Resource


class LabelNodes(Phase):
    title = "Labeling nodes with their profile group"
    unassessed_action = LABEL_NODE

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        wanted = ctx.config.options.label_profiles and _profiled(ctx)
        return admin_prefetch(ctx, host) if wanted else []

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        if ctx.config.options.label_profiles and _profiled(ctx):
            return frozenset({"node"})
        return frozenset()

    def would(self, ctx: PlanContext, host: HostState | None) -> str | None:
        if host is None:
            return None
        stale = f"remove the {LABEL_PREFIX}* labels cargoship set there for other profiles"
        if not host.config.profile:
            return f"{stale} of node {host.node}"
        return (f"set {LABEL_PREFIX}{host.config.profile}=true on node {host.node} (where "
                f"missing or different) and {stale}")

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        if not ctx.config.options.label_profiles:
            ctx.found(self.title, None, "disabled (options.labelProfiles is false)")
            return set()
        wanted = hosts if _profiled(ctx) else []
        controller = first_controller(ctx)
        if not wanted or controller is None:
            return set()
        admin = read_admin(ctx, self.title, controller)
        if admin is None:
            return set()
        try:
            nodes: dict[str, dict[str, str]] = {}
            owned_by: dict[str, set[str]] = {}
            for name, labels, annotations in _listed(
                    ctx.kube_api(admin).list_node(_request_timeout=30, _preload_content=False)):
                nodes[name] = labels
                listed = annotations.get(LABELLED_ANNOTATION) or ""
                owned_by[name] = {k for k in str(listed).split(",") if k}
        except Exception as exc:  # noqa: BLE001 - API errors, a cut-off answer, a wrong shape
            ctx.problem(self.title, None, f"cannot list nodes through the Kubernetes API: "
                                          f"{_reason(exc)}")
            return set()
        writes: set[Resource] = set()
        # Labels cargoship sets: every profile's, and any a node's annotation lists.
        ours = {f"{LABEL_PREFIX}{p}" for p in ctx.config.profiles}
        for host in wanted:
            name = host.node
            if name not in nodes:
                if host.config.profile:
                    ctx.warn(self.title, host, f"node {name} is not registered in the cluster")
                continue
            if _unlabel(ctx, self.title, host, name, nodes[name],
                        (ours | owned_by[name]) & {k for k in nodes[name]
                                                   if k.startswith(LABEL_PREFIX)}):
                writes.add((host.config.index, "node"))
            if not host.config.profile:
                continue
            key = f"{LABEL_PREFIX}{host.config.profile}"
            current = nodes[name].get(key)
            ctx.record_read(host, f"label:{key}", current if current is not None else "absent")
            if current == "true":
                continue
            diff = f"- {key}={current}\n+ {key}=true\n" if current is not None else \
                f"+ {key}=true\n"
            ctx.change(PlannedChange(self.title, host.config.index, LABEL_NODE, f"node/{name}",
                                     current, "true", diff, node=name, label=key))
            writes.add((host.config.index, "node"))
        return writes


def _profiled(ctx: PlanContext) -> bool:
    """Whether cargoship labels nodes at all: some profile to label with, or to have been."""
    return bool(ctx.config.profiles) or any(h.profile for h in ctx.config.hosts)


def _unlabel(ctx: PlanContext, phase: str, host: HostState, name: str,
             labels: dict[str, str], owned: set[str]) -> bool:
    """Plan the removal of each label cargoship set on this node that its host's profile no
    longer asks for; whether any is planned."""
    keep = f"{LABEL_PREFIX}{host.config.profile}" if host.config.profile else None
    planned = False
    for key in sorted(owned - {keep}):
        current = labels[key]
        ctx.record_read(host, f"label:{key}", current)
        ctx.change(PlannedChange(phase, host.config.index, UNLABEL_NODE, f"node/{name}",
                                 current, None, f"- {key}={current}\n", node=name, label=key))
        planned = True
    return planned


def _reason(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '')}"
    # One line: the client (pydantic models) names each wrong field on lines of its own,
    # each with a link to pydantic's documentation.
    said = "; ".join(line.strip() for line in str(exc).splitlines()
                     if line.strip() and not line.strip().startswith("For further information"))
    return f"{type(exc).__name__}: {said[:300]}"


def _listed(response: Any) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """Each node's name, labels and annotations from a NodeList read as JSON; ValueError
    for any other shape (a host's API is not trusted to answer as the schema says)."""
    try:
        listing = json.loads(response.data)
    finally:
        response.release_conn()
    items = listing.get("items") if isinstance(listing, dict) else None
    if not isinstance(items, list):
        raise ValueError("the node list has no items")
    out = []
    for node in items:
        meta = node.get("metadata") if isinstance(node, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise ValueError("a node without metadata or name")
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if not isinstance(labels, dict) or not isinstance(annotations, dict) or not all(
                isinstance(v, str) for v in (*labels.values(), *annotations.values())):
            raise ValueError(f"node {meta['name'][:80]!r}: labels or annotations are not "
                             "strings")
        out.append((meta["name"], dict(labels), dict(annotations)))
    return out
