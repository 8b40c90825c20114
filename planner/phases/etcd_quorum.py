"""The quorum gate at plan time (called by Gathering facts about the distro installed):
every controller's own look at its etcd member (planner/facts/etcd.py) judged together
(planner/facts/etcd_gate.py). A problem names the controller and what is wrong, so the plan
cannot be applied until it is fixed; a cluster that is not gated says why."""

from __future__ import annotations

from ..context import HostState, PlanContext
from ..facts.etcd import EtcdLook
from ..facts.etcd_gate import ControllerEtcd, external_datastore, judge


def merged_settings(hosts: list[HostState]) -> list[dict[str, object]]:
    return [h.engine_settings.merged for h in hosts if h.engine_settings is not None]


def gate(ctx: PlanContext, title: str, looks: dict[int, EtcdLook]) -> None:
    """`looks`: each controller's, by config index (a controller missing here could not be
    read, and has its own problem already)."""
    controllers = [h for h in ctx.hosts if h.config.role == "controller"]
    views = [ControllerEtcd(h.label, h.engine.service_state if h.engine else "unknown",
                            looks.get(h.config.index), h.error or "not read")
             for h in controllers]
    verdict = judge(views, external=external_datastore(merged_settings(controllers)))
    ctx.etcd_gated = verdict.gated
    by_label = {h.label: h for h in controllers}
    if not verdict.problems:
        ctx.found(title, None, verdict.summary)
        return
    for who, what in verdict.problems:
        # Not the host's failure: its other facts stand, only the apply must not start.
        ctx.problem(title, by_label.get(who), f"etcd quorum gate: {what}")
