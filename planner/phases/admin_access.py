"""Reading the admin kubeconfig from the first controller: shared by the kubeconfig and
label phases (one round trip, as root, read-only), and pointing it at an address the API
certificate covers (planner/kube.py api_server)."""

from __future__ import annotations

from typing import Any

from ..api_server import server_for
from ..context import HostState, PlanContext
from ..desired.compare import file_digest
from ..facts.file_reads import files_fact
from ..hosts.batch import Fact
from ..kube import (
    KubeconfigError,
    admin_kubeconfig_path,
    parse_admin,
    with_server,
)


def admin_prefetch(ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
    """Any controller may turn out to be the first one that answers: each one's admin
    kubeconfig goes into its snapshot (it stays in memory, never in a plan)."""
    if host.config.role != "controller":
        return []
    return [(files_fact([admin_kubeconfig_path(ctx.config.engine.distro)]), True)]


def first_controller(ctx: PlanContext) -> HostState | None:
    return next((h for h in ctx.hosts if h.config.role == "controller" and h.active), None)


def read_admin(ctx: PlanContext, phase: str, host: HostState) -> dict[str, Any] | None:
    found = read_admin_from(ctx, phase, host)
    return found[0] if found else None


def read_admin_from(ctx: PlanContext, phase: str, host: HostState,
                    quiet: bool = False) -> tuple[dict[str, Any], str] | None:
    """The admin kubeconfig pointed at the cluster's API server, and where that URL
    came from. `quiet`: a missing or broken one is None without a problem (a caller for
    whom a cluster not up yet is no problem of its own)."""
    path = admin_kubeconfig_path(ctx.config.engine.distro)
    gathered = ctx.gather(phase, lambda _: [files_fact([path])], as_root=True, hosts=[host])
    if not gathered:
        return None
    live = gathered[0][1][0][0][path]
    if not live.exists:
        if not quiet:
            ctx.problem(phase, host, f"{path} does not exist: is the engine running on it?")
        return None
    ctx.record_read(host, path, file_digest(live.content, ctx.salt))
    try:
        admin = parse_admin(live.content.decode("utf-8", "replace"))
    except KubeconfigError as exc:
        if not quiet:
            ctx.problem(phase, host, f"{path}: {exc}")
        return None
    server, source = server_for(ctx, host, admin)
    return with_server(admin, server), source
