"""Faults 4 to 6: the cluster side of a host's restart goes wrong.

4. The engine fails to start with the new config: the old files come back, the engine runs
   again, the rollout stops. It fails even with the old config: cargoship stops, reports,
   and leaves the node cordoned, saying so; a later plan offers to recover the host.
5. The node never becomes Ready after the restart: timeout, then the same rollback.
6. A PodDisruptionBudget blocks eviction forever: the drain times out, the node is
   uncordoned, nothing was changed, the rollout stops.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.e2e.cli import edit_config
from tests.e2e.test_rollout_fidelity import requested, restarted_by_cargoship
from tests.reliability.consistency import check
from tests.reliability.scenario import DRIFTED, REGISTRIES, drifted_cluster

FAULT = "/var/lib/rancher/rke2/lab-fault"


def outcome(stdout: str, host: str) -> str:
    return next(line for line in stdout.splitlines() if line.strip().startswith(f"{host} ("))


@pytest.mark.reliability("fault: engine fails to start with the new config")
def test_engine_refusing_the_new_config_is_rolled_back(lab_factory, tmp_path: Path,
                                                       tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path, drift=())
    edit_config(s.config, lambda d: d["spec"]["engineConfig"]["registries"]["mirrors"]
                ["docker.io"].update(endpoint=["https://broken.invalid"]))
    plan = s.plan()
    s.lab.record_service_requests("ctl-1")
    since = time.time()
    result = s.apply(plan)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ": rolled back: " in outcome(result.stdout, "ctl-1"), result.stdout
    # The old files came back under an engine cargoship restarted, not under runit's
    # next respawn of the crash-looping one.
    restarted_by_cargoship(s.lab, "ctl-1", since)
    # runit restarts the failing engine: a crash loop, seen well before the ready timeout,
    # with the engine's own words from the host, indented under the host's outcome line.
    line = outcome(result.stdout, "ctl-1")
    assert "rke2-server is crash-looping" in line
    below = result.stdout.split(line, 1)[1]
    assert "does not resolve" in below.split("\n  wrk-1 (", 1)[0], result.stdout
    assert "not started: an earlier host failed" in outcome(result.stdout, "wrk-1")
    # Nothing changed for good anywhere: every host keeps its old content, which the
    # (now broken) desired config still wants replaced.
    managed = [m.__class__(m.host, m.path, m.old, "never") for m in s.managed]
    verdict = check(s.lab, managed, config=s.config, plan_ids=[s.plan_id(plan)], work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    assert s.lab.exec("ctl-1", f"cat /var/lib/cargoship/backups/{s.plan_id(plan)}{REGISTRIES}"
                      ).stdout == s.managed[0].old


@pytest.mark.reliability("fault: engine fails to start even with the old config")
def test_engine_failing_with_any_config_stops_and_leaves_the_node_cordoned(
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    plan = s.plan()
    s.lab.exec("wrk-1", f"echo fail-start > {FAULT}")
    s.lab.record_service_requests("wrk-1")
    since = time.time()
    result = s.apply(plan)
    assert result.returncode == 1, result.stdout + result.stderr
    line = outcome(result.stdout, "wrk-1")
    assert "ROLLBACK FAILED" in line and "the node is left cordoned" in line
    # The rollback restored the file and started the engine on it: said so, and the end's
    # list of what each host is left with says that alone, not the failure's story again.
    left = ("the previous files are back in place (backups also in /var/lib/cargoship/"
            f"backups/{s.plan_id(plan)} on the host); the engine was started again but was "
            "not seen back; the node is left cordoned")
    assert line.endswith(left) and "may still be stopped" not in line, line
    assert re.search(rf"^  wrk-1 \([0-9.]+\): {re.escape(left)}$",
                     result.stdout.split("Each host is left with:", 1)[1], re.M), result.stdout
    # And as it happened, in the progress above the outcome.
    assert re.search(r"\[wrk-1 \([0-9.]+\)\] ROLLBACK FAILED: rke2-agent is crash-looping",
                     result.stdout.split(line, 1)[0]), result.stdout
    # The rollback did ask for the engine's stop and start on the old files (the start
    # failed as well): it gave up on a restart it made, not on a crash loop it waited out.
    assert requested(s.lab, "wrk-1", since) == ["down", "up", "down", "up"], \
        s.lab.service_requests("wrk-1", since)
    assert "not started" in outcome(result.stdout, "wrk-2")
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path, cordoned_ok={"wrk-1"}, engine_down_ok={"wrk-1"})
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    # The restore itself worked: the old file is back.
    assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    # Once the engine is fixed, a new plan recovers the host and finishes the job: the run
    # stopped while rolling back, so the host's backups are put back first (not a restart
    # on whatever files the rollback left), then the desired file written.
    s.lab.exec("wrk-1", f"rm -f {FAULT}")
    second = s.plan("second.json")
    changes = json.loads(second.read_text())["changes"]
    actions = {(c["host"]["name"], c["action"]) for c in changes}
    assert {("wrk-1", "restore-backup"), ("wrk-1", "write-file")} <= actions, actions
    # The apply ended (its rollback failed); nothing killed it, and the plan does not say so.
    [why] = [c["diff"] for c in changes if c["action"] == "restore-backup"]
    assert f"an apply of plan {s.plan_id(plan)} stopped on this host while rolling back a " \
           "failed change (killed, or its rollback failed; since " in why, why
    done = s.apply(second)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = check(s.lab, s.managed, config=s.config, work=tmp_path,
                    plan_ids=[s.plan_id(plan), s.plan_id(second)])
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems


@pytest.mark.reliability("fault: node never Ready after restart")
def test_a_node_that_never_gets_ready_is_rolled_back(lab_factory, tmp_path: Path,
                                                     tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    edit_config(s.config, lambda d: d["spec"]["options"].update(readyTimeoutSeconds=5))
    plan = s.plan()
    s.lab.exec("wrk-1", f"echo not-ready-once > {FAULT}")
    s.lab.record_service_requests("wrk-1")
    since = time.time()
    started = time.monotonic()
    result = s.apply(plan)
    assert time.monotonic() - started >= 5  # it waited out the ready timeout
    assert result.returncode == 1, result.stdout + result.stderr
    line = outcome(result.stdout, "wrk-1")
    assert ": rolled back: " in line and "not back after 5 s" in line
    assert "wrk-1 not Ready" in line
    assert "not started" in outcome(result.stdout, "wrk-2")
    # The engine read the new file at its start: only a restart puts the old one in force.
    restarted_by_cargoship(s.lab, "wrk-1", since)
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED


@pytest.mark.reliability("fault: PodDisruptionBudget blocks the drain")
def test_a_pod_disruption_budget_stops_the_drain(lab_factory, tmp_path: Path, tally) -> None:
    tally.case()
    s = drifted_cluster(lab_factory, tmp_path)
    edit_config(s.config, lambda d: d["spec"]["options"].update(drain={"timeoutSeconds": 3}))
    s.lab.api("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "default", "labels": {"app": "db"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                          "name": "db", "uid": "u1", "controller": True}]},
        "spec": {"nodeName": "wrk-1", "containers": [{"name": "db", "image": "db:1"}]}})
    s.lab.api("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db-pdb", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    plan = s.plan()
    started = time.monotonic()
    result = s.apply(plan)
    assert time.monotonic() - started >= 3
    assert result.returncode == 1, result.stdout + result.stderr
    line = outcome(result.stdout, "wrk-1")
    assert "db-pdb" in line and "nothing was changed" in line
    # The wait is said when it begins (it may last the whole timeout), and its end.
    progress = result.stdout.split(line, 1)[0]
    assert re.search(r"\[wrk-1 \([0-9.]+\)\] draining: waiting for default/db-0 \(a "
                     r"disruption budget allows no eviction now\), up to the 3 s drain "
                     r"timeout\n.*\[wrk-1 \([0-9.]+\)\] FAILED: node wrk-1: eviction blocked",
                     progress, re.S), progress
    assert re.search(r"^  wrk-1 \([0-9.]+\): its previous config \(nothing was changed\)$",
                     result.stdout.split("Each host is left with:", 1)[1], re.M), result.stdout
    verdict = check(s.lab, s.managed, config=s.config, plan_ids=[s.plan_id(plan)],
                    work=tmp_path)
    tally.add_lost(verdict.lost)
    assert verdict, verdict.problems
    assert s.lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    assert s.lab.api("GET", "/api/v1/namespaces/default/pods/db-0")["spec"]["nodeName"] == "wrk-1"
