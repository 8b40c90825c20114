"""The rollout's decisions on what a host did (executor/host_flow.py), over the shared fakes
(tests/unit/fakes.py): what is rolled back, what is uncordoned, what is never started.
The lab shows each end to end (tests/reliability/test_fault_engine.py,
test_uncordon_only_ours.py, test_fault_ssh.py); these pin the rules in milliseconds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from executor.apply import ApplyRefused, apply
from executor.drain_pods import DrainOptions
from executor.host_flow import HostFlow
from planner.config import load_config
from planner.plan.desired import to_desired
from tests.unit.fakes import FakeNodeOps, FakeRollout, FakeSessions, restarting
from tests.unit.test_plan_codec import sample_plan


def test_a_host_that_does_not_come_back_is_rolled_back_and_nothing_after_it_starts() -> None:
    rollout = FakeRollout({"w1": "not back"})
    out = rollout.run([], restarting("w1", "w2"), 1)
    assert [(o.host, o.status) for o in out] == [("w1", "rolled back"), ("w2", "not started")]
    assert "previous files restored and the engine is running again" in out[0].detail
    assert out[0].restarts == 2  # the change's start and the rollback's
    [change, rollback] = rollout.restarts["w1"]
    assert not change.rollback and change.prepared
    assert rollback.rollback and len(rollback.ran) == 1 and len(rollback.ran[0]) == 1
    assert rollout.ops.uncordoned() == ["w1"]  # type: ignore[union-attr]
    assert ("cordon", "w2") not in rollout.ops.calls  # type: ignore[union-attr]


def test_a_restore_of_a_killed_runs_backups_waits_as_a_rollback_does() -> None:
    # The pod on the host is the killed run's config, perhaps crash-looping: its restarts
    # are not the restore's (readiness `undoing`). A forward restart's are its own.
    flow = HostFlow(FakeNodeOps(), "plan-1", DrainOptions(), 8.0,  # type: ignore[arg-type]
                    lambda host, what: None)
    [forward, restore] = restarting("c1", "c2", controller=True)
    restore.restore_from = "/var/lib/cargoship/backups/killed"
    assert not flow._restart(forward).undoing
    assert flow._restart(restore).undoing
    assert flow._restart(forward, rollback=True).undoing


def test_a_script_that_stopped_nothing_is_not_rolled_back() -> None:
    rollout = FakeRollout({"w1": "refused"})
    [out] = rollout.run([], restarting("w1"), 1)
    assert out.status == "failed" and out.detail.endswith("nothing was changed")
    assert out.restarts == 0 and len(rollout.restarts["w1"]) == 1  # no rollback restart
    assert out.left == "its previous config (nothing was changed)"
    assert ("w1", "FAILED: wrk: the host lock is not this apply's; nothing was stopped; "
                  "nothing was changed") in rollout.notes, rollout.notes
    assert rollout.ops.uncordoned() == ["w1"]  # type: ignore[union-attr]


def test_a_failed_rollback_says_what_is_left_and_keeps_the_node_cordoned() -> None:
    rollout = FakeRollout({"c1": "rollback fails"})
    out = rollout.run(restarting("c1", "c2", controller=True), restarting("w1"), 1)
    assert [o.status for o in out] == ["failed", "not started", "not started"]
    assert "ROLLBACK FAILED" in out[0].detail
    assert "backups of the previous files are in" in out[0].detail
    assert "the engine was stopped by cargoship and may still be stopped" in out[0].detail
    assert out[0].detail.endswith("the node is left cordoned")
    # Nothing was restored before the rollback failed: where the old files are kept.
    assert out[0].left == ("backups of the previous files are in /var/lib/cargoship/backups/"
                           "plan-1 on the host; the engine was stopped by cargoship and may "
                           "still be stopped; the node is left cordoned")
    assert out[0].detail.endswith(out[0].left)
    assert rollout.ops.uncordoned() == []  # type: ignore[union-attr]
    # Said as it happens, not only in the outcome at the end.
    assert ("c1", "ROLLBACK FAILED: the host said nothing for 15 s: connection lost") \
        in rollout.notes


def test_a_rollback_that_restored_and_started_but_is_not_back_says_so() -> None:
    # The old files are back and the engine was started on them: "may still be stopped"
    # would send a person to look for a stop cargoship did not leave.
    rollout = FakeRollout({"c1": "rollback not back"})
    out = rollout.run(restarting("c1", controller=True), [], 1)
    assert out[0].status == "failed"
    assert out[0].left == ("the previous files are back in place (backups also in "
                           "/var/lib/cargoship/backups/plan-1 on the host); the engine was "
                           "started again but was not seen back; the node is left cordoned")
    assert out[0].detail.endswith("; ROLLBACK FAILED: rke2-server is crash-looping; "
                                  + out[0].left)
    assert "may still be stopped" not in out[0].detail


def test_a_node_the_operator_cordoned_is_never_uncordoned() -> None:
    ops = FakeNodeOps(operator_cordoned={"w1", "w2"})
    rollout = FakeRollout({"w2": "not back"}, ops)
    out = rollout.run([], restarting("w1", "w2"), 2)
    assert [o.status for o in out] == ["applied", "rolled back"]
    assert ops.uncordoned() == []


def test_a_restart_the_plan_says_not_to_drain_neither_cordons_nor_drains() -> None:
    # options.drain.when: never (the plan's change says drain: false): restart in place;
    # a failure then rolls back without an uncordon of a node never cordoned.
    jobs = restarting("w1", "w2")
    for job in jobs:
        job.drain = False
    rollout = FakeRollout({"w2": "not back"})
    out = rollout.run([], jobs, 1)
    assert [o.status for o in out] == ["applied", "rolled back"]
    assert not [c for c in rollout.ops.calls  # type: ignore[union-attr]
                if c[0] in ("cordon", "drain", "uncordon")]
    assert [len(r) for r in rollout.restarts.values()] == [1, 2]  # w2's rollback restarts


def test_a_failed_drain_changes_nothing_and_cancels_the_script_sent_ahead() -> None:
    ops = FakeNodeOps(drain_fails={"w1"})
    rollout = FakeRollout(ops=ops)
    out = rollout.run([], restarting("w1", "w2"), 1)
    assert [o.status for o in out] == ["failed", "not started"]
    assert "could not be evicted" in out[0].detail and "nothing was changed" in out[0].detail
    [script] = rollout.restarts["w1"]
    assert script.prepared and script.cancelled and not script.ran
    assert ops.uncordoned() == ["w1"]


def test_an_uncordon_that_fails_after_the_host_came_back_never_rolls_it_back() -> None:
    ops = FakeNodeOps(uncordon_fails={"w1"})
    rollout = FakeRollout(ops=ops)
    [out] = rollout.run([], restarting("w1"), 1)
    assert out.status == "failed" and "the change is applied and the host is back" in \
        out.detail and "no rollback" in out.detail
    assert len(rollout.restarts["w1"]) == 1 and out.restarts == 1
    assert out.left == ("the new config, engine running; the node is left cordoned "
                        "(uncordon kept failing)")


def test_a_rollback_whose_node_cannot_be_given_back_says_what_is_left() -> None:
    ops = FakeNodeOps(uncordon_fails={"w1"})
    rollout = FakeRollout({"w1": "not back"}, ops)
    [out] = rollout.run([], restarting("w1"), 1)
    assert out.status == "failed"
    assert "previous files restored and the engine is running again; UNCORDON FAILED, the " \
           "node is left cordoned" in out.detail
    assert out.left == ("its previous config (rolled back), engine running; the node is "
                        "left cordoned (uncordon failed)")


CONFIG = """\
apiVersion: cargoship/v1
kind: Cluster
metadata: {name: prod-eu}
spec:
  engine: {distro: rke2, version: v1.30.4+rke2r1}
  hosts:
    - role: controller
      hostname: ctl-1
      ssh: {address: 10.0.0.1}
  engineConfig: {registries: {mirrors: {}}}
