"""The one registry of action handlers, and the check that a plan asks for nothing else."""

from __future__ import annotations

from planner.plan.model import Plan

from .base import ApplyRefused, Handler
from .cluster import LabelNode, MergeKubeconfig, UnlabelNode
from .host_files import (
    DeleteFile,
    DeleteFileInPlace,
    Recover,
    RestoreBackup,
    WriteFile,
    WriteFileInPlace,
)

# Order matters for the cluster stage: the kubeconfig first, then labels.
HANDLERS: dict[str, Handler] = {h.action: h for h in (
    WriteFile(), WriteFileInPlace(), DeleteFile(), DeleteFileInPlace(), Recover(),
    RestoreBackup(),
    MergeKubeconfig(), LabelNode(), UnlabelNode(),
)}


def check_handled(plan: Plan) -> None:
    """Refuse, before anything is touched, a plan with an action this executor can't carry
    out: a change no handler knows, or an unassessed item no handler can finish."""
    for change in plan.changes:
        if change.action not in HANDLERS:
            raise ApplyRefused(
                f"plan {plan.plan_id}: change {change.action!r} on "
                f"{change.host or 'the local machine'} ({change.target}) is an action this "
                "cargoship has no handler for; nothing was changed (re-plan with this "
                "version)")
    for item in plan.unassessed:
        handler = HANDLERS.get(item.action or "")
        if handler is None or not handler.finishes_unassessed:
            what = f"action {item.action!r}, which this cargoship can't finish at apply " \
                "time" if item.action else "no action anything could finish at apply time"
            raise ApplyRefused(
                f"plan {plan.plan_id}: an item unassessed on {item.host or 'the cluster'} "
                f"({item.reason}) has {what}; nothing was changed (re-plan once it can be "
                "assessed)")
