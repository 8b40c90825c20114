"""options.drain.when (planner/desired/drain_policy.py): per kind of change, whether a
restarting host is drained first, and what the plan says when it is not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.config.model import Options
from planner.desired.drain_policy import drains, restarts_in_place

NEVER_REGISTRIES = replace(Options(), drain_registries="never")


def test_the_default_drains_every_restart() -> None:
    for kind in ("registries", "audit-policy", "pod-security", "config-dropin", None):
        assert drains(Options(), kind)
    assert restarts_in_place(Options(), ["registries"]) is None


@pytest.mark.parametrize(("kind", "drained"), [
    ("registries", False), ("audit-policy", True), ("config-dropin", True), (None, True)])
def test_never_applies_to_its_own_kind_only(kind: str | None, drained: bool) -> None:
    assert drains(NEVER_REGISTRIES, kind) is drained


def test_a_host_is_drained_when_any_of_its_restarts_asks_for_it() -> None:
    assert restarts_in_place(NEVER_REGISTRIES, ["registries", "audit-policy"]) is None
    assert restarts_in_place(NEVER_REGISTRIES, ["registries", None]) is None
    assert restarts_in_place(NEVER_REGISTRIES, ["registries"]) == (
        "options.drain.when.registries: never; an engine restart leaves the node's "
        "containers running")
    both = replace(NEVER_REGISTRIES, drain_control_plane="never")
    assert restarts_in_place(both, ["registries", "pod-security"]) == (
        "options.drain.when.controlPlane: never, options.drain.when.registries: never; an "
        "engine restart leaves the node's containers running")