"""


def _apply_with(sessions: FakeSessions, tmp_path: Path) -> str:
    """Apply the sample plan, its desired state that of a one-controller config, through
    `sessions`; the reason it was refused."""
    (tmp_path / "cluster.yaml").write_text(CONFIG)
    plan = sample_plan()
    config = load_config(tmp_path / "cluster.yaml")
    plan = dataclasses.replace(plan, desired=to_desired(config, bytes.fromhex(plan.salt)))
    with pytest.raises(ApplyRefused) as refused:
        apply(plan, tmp_path / "plan.json", lock_timeout=0, progress=lambda h, w: None,
              sessions=sessions)
    return str(refused.value)


def test_apply_refuses_before_any_command_when_a_host_cannot_be_reached(tmp_path: Path) -> None:
    sessions = FakeSessions(down={"ctl-1"})
    why = _apply_with(sessions, tmp_path)
    assert why.startswith("cannot reach every host of the plan: ctl-1: cannot connect")
    assert sessions.opened == []


def test_apply_holds_each_host_to_the_key_the_plan_was_made_against(tmp_path: Path) -> None:
    sessions = FakeSessions(keys={"ctl-1": "SHA256:another"})
    why = _apply_with(sessions, tmp_path)
    assert "host key is SHA256:another, the plan was made against SHA256:AAAA" in why
    [session] = sessions.opened
    assert session.closed and session.commands == []  # refused before a single command
