"""Faults 2 and 3: cargoship itself is stopped mid-rollout.

SIGKILL leaves what a dead process leaves: locks still fresh for a minute, a host with its
engine perhaps stopped and its node cordoned. Once the locks are stale, a new plan sees the
interrupted host (the executor's in-progress marker) and plans to recover it; applying that
plan finishes the job. SIGINT (Ctrl-C) finishes or rolls back the host in progress, starts
no other, releases the locks and exits 130.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.reliability.consistency import check
from tests.reliability.scenario import (
    DRIFTED,
    REGISTRIES,
    drifted_cluster,
    finish,
    start_apply,
    wait_for_line,
)

POINTS = ["] cordoned", "] stopped rke2-agent", f"] wrote {REGISTRIES}", "] back: "]


@pytest.mark.reliability("fault: cargoship killed (SIGKILL) mid-rollout")
@pytest.mark.parametrize("point", POINTS)
def test_sigkill_then_a_new_plan_finishes_the_job(lab_factory, tmp_path: Path, tally,
                                                   point: str) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    first = s.plan("first.json")
    run = start_apply(first)
    assert run.stdout is not None
    seen: list[str] = []
    if point == "] back: ":
        # The host's uncordon answered slowly, and not done: the run stays between its
        # host being back and that host's end until it is killed. Read from its output
        # alone, the kill came late when the machine was busy, after wrk-1 had ended and
        # wrk-2 had begun (or not yet begun), and the next plan had no wrk-1 to recover.
        wait_for_line(run, f"] wrote {REGISTRIES}", seen)
        s.lab.api_fault("patch-node", "slow", node="wrk-1", write=False, for_seconds=60)
    wait_for_line(run, point, seen)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    s.lab.clear_api_faults()
    # The point is the change's own: a rollback's lines (its `back: ` too) come after this.
    assert not any("rolling back" in line for line in seen), seen
    # The dead run's locks stay live until they go stale (60 s untouched): a plan warns,
    # an apply is refused naming the holder.
    early = s.plan("early.json")
    assert any("lock" in w["text"] for w in json.loads(early.read_text())["warnings"])
    refused = s.apply(early)
    assert refused.returncode == 1 and "locked by" in refused.stderr
    for host in s.lab.hosts:  # time passes: the locks go stale, as after a minute
        s.lab.exec(host.name, "! test -e /run/cargoship/lock || "
                              "touch -d '-120 sec' /run/cargoship/lock")
    second = s.plan("second.json")
    changes = json.loads(second.read_text())["changes"]
    recover = [c for c in changes if c["action"] == "recover"]
    assert [c["host"]["name"] for c in recover] == ["wrk-1"], (changes, seen)
    result = s.apply(second)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "took over stale lock" in result.stdout
    verdict = check(s.lab, s.managed, config=s.config, work=tmp_path,
                    plan_ids=[s.plan_id(first), s.plan_id(second)])
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    assert all(s.lab.exec(m.host, f"cat {m.path}").stdout == m.new for m in s.managed)
    assert s.lab.exec("wrk-1", "test -e /var/lib/cargoship/in-progress.json",
                      check=False).returncode == 1


@pytest.mark.reliability("fault: Ctrl-C (SIGINT) mid-rollout")
@pytest.mark.parametrize("point", POINTS[:3])
def test_ctrl_c_finishes_the_host_in_progress_and_exits_130(lab_factory, tmp_path: Path,
                                                            tally, point: str) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, workers=3, drift=("wrk-1", "wrk-2", "wrk-3"))
    plan = s.plan()
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, point, seen)
    run.send_signal(signal.SIGINT)
    code, out, err = finish(run, seen)
    assert code == 130, out + err
    assert "interrupted" in out
    changed = [h for h in ("wrk-1", "wrk-2", "wrk-3")
               if s.lab.exec(h, f"cat {REGISTRIES}").stdout != DRIFTED]
    assert changed == ["wrk-1"]  # the host in progress was finished, no other started
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    for host in s.lab.hosts:  # released, not merely stale
        assert s.lab.exec(host.name, "test -e /run/cargoship/lock", check=False).returncode == 1
