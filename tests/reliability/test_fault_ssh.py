"""Fault 1: the SSH connection to a worker drops in the middle of its sync.

Killed sshd (runit brings the listener back, as systemd would): cargoship reconnects,
checking the host key again, re-runs the interrupted idempotent step and finishes the host.
Traffic cut for good: the host's steps time out, reconnecting fails, the rollout stops and
the output says what state the host is left in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import faults
from tests.reliability.consistency import check
from tests.reliability.scenario import drifted_cluster


@pytest.mark.reliability("fault: SSH drop mid-sync (sshd killed)")
@pytest.mark.parametrize("point", list(faults.POINTS))
def test_sshd_killed_mid_sync_is_survived(lab_factory, tmp_path: Path, tally, point: str
                                          ) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    faults.arm(s.lab, "wrk-1", point, "kill-sshd")
    result = s.apply(plan)
    assert faults.fired(s.lab, "wrk-1")
    assert result.returncode == 0, result.stdout + result.stderr
    address = s.lab.host("wrk-1").address
    assert f"{address}: SSH connection lost" in result.stderr
    assert f"{address}: reconnected" in result.stderr
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)], work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    # Everything converged: the fresh plan (run by check) found nothing left to do.
    assert all(s.lab.exec(m.host, f"cat {m.path}").stdout == m.new for m in s.managed)


@pytest.mark.reliability("fault: SSH drop mid-sync (traffic cut)")
def test_traffic_cut_between_write_and_start_stops_and_says_so(lab_factory, tmp_path: Path,
                                                               tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    faults.arm(s.lab, "wrk-1", "between write and start", "cut")
    try:
        result = s.apply(plan)
    finally:
        faults.restore_traffic(s.lab, "wrk-1")
    assert faults.fired(s.lab, "wrk-1")
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("wrk-1 ("))
    assert "ROLLBACK FAILED" in line and "may still be stopped" in line
    assert "left cordoned" in line
    assert "wrk-2 (" in result.stdout and "not started" in result.stdout
    assert "could not write the apply record on wrk-1" in result.stdout
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)], work=tmp_path,
                    cordoned_ok={"wrk-1"}, engine_down_ok={"wrk-1"})
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
