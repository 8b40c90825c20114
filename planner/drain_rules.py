"""What a drain does with each pod, as `kubectl drain` decides it (k8s.io/kubectl/pkg/drain/
filters.go: skip finished, mirror and DaemonSet pods; refuse pods with emptyDir data
without --delete-emptydir-data and pods no controller manages without --force). One pure
function: the plan predicts with it what apply's drain (executor/drain.py) will meet, so
the two cannot disagree."""

from __future__ import annotations

from typing import Any, Literal

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

Verdict = tuple[Literal["evict", "skip", "refuse"], str]  # what, and why


def controller_kind(meta: dict[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind"))
    return None


def classify(pod: dict[str, Any], delete_emptydir_data: bool, force: bool) -> Verdict:
    """kubectl drain's filters, in its order: what is skipped never counts as refused."""
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return "skip", f"already {phase}"
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "skip", "mirror pod"
    controller = controller_kind(meta)
    if controller == "DaemonSet":
        return "skip", "DaemonSet-managed"
    problems = []
    volumes = (pod.get("spec") or {}).get("volumes") or []
    # An empty emptyDir is `"emptyDir": {}`: present is what counts.
    if not delete_emptydir_data and any(
            isinstance(v, dict) and v.get("emptyDir") is not None for v in volumes):
        problems.append("has emptyDir data, needs delete_emptydir_data")
    if not force and controller is None:
        problems.append("not managed by a controller, needs force")
    if problems:
        return "refuse", "; ".join(problems)
    return "evict", ""


def selects(selector: Any, labels: dict[str, str]) -> bool:
    """A PodDisruptionBudget's label selector (matchLabels, matchExpressions) against a
    pod's labels. policy/v1: an empty selector selects every pod of the namespace; a
    missing one none (k8s.io/apimachinery/pkg/apis/meta/v1 LabelSelectorAsSelector)."""
    if not isinstance(selector, dict):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            return False
        key, op = str(expr.get("key")), expr.get("operator")
        values = [str(v) for v in expr.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True
