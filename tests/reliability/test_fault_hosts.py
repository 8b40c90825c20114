"""Faults 7 to 9: hosts that change under a plan, racing applies, a host that can't write.

7. A host disappears between plan and apply: the apply refuses before touching any host.
   A host is added to the config between plan and apply: the plan is applied as reviewed,
   the new host is left alone, and the next plan shows it.
8. Two, then five, applies of different plans at once: exactly one proceeds; the others
   fail naming the holder (or, with --lock-timeout, wait and then find the hosts changed);
   no host is ever written by two plans.
9. A full disk or a read-only /etc/rancher on one host: the write fails cleanly, nothing
   partial is left, the host is rolled back and the rollout stops.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import edit_config
from tests.reliability import faults
from tests.reliability.consistency import check
from tests.reliability.scenario import DRIFTED, REGISTRIES, drifted_cluster, start_apply

RKE2 = "/etc/rancher/rke2"


@pytest.mark.reliability("fault: host disappears between plan and apply")
def test_a_host_gone_since_the_plan_stops_the_apply_before_any_change(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    faults.cut_traffic(s.lab, "wrk-2")
    try:
        result = s.apply(plan)
        assert result.returncode == 1
        assert "cannot reach every host of the plan" in result.stderr
        assert result.stderr.rstrip().endswith("; nothing was changed on any host"), \
            result.stderr
        assert "wrk-2" in result.stderr or s.lab.host("wrk-2").address in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    finally:
        faults.restore_traffic(s.lab, "wrk-2")
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED  # untouched


@pytest.mark.reliability("fault: host added between plan and apply")
def test_a_host_added_since_the_plan_is_left_for_the_next_plan(lab_factory, tmp_path: Path,
                                                               tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, workers=3, drift=("wrk-1", "wrk-3"))
    full = s.config.read_text()
    address = s.lab.host("wrk-3").address
    edit_config(s.config, lambda d: d["spec"].update(
        hosts=[h for h in d["spec"]["hosts"] if h["ssh"]["address"] != address]))
    plan = s.plan()
    s.config.write_text(full)  # wrk-3 joins the config after the review
    result = s.apply(plan)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "wrk-3" not in result.stdout
    assert s.lab.exec("wrk-3", f"cat {REGISTRIES}").stdout == DRIFTED
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)  # the fresh plan must list wrk-3, and only it
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems


@pytest.mark.reliability("fault: racing applies of different plans")
@pytest.mark.parametrize("runs", [2, 5])
def test_racing_applies_exactly_one_proceeds(lab_factory, tmp_path: Path, tally,
                                             runs: int) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, worker_concurrency=2)
    plans = [s.plan(f"plan-{i}.json") for i in range(runs)]
    # Half wait for the lock; they then find hosts changed since their plan.
    procs = [start_apply(p, *(["--lock-timeout", "60"] if i % 2 else []))
             for i, p in enumerate(plans)]
    results: list[tuple[int, str, str]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert "Traceback" not in out + err, out + err
        results.append((proc.returncode, out, err))
    assert sorted(code for code, _, _ in results) == [0] + [1] * (runs - 1), results
    for code, _, err in results:
        if code == 1:
            assert "locked by" in err or "changed since the plan was made" in err, err
    winner = next(s.plan_id(p) for p, (code, _, _) in zip(plans, results, strict=True)
                  if code == 0)
    for host in s.lab.hosts:  # never two writers: only the winner's backups anywhere
        listed = s.lab.exec(host.name, "ls /var/lib/cargoship/backups 2>/dev/null || true")
        assert set(listed.stdout.split()) <= {winner}, (host.name, listed.stdout)
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[winner], work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems


FULL_DISK = (f"mkdir -p /root/keep && cp -a {RKE2}/. /root/keep/ && "
             f"mount -t tmpfs -o size=256k tmpfs {RKE2} && cp -a /root/keep/. {RKE2}/ && "
             f"(dd if=/dev/zero of={RKE2}/.fill bs=4k 2>/dev/null || true)")
READ_ONLY = f"mount --bind {RKE2} {RKE2} && mount -o remount,bind,ro {RKE2}"


@pytest.mark.reliability("fault: disk full or read-only /etc/rancher")
@pytest.mark.parametrize("how", ["disk full", "read-only"])
def test_a_host_that_cannot_write_fails_before_its_engine_stops(lab_factory, tmp_path: Path,
                                                                tally, how: str) -> None:
    """The new content is staged before the host's turn: a host that cannot take it fails
    there, its engine never stopped and its node never cordoned, and the rollout stops."""
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    s.lab.exec("wrk-1", FULL_DISK if how == "disk full" else READ_ONLY)
    events = len(s.lab.events("wrk-1"))
    try:
        result = s.apply(plan)
        assert result.returncode == 1, result.stdout + result.stderr
        line = next(x for x in result.stdout.splitlines() if x.strip().startswith("wrk-1 ("))
        assert ": failed: " in line and "nothing was changed" in line, line
        assert "No space left" in line or "Read-only" in line, line
        # Under its host's name the cause is not prefixed with the host's address again.
        address = s.lab.host("wrk-1").address
        assert f"wrk-1 ({address}): failed: the restart script failed before the stop" \
            in line, line
        # Said as it happened; and at the end, what the host is left with, alone.
        assert f"[wrk-1 ({address})] FAILED: the restart script failed before the stop" \
            in result.stdout.split(line, 1)[0], result.stdout
        assert f"\n  wrk-1 ({address}): its previous config (nothing was changed)\n" \
            in result.stdout.split("Each host is left with:", 1)[1], result.stdout
        assert s.lab.events("wrk-1")[events:] == []  # the engine never stopped
        assert not s.lab.api("GET", "/api/v1/nodes/wrk-1")["spec"].get("unschedulable")
        assert "not started" in result.stdout
        temps = s.lab.exec("wrk-1", f"ls -A {RKE2}").stdout.split()
        assert not [t for t in temps if t.startswith(".cargoship.")], temps
        assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    finally:
        s.lab.exec("wrk-1", f"umount {RKE2}", check=False)
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems


