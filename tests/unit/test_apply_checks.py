"""Plan checks apply makes before connecting anywhere, and the drift comparison."""

from __future__ import annotations

from dataclasses import replace

import pytest

from executor.apply import ApplyRefused, check_plan
from executor.drift import refusal
from planner import __version__
from planner.plan.model import HostRef, Notice, Plan
from tests.unit.test_plan_codec import sample_plan


def test_incompatible_cargoship_version_is_refused() -> None:
    plan = replace(sample_plan(), cargoship_version=__version__)
    check_plan(plan)
    for other in ("1.0.0", "0.99.0"):
        with pytest.raises(ApplyRefused, match=f"made by cargoship {other}"):
            check_plan(replace(plan, cargoship_version=other))


def test_unapplyable_plan_is_refused_with_its_reason() -> None:
    plan = replace(sample_plan(), cargoship_version=__version__, applyable=False,
                   problems=(Notice(HostRef("wrk-1", "10.0.0.2"), "Validate hosts", "no sudo"),))
    with pytest.raises(ApplyRefused,
                       match=r"not applyable: wrk-1 \(10.0.0.2\): Validate hosts: no sudo"):
        check_plan(plan)


def reasons(saved: Plan, fresh: Plan) -> list[str]:
    """What apply's refusal lists after its headline: each reason, with its hosts."""
    refused = refusal(saved, fresh)
    return [] if refused is None else refused[1]


def test_drift_names_host_and_what_changed() -> None:
    saved = sample_plan()
    host = saved.hosts[0]
    moved = replace(host, reads={k: "sha256:" + "f" * 64 for k in host.reads},
                    engine_version="v1.30.5+rke2r1", host_key="SHA256:" + "B" * 43)
    found = reasons(saved, replace(saved, hosts=(moved,)))
    assert found == [
        f"SSH host key changed ({host.host_key} -> {moved.host_key}): on ctl-1",
        "engine version changed (v1.30.4+rke2r1 -> v1.30.5+rke2r1): on ctl-1",
        "/etc/rancher/rke2/registries.yaml changed since the plan was made: on ctl-1",
    ]
    gone = reasons(saved, replace(saved, hosts=()))
    assert gone == ["no longer in the cluster: on ctl-1"]
    assert refusal(saved, saved) is None
    other = replace(saved, changes=(replace(saved.changes[0], before="x"),))
    assert reasons(saved, other) == ["the changes to make are not the ones planned"]
