"""10. Labeling nodes with their profile group: if enabled, each node of a host with a
profile gets node-role.kubernetes.io/<profile>=true where missing or different.

Assessed read-only through the Kubernetes API (official client, node list).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..context import HostState, PlanContext, PlannedChange
from ..hosts.batch import Fact
from ..plan.actions import LABEL_NODE, LABEL_PREFIX
from .admin_access import admin_prefetch, first_controller, read_admin
from .base import Phase, Resource


class LabelNodes(Phase):
    title = "Labeling nodes with their profile group"
    unassessed_action = LABEL_NODE

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        wanted = ctx.config.options.label_profiles and any(h.profile for h in ctx.config.hosts)
        return admin_prefetch(ctx, host) if wanted else []

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        if ctx.config.options.label_profiles and host.config.profile:
            return frozenset({"node"})
        return frozenset()

    def would(self, ctx: PlanContext, host: HostState | None) -> str | None:
        if host is None or not host.config.profile:
            return None
        return (f"set {LABEL_PREFIX}{host.config.profile}=true on node {host.node} (where "
                "missing or different)")

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        if not ctx.config.options.label_profiles:
            ctx.found(self.title, None, "disabled (options.labelProfiles is false)")
            return set()
        wanted = [h for h in hosts if h.config.profile]
        controller = first_controller(ctx)
        if not wanted or controller is None:
            return set()
        admin = read_admin(ctx, self.title, controller)
        if admin is None:
            return set()
        try:
            nodes: dict[str, dict[str, str]] = {}
            for node in ctx.kube_api(admin).list_node(_request_timeout=30).items:
                if node.metadata is None:
                    raise ValueError("a node without metadata")
                nodes[str(node.metadata.name)] = dict(node.metadata.labels or {})
        except Exception as exc:  # noqa: BLE001 - API errors, a cut-off answer, a wrong shape
            ctx.problem(self.title, None, f"cannot list nodes through the Kubernetes API: "
                                          f"{_reason(exc)}")
            return set()
        writes: set[Resource] = set()
        for host in wanted:
            name = host.node
            if name not in nodes:
                ctx.warn(self.title, host, f"node {name} is not registered in the cluster")
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


def _reason(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '')}"
    # One line: the client (pydantic models) names each wrong field on lines of its own,
    # each with a link to pydantic's documentation.
    said = "; ".join(line.strip() for line in str(exc).splitlines()
                     if line.strip() and not line.strip().startswith("For further information"))
    return f"{type(exc).__name__}: {said[:300]}"
