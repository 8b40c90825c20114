"""One handler per action, in one registry; what the executor does never depends on a
phase title."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from executor.actions.base import ApplyRefused, ClusterHandler, HostHandler
from executor.actions.registry import HANDLERS, check_handled
from planner.plan.actions import ACTIONS
from planner.plan.model import HostRef, Unassessed
from tests.unit.test_plan_codec import sample_plan

ROOT = Path(__file__).resolve().parents[2]


def test_every_documented_action_has_exactly_one_handler_of_its_scope() -> None:
    assert list(HANDLERS) == list(ACTIONS)
    assert all(HANDLERS[name].action == name for name in ACTIONS)
    # Files and restarts in the rollout; what needs the cluster back in service after it.
    assert [n for n, h in HANDLERS.items() if isinstance(h, HostHandler)] == [
        "write-file", "write-file-in-place", "delete-file", "delete-file-in-place", "recover",
        "restore-backup"]
    assert [n for n, h in HANDLERS.items() if isinstance(h, ClusterHandler)] == [
        "merge-kubeconfig", "label-node", "unlabel-node"]
    readme = (ROOT / "README.md").read_text()
    assert all(f"| `{name}` |" in readme for name in ACTIONS)


def test_unknown_actions_are_refused_naming_action_and_host() -> None:
    plan = sample_plan()
    check_handled(plan)
    odd = replace(plan, changes=(replace(plan.changes[0], action="reformat-disk"),))
    with pytest.raises(ApplyRefused, match=r"change 'reformat-disk' on ctl-1 \(10\.0\.0\.1\) "
                                           r"\(/etc/rancher/rke2/registries.yaml\)"):
        check_handled(odd)
    for action in ("write-file", None, "reformat-disk"):  # write-file: no deferred handler
        unfinishable = replace(plan, unassessed=(
            Unassessed("x", HostRef("wrk-1", "10.0.0.2", 2201), "why", action),))
        with pytest.raises(ApplyRefused, match=r"unassessed on wrk-1 \(10\.0\.0\.2:2201\) "
                                               r"\(why\) has .*(can't|could) finish"):
            check_handled(unfinishable)


def test_the_executor_never_reads_a_phase_title() -> None:
    for path in (ROOT / "executor").rglob("*.py"):
        text = path.read_text()
        # (status.phase is a pod's, in api_shape.py.)
        assert not re.search(r"(?<!status)\.phase\b|PHASE|Sync Registry|Labeling|"
                             r"kubeconfig file with", text), path
