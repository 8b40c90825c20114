"""Taking a chart out of engineConfig.charts so that its values really go.

The deploy controller (k3s pkg/deploy/controller.go, rke2 runs it too) leaves in force the
objects of a manifest deleted from server/manifests, and prunes what a manifest no longer
holds when its content changes. So a chart's manifest is first emptied (written in place),
and deleted only once the API no longer has its HelmChartConfig: two applies, each shown
in the plan as what it is."""

from __future__ import annotations

import urllib.parse

from ..context import HostState, PlanContext
from ..desired.compare import FileChange, compare, deletion, file_digest
from ..desired.engine_files import Placement, chart_name, chart_removal
from ..facts.file_reads import files_fact
from ..facts.manifests import DEFAULT_NAMESPACE
from ..kube_get import ApiGetError, get_json
from ..safeyaml import safe_load_all
from .admin_access import first_controller
from .drain_forecast import admin_quietly


def removals(ctx: PlanContext, phase: str, host: HostState, where: Placement,
             stale: list[str]) -> list[FileChange]:
    """The changes for cargoship chart manifests no longer desired on this host."""
    if not stale:
        return []
    gathered = ctx.gather(phase, lambda _: [files_fact(stale)], as_root=True, hosts=[host])
    if not gathered:
        return []
    live = gathered[0][1][0][0]
    changes = []
    for path in stale:
        current = live[path]
        ctx.record_read(host, path, file_digest(current.content, ctx.salt)
                        if current.exists else "absent")
        if not current.exists:
            continue
        if _emptied(current.content):
            chart = chart_name(path, where) or ""
            present = _still_applied(ctx, phase, chart)
            if present is None:
                ctx.warn(phase, host, f"{path} is emptied; cargoship deletes it once the API "
                                      f"shows HelmChartConfig {DEFAULT_NAMESPACE}/{chart} "
                                      "pruned, and cannot ask it now")
            elif present:
                ctx.found(phase, host, f"{path} is emptied; the deploy controller has not "
                                       f"pruned HelmChartConfig {DEFAULT_NAMESPACE}/{chart} "
                                       "yet: the file is deleted by a later apply")
            else:
                changes.append(deletion(path))
            continue
        change = compare(chart_removal(path), current, ctx.salt)
        if change is not None:
            changes.append(change)
    return changes


def _emptied(content: bytes) -> bool:
    try:
        return not [d for d in safe_load_all(content.decode("utf-8")) if d is not None]
    except Exception:  # noqa: BLE001 - not YAML: not emptied, it is emptied again
        return False


def _still_applied(ctx: PlanContext, phase: str, chart: str) -> bool | None:
    """Whether the API still has the chart's HelmChartConfig (None: cannot ask)."""
    controller = first_controller(ctx)
    admin = admin_quietly(ctx, phase, controller) if controller is not None else None
    if admin is None:
        return None
    try:
        # The name comes from a file on the host: quoted, it stays one path segment.
        get_json(admin, f"/apis/helm.cattle.io/v1/namespaces/{DEFAULT_NAMESPACE}/"
                        f"helmchartconfigs/{urllib.parse.quote(chart, safe='')}")
    except ApiGetError as exc:  # a 404 is the answer; others: cannot ask
        return False if exc.status == 404 else None
    return True
