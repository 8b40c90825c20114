"""Reading the admin kubeconfig from the first controller: shared by the kubeconfig and
label phases (one round trip, as root, read-only)."""

from __future__ import annotations

from typing import Any

from ..context import HostState, PlanContext
from ..desired.compare import file_digest
from ..facts.files import files_fact
from ..kube import KubeconfigError, admin_kubeconfig_path, parse_admin


def first_controller(ctx: PlanContext) -> HostState | None:
    return next((h for h in ctx.hosts if h.config.role == "controller" and h.active), None)


def read_admin(ctx: PlanContext, phase: str, host: HostState) -> dict[str, Any] | None:
    path = admin_kubeconfig_path(ctx.config.engine.distro)
    gathered = ctx.gather(phase, lambda _: [files_fact([path])], as_root=True, hosts=[host])
    if not gathered:
        return None
    live = gathered[0][1][0][0][path]
    if not live.exists:
        ctx.problem(phase, host, f"{path} does not exist: is the engine running on it?")
        return None
    ctx.record_read(host, path, file_digest(live.content, ctx.salt))
    try:
        return parse_admin(live.content.decode("utf-8", "replace"), host.config.ssh.address)
    except KubeconfigError as exc:
        ctx.problem(phase, host, f"{path}: {exc}")
        return None
