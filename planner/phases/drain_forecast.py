"""What the drains a plan would make will meet on the cluster, asked before anyone
approves: for every node a sync phase would drain, the pods on it as the API has them
now, judged as apply's drain judges them (planner/drain_rules.py): a pod the drain would
refuse (emptyDir data without drain.deleteEmptyDirData, no controller without
drain.force) is a problem, since apply would stop at that host; a pod whose
PodDisruptionBudget allows no disruption now is a warning, since the drain would wait for
it (up to drain.timeoutSeconds). Read through the Kubernetes API, read-only; nothing of a
pod but its namespace, name and what decides its fate reaches the plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..context import HostState, PlanContext
from ..drain_rules import classify, selects
from ..kube_get import get_json
from .admin_access import first_controller, read_admin_from

# Pods and budgets listed at most this many per page; a cluster with more is listed in
# pages (continue), as kubectl does.
PAGE = 500
MAX_PAGES = 200


def forecast(ctx: PlanContext, phase: str, draining: Sequence[tuple[HostState, str]]) -> None:
    """`draining`: each host to drain and why (the changes that need its engine restarted).
    Says which nodes will be drained and why, and what would block each drain."""
    if not draining:
        return
    controller = first_controller(ctx)
    admin = admin_quietly(ctx, phase, controller) if controller is not None else None
    if admin is None:
        for host, why in draining:
            ctx.found(phase, host, f"would drain node {host.node} ({why}); what the drain "
                                   "would meet is unknown: no admin kubeconfig to ask the API")
        return
    try:
        pods = _list(admin, "/api/v1/pods")
        budgets = _list(admin, "/apis/policy/v1/poddisruptionbudgets")
    except Exception as exc:  # noqa: BLE001 - API errors, a cut-off answer, a wrong shape
        for host, why in draining:
            ctx.warn(phase, host, f"would drain node {host.node} ({why}); cannot ask the API "
                                  f"which pods would block it: {_reason(exc)}")
        return
    options = ctx.config.options
    for host, why in draining:
        node = host.node
        mine = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node]
        evict, refused, waiting = 0, [], []
        for pod in mine:
            action, reason = classify(pod, options.drain_delete_emptydir_data,
                                      options.drain_force)
            name = _name(pod)
            if action == "refuse":
                refused.append(f"{name} ({reason})")
            elif action == "evict":
                evict += 1
                blocked = _blocking_budget(pod, budgets)
                if blocked:
                    waiting.append(f"{name} (PodDisruptionBudget {blocked} allows no "
                                   "disruption now)")
        ctx.found(phase, host, f"would drain node {node} ({why}): {evict} pod(s) to evict")
        if refused:
            ctx.problem(phase, host, (
                f"the drain of node {node} would be refused: {', '.join(refused[:10])}"
                + (f" and {len(refused) - 10} more" if len(refused) > 10 else "")
                + "; set options.drain.deleteEmptyDirData (the pods' emptyDir data is "
                  "lost) or options.drain.force (unmanaged pods are deleted for good), or "
                  "move those pods first"))
        if waiting:
            ctx.warn(phase, host, (
                f"the drain of node {node} would wait for {', '.join(waiting[:10])}"
                + (f" and {len(waiting) - 10} more" if len(waiting) > 10 else "")
                + f", up to options.drain.timeoutSeconds ({options.drain_timeout} s)"))


def admin_quietly(ctx: PlanContext, phase: str, host: HostState) -> dict[str, Any] | None:
    """The admin kubeconfig (prefetched with the controllers' files), or None without a
    word: a cluster not up yet has none, and that is no problem of the drain's."""
    found = read_admin_from(ctx, phase, host, quiet=True)
    return found[0] if found is not None else None


def _list(admin: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """Every item of a list, page by page, as plain JSON."""
    items: list[dict[str, Any]] = []
    token = ""
    for _ in range(MAX_PAGES):
        query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
        body = get_json(admin, path, query)
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise ValueError(f"{path}: not a list")
        items += [i for i in body["items"] if isinstance(i, dict)]
        token = str((body.get("metadata") or {}).get("continue") or "")
        if not token:
            return items
    raise ValueError(f"{path}: more than {PAGE * MAX_PAGES} items")


def _blocking_budget(pod: dict[str, Any], budgets: list[dict[str, Any]]) -> str | None:
    meta = pod.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    for pdb in budgets:
        pmeta = pdb.get("metadata") or {}
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        if not selects((pdb.get("spec") or {}).get("selector"), labels):
            continue
        if (pdb.get("status") or {}).get("disruptionsAllowed", 0) in (0, None):
            return f"{pmeta.get('namespace')}/{pmeta.get('name')}"
    return None


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _reason(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '')}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
