"""SIGTERM and SIGHUP mid-rollout are taken as Ctrl-C is; a second signal rolls back now;
a SIGKILL leaves history something true.

CI cancels a job with SIGTERM, `timeout` and systemd send it too, and a closed terminal
sends SIGHUP: each used to kill apply at once, mid-restart, with no record and every lock
left. Now the host in progress is finished (or rolled back), no other host is started,
every record is written, the locks are released and the exit code says which signal.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.reliability.consistency import check
from tests.reliability.scenario import (
    DRIFTED,
    REGISTRIES,
    drifted_cluster,
    finish,
    start_apply,
    wait_for_line,
)

WORKERS = ("wrk-1", "wrk-2", "wrk-3")


def _local_record(plan: Path) -> dict:
    return json.loads(plan.with_name(plan.name.removesuffix(".json") + ".applied.json")
                      .read_text())


@pytest.mark.reliability("fault: cargoship stopped by SIGTERM or SIGHUP mid-rollout")
@pytest.mark.parametrize(("signum", "code", "point"), [
    (signal.SIGTERM, 143, "] cordoned"),
    (signal.SIGTERM, 143, "] stopped rke2-agent"),
    (signal.SIGHUP, 129, f"] wrote {REGISTRIES}"),
])
def test_sigterm_and_sighup_finish_the_host_in_progress_record_and_release(
        lab_factory, tmp_path: Path, tally, signum: int, code: int, point: str) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, workers=3, drift=WORKERS)
    plan = s.plan()
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, point, seen)
    run.send_signal(signum)
    returncode, out, err = finish(run, seen)
    assert returncode == code, out + err
    name = signal.Signals(signum).name
    assert f"{name}: finishing the host(s) in progress" in out, out
    assert "Apply interrupted" in out and "record:" in out, out  # the summary
    changed = [h for h in WORKERS if s.lab.exec(h, f"cat {REGISTRIES}").stdout != DRIFTED]
    assert changed == ["wrk-1"], out  # the host in progress finished, no other started
    record = _local_record(plan)
    assert record["outcome"] == "interrupted", record
    statuses = {h["host"]["name"]: h["status"] for h in record["hosts"]}
    assert statuses["wrk-1"] == "applied" and statuses["wrk-2"] == "not started", statuses
    for host in WORKERS[:2]:  # each host has its record, not the in-progress journal
        on_host = json.loads(s.lab.exec(host, f"cat /var/lib/cargoship/applied/"
                                              f"{s.plan_id(plan)}.json").stdout)
        assert on_host["outcome"] == "interrupted", on_host
    for host in s.lab.hosts:  # released, not merely stale
        assert s.lab.exec(host.name, "test -e /run/cargoship/lock", check=False).returncode == 1
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems


@pytest.mark.reliability("fault: cargoship stopped by SIGTERM or SIGHUP mid-rollout")
def test_sigterm_before_any_change_says_nothing_changed_and_exits_143(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    # The lock is held by someone else: apply waits for it, and is stopped while it waits.
    holder = json.dumps({"id": "abcdef123456", "holder": "op@elsewhere", "pid": 1,
                         "plan_id": None, "since": "2026-01-01T00:00:00+00:00"})
    s.lab.exec("wrk-2", f"mkdir -p /run/cargoship && printf '%s\\n' '{holder}' "
                        "> /run/cargoship/lock")
    run = start_apply(plan, "--lock-timeout", "60")
    assert run.stderr is not None
    seen: list[str] = []
    wait_for_line(run, "waiting for the lock of", seen, stderr=True)
    run.send_signal(signal.SIGTERM)
    returncode, out, err = finish(run, seen)
    assert returncode == 143, out + err
    assert "nothing was changed on any host" in out + err, out + err
    assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    assert s.lab.exec("wrk-1", "test -e /run/cargoship/lock", check=False).returncode == 1


@pytest.mark.reliability("fault: a second signal rolls the host in progress back now")
def test_a_second_sigterm_during_a_blocked_drain_gives_the_node_back_at_once(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, workers=1, drift=("wrk-1",))
    # A budget that never allows the eviction: the drain would wait its whole timeout.
    s.lab.api("POST", "/apis/policy/v1/namespaces/db/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    s.lab.api("POST", "/api/v1/namespaces/db/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "db", "labels": {"app": "db"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                          "name": "db", "uid": "u-db", "controller": True}]},
        "spec": {"nodeName": "wrk-1", "containers": [{"name": "db", "image": "db"}]}})
    edit_config(s.config, lambda d: d["spec"]["options"]["drain"].update(timeoutSeconds=600))
    plan = s.plan()
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, "] cordoned node wrk-1", seen)
    run.send_signal(signal.SIGTERM)
    wait_for_line(run, "SIGTERM: finishing", seen)
    run.send_signal(signal.SIGTERM)
    returncode, out, err = finish(run, seen, timeout=60)
    assert returncode == 143, out + err
    assert "SIGTERM again: rolling the host(s) in progress back now" in out, out
    assert "drain stopped: interrupted again" in out + err, out + err
    node = s.lab.api("GET", "/api/v1/nodes/wrk-1")
    assert not node["spec"].get("unschedulable"), node  # given back
    assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED  # never changed
    record = _local_record(plan)
    assert {h["host"]["name"]: h["status"] for h in record["hosts"]}["wrk-1"] == "failed"


@pytest.mark.reliability("fault: cargoship killed (SIGKILL) mid-rollout")
def test_a_killed_apply_shows_in_history_as_in_progress_or_killed(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, "] stopped rke2-agent", seen)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    history = cargoship("history", "-c", s.config)
    assert history.returncode == 0, history.stdout + history.stderr
    out = history.stdout
    assert f"plan {s.plan_id(plan)}  in progress or killed" in out, out
    assert "wrk-1 (" in out and "in progress (marker: in progress since" in out, out
    local = _local_record(plan)
    assert local["outcome"] == "in progress", local
    shown = cargoship("show", plan.with_name("plan.applied.json"))
    assert "in progress, or killed" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.reliability("fault: a second signal rolls the host in progress back now")
def test_a_second_sigterm_while_waiting_for_readiness_rolls_back_at_once(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, workers=1, drift=("wrk-1",))
    edit_config(s.config, lambda d: d["spec"]["options"].update(readyTimeoutSeconds=120))
    plan = s.plan()
    # The node the readiness wait reads never posts a fresh heartbeat (its first list and
    # watch, and its fresh reads until the second signal; the rollback's are truthful): the
    # wait would last its whole 120 s.
    stale = {"set": {"status.conditions[type=Ready].lastHeartbeatTime": "2000-01-01T00:00:00Z"}}
    s.lab.api_fault("list-nodes", "shape", node="wrk-1", times=1, **stale)
    s.lab.api_fault("watch-nodes", "shape", node="wrk-1", times=1, **stale)
    s.lab.api_fault("read-node", "shape", node="wrk-1", **stale)
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, "has posted no status since the restart", seen)
    run.send_signal(signal.SIGTERM)
    wait_for_line(run, "SIGTERM: finishing", seen)
    s.lab.clear_api_faults()
    run.send_signal(signal.SIGTERM)
    returncode, out, err = finish(run, seen, timeout=60)
    assert returncode == 143, out + err
    assert "interrupted again: stopped waiting" in out and "rolling back" in out, out
    assert "previous files restored" in out, out
    assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    assert not s.lab.api("GET", "/api/v1/nodes/wrk-1")["spec"].get("unschedulable")
    record = _local_record(plan)
    assert {h["host"]["name"]: h["status"] for h in record["hosts"]}["wrk-1"] == "rolled back"
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems


@pytest.mark.reliability("fault: cargoship killed (SIGKILL) mid-rollout")
def test_a_host_that_cannot_take_the_in_progress_record_stops_the_apply_before_any_change(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    # wrk-2's record directory is a plain file: its in-progress record cannot be written.
    s.lab.exec("wrk-2", "mkdir -p /var/lib/cargoship && : > /var/lib/cargoship/applied")
    result = s.apply(plan)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "could not write the in-progress record before the first change; nothing was " \
           "changed: wrk-2" in out, out
    for host in ("wrk-1", "wrk-2"):
        assert s.lab.exec(host, f"cat {REGISTRIES}").stdout == DRIFTED
    # wrk-1 took its record first: it is removed again, no journal of an apply that never
    # began is left.
    assert s.lab.exec("wrk-1", "ls /var/lib/cargoship/applied/ 2>/dev/null || true"
                      ).stdout == ""


@pytest.mark.reliability("fault: cargoship stopped by SIGTERM or SIGHUP mid-rollout")
def test_under_nohup_a_sighup_mid_rollout_changes_nothing_of_the_run(
        lab_factory, tmp_path: Path, tally) -> None:
    """`nohup cargoship apply ...` outlives its terminal: a signal ignored when apply
    started stays ignored (executor/signals.py), so every host is changed and the run
    ends as if nothing came."""
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, workers=3, drift=WORKERS)
    plan = s.plan()
    run = subprocess.Popen(["nohup", *cargoship_argv(), "apply", str(plan), "--confirm"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL)
    seen: list[str] = []
    wait_for_line(run, f"] wrote {REGISTRIES}", seen)
    run.send_signal(signal.SIGHUP)
    returncode, out, err = finish(run, seen)
    assert returncode == 0, out + err
    assert "SIGHUP" not in out + err and "Apply complete" in out, out + err
    assert all(s.lab.exec(h, f"cat {REGISTRIES}").stdout != DRIFTED for h in WORKERS), out
    assert _local_record(plan)["outcome"] != "interrupted"
