"""An apply stopped by Ctrl-C is recorded and shown as interrupted, and applying the same
plan again finishes the hosts it did not reach (after the drift check), or says why it
can't and what to run instead."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from planner.host_paths import RECORD_DIR
from tests.e2e.cli import cargoship
from tests.e2e.test_apply import engine_pid
from tests.reliability.scenario import (
    DRIFTED,
    REGISTRIES,
    drifted_cluster,
    finish,
    start_apply,
    wait_for_line,
)

WORKERS = ("wrk-1", "wrk-2", "wrk-3")


def test_interrupted_apply_is_recorded_shown_and_finished(lab_factory,
                                                          tmp_path: Path) -> None:
    s = drifted_cluster(lab_factory, tmp_path, workers=3, drift=WORKERS)
    plan = s.plan()
    plan_id = s.plan_id(plan)
    wanted = s.lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, "] cordoned", seen)  # wrk-1 is in progress
    run.send_signal(signal.SIGINT)
    code, out, err = finish(run, seen)
    assert code == 130, out + err
    assert f"Plan {plan_id} interrupted; record: " in out
    assert f"run `cargoship apply {plan} --confirm` again to finish them" in out
    record = json.loads((tmp_path / "plan.applied.json").read_text())
    assert (record["outcome"], record["ok"], record["interrupted"]) == (
        "interrupted", False, True)
    status = {h["host"]["name"]: h["status"] for h in record["hosts"]}
    assert status == {"ctl-1": "unchanged", "wrk-1": "applied", "wrk-2": "not started",
                      "wrk-3": "not started"}
    assert cargoship("show", tmp_path / "plan.applied.json").stdout.startswith(
        f"apply record of plan {plan_id} (cluster {record['cluster']}): interrupted")

    history = cargoship("history", "-c", s.config)
    assert f"plan {plan_id}  interrupted  applied " in history.stdout, history.stdout
    entry = json.loads(cargoship("history", "-c", s.config, "--json").stdout)["plans"][0]
    assert entry["state"] == "interrupted"
    assert {c["host"]["name"]: c["status"] for c in entry["changes"]} == {
        "wrk-1": "done", "wrk-2": "not done", "wrk-3": "not done"}

    # An unreached host that drifted since: the usual drift check refuses.
    s.lab.exec("wrk-3", f"printf 'mirrors: {{b: {{}}}}\\n' > {REGISTRIES}")
    drifted = s.apply(plan)
    assert drifted.returncode == 1
    # The refusal lists each reason under its headline, with the hosts it holds for.
    assert f"\n  - {REGISTRIES} changed since the plan was made: on wrk-3\n" in \
        drifted.stderr, drifted.stderr
    s.lab.exec("wrk-3", f"printf '{DRIFTED}' > {REGISTRIES}")  # back to what was planned

    # Root on wrk-2 rewrites its own record's changes: what names no change, or no host by
    # its address and port, claims nothing, and the apply goes on as the others' say.
    path = f"{RECORD_DIR}/{plan_id}.json"
    own = json.loads(s.lab.exec("wrk-2", f"cat {path}").stdout)
    own["changes"] = [5, "done", {"host": {"name": "wrk-3", "address": s.lab.host(
        "wrk-3").address, "port": "22x"}, "action": "write-file", "target": REGISTRIES,
        "status": "done"}]
    s.lab.exec("wrk-2", f"cat > {path}", input=json.dumps(own))

    pid = engine_pid(s.lab, "wrk-1")
    again = s.apply(plan)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"finishing plan {plan_id}: 1 host(s) were finished by the interrupted run" in \
        again.stdout
    assert "[wrk-1 (" not in again.stdout  # the finished host is not touched again
    assert engine_pid(s.lab, "wrk-1") == pid
    assert all(s.lab.exec(h, f"cat {REGISTRIES}").stdout == wanted for h in WORKERS)
    record = json.loads((tmp_path / "plan.applied.json").read_text())
    assert (record["outcome"], record["resumed"]) == ("applied", True)
    assert {h["host"]["name"]: h["status"] for h in record["hosts"]} == {
        "ctl-1": "unchanged", "wrk-1": "applied", "wrk-2": "applied", "wrk-3": "applied"}
    history = cargoship("history", "-c", s.config)
    assert f"plan {plan_id}  applied (current)" in history.stdout
    assert "The hosts match the desired config now." in history.stdout
    twice = s.apply(plan)
    assert twice.returncode == 1 and "was already applied" in twice.stderr


def test_an_interrupted_apply_that_rolled_a_host_back_is_not_finished(
        lab_factory, tmp_path: Path) -> None:
    s = drifted_cluster(lab_factory, tmp_path, workers=2, drift=("wrk-1", "wrk-2"))
    plan = s.plan()
    run = start_apply(plan)
    assert run.stdout is not None
    seen: list[str] = []
    wait_for_line(run, "] cordoned", seen)
    run.send_signal(signal.SIGINT)
    code, out, err = finish(run, seen)
    assert code == 130, out + err
    # As the record of a run whose host in progress failed and was rolled back says (the
    # engine faults that cause it are driven in tests/reliability): finishing such a plan
    # would apply half of a change someone must look at first.
    path = f"/var/lib/cargoship/applied/{s.plan_id(plan)}.json"
    record = json.loads(s.lab.exec("wrk-1", f"cat {path}").stdout)
    assert record["status"] == "applied"
    record["status"] = "rolled back"
    s.lab.exec("wrk-1", f"cat > {path}", input=json.dumps(record))
    refused = s.apply(plan)
    assert refused.returncode == 1
    address = s.lab.host("wrk-1").address
    assert refused.stderr == (
        f"error: plan {s.plan_id(plan)} was interrupted and can't be finished: in that run "
        f"wrk-1 ({address}) rolled back; nothing was changed. Make a new plan (cargoship "
        "plan -c CLUSTER.yaml -out PLAN.json) and apply that\n")
    assert s.lab.exec("wrk-2", f"cat {REGISTRIES}").stdout == DRIFTED
