"""Only nodes cargoship cordoned are uncordoned (issue 31's gap: dropping the "did we
cordon it" condition failed no test). A node an operator cordoned for maintenance stays
cordoned after apply succeeds on it, and after apply rolls it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import edit_config
from tests.reliability.scenario import drifted_cluster

pytestmark = pytest.mark.reliability("rule: uncordon only the nodes cargoship cordoned")


def _operator_cordons(s, node: str) -> None:  # type: ignore[no-untyped-def]
    s.lab.api("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}},
              "application/merge-patch+json")


def _cordoned(s, node: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(s.lab.api("GET", f"/api/v1/nodes/{node}")["spec"].get("unschedulable"))


def test_a_node_the_operator_cordoned_stays_cordoned_after_apply(lab_factory,
                                                                 tmp_path: Path,
                                                                 tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, drift=("wrk-1", "wrk-2"))
    _operator_cordons(s, "wrk-1")
    plan = s.plan()
    result = s.apply(plan)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "node wrk-1 was already cordoned" in result.stdout, result.stdout
    assert _cordoned(s, "wrk-1")  # the operator's, left as it was
    assert not _cordoned(s, "wrk-2")  # cargoship's, given back


def test_a_node_the_operator_cordoned_stays_cordoned_after_a_rollback(lab_factory,
                                                                      tmp_path: Path,
                                                                      tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, controllers=1, workers=1, drift=())
    # The new registries make the engine fail at start: every host is rolled back.
    edit_config(s.config, lambda d: d["spec"]["engineConfig"]["registries"]["mirrors"]
                ["docker.io"].update(endpoint=["https://broken.invalid"]))
    _operator_cordons(s, "ctl-1")
    plan = s.plan()
    result = s.apply(plan)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "node ctl-1 was already cordoned" in result.stdout, result.stdout
    assert "previous files restored" in result.stdout, result.stdout
    assert _cordoned(s, "ctl-1")
