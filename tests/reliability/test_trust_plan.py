"""Trust chain, plan side: the plan a person approved is the one applied, and an approved
plan can't be replayed over a newer one. End to end through `cargoship plan` and `apply` on
lab hosts."""

from __future__ import annotations

import json
import os
import pty
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.lab import Lab
from tests.reliability.labs import config_copy, shared_lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DRIFTED = "mirrors: {}\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from shared_lab(tmp_path_factory)


def plan(lab: Lab, out: Path) -> str:
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return str(json.loads(out.read_text())["plan_id"])


@pytest.mark.reliability("trust: no replay of old plans")
def test_a_plan_made_before_another_was_applied_is_refused_even_if_hosts_look_the_same(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    plan(lab, old)
    new_id = plan(lab, new)
    applied = cargoship("apply", new, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    # Someone puts the host back the way it was when the old plan was made: its files look
    # exactly as the old plan saw them, and only the order of applies tells it is stale.
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    replayed = cargoship("apply", old, "--confirm", timeout=300)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    # The deciding reason leads, in one line.
    first = replayed.stderr.strip().splitlines()[0]
    assert f"superseded by plan {new_id} (applied to " in first, replayed.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED  # nothing changed
    # A plan made now is the way forward.
    fresh = tmp_path / "fresh.json"
    plan(lab, fresh)
    assert cargoship("apply", fresh, "--confirm", timeout=300).returncode == 0


def _read_until(fd: int, wanted: bytes, deadline: float) -> bytes:
    seen = b""
    while wanted not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {wanted!r} in {seen[-500:]!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    return seen


@pytest.mark.reliability("trust: one read of the plan")
def test_the_plan_shown_at_the_prompt_is_the_one_applied(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    approved, other = tmp_path / "plan.json", tmp_path / "other.json"
    approved_id = plan(lab, approved)
    # Another genuine plan of the same hosts with another mirror: the file someone with
    # write access to the runner swaps in while the operator reads the prompt.
    evil = config_copy(lab, tmp_path / "evil.yaml")
    edit_config(evil, lambda d: d["spec"]["engineConfig"]["registries"]["mirrors"][
        "docker.io"].update(endpoint=["https://evil.example"]))
    result = cargoship("plan", "-c", evil, "-out", other)
    assert result.returncode == 0, result.stdout + result.stderr
    pid, fd = pty.fork()
    if pid == 0:  # the operator's terminal
        argv = [*cargoship_argv(), "apply", str(approved)]
        os.execv(argv[0], argv)
    deadline = time.monotonic() + 240
    try:
        shown = _read_until(fd, b"Only 'yes' is accepted: ", deadline)
        assert approved_id.encode() in shown and b"evil.example" not in shown
        os.replace(other, approved)
        os.write(fd, b"yes\n")
        rest = _read_until(fd, b"record: ", deadline)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, rest.decode(errors="replace")
    assert f"Plan {approved_id} applied".encode() in rest
    live = lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    assert "mirror.lab.internal" in live and "evil.example" not in live


@pytest.mark.reliability("trust: one read of the plan")
@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_plan_path_that_is_not_a_regular_file_is_refused(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally, kind: str) -> None:
    tally.case()
    real = tmp_path / "real.json"
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    plan(lab, real)
    path = tmp_path / "plan.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(real)
    else:
        path.mkdir()
    for command in (["apply", path, "--confirm"], ["show", path]):
        result = cargoship(*command, timeout=60)
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stderr.startswith(f"error: {path}: ") and \
            len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED


def _edit_plan(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Edit a plan file the way an attacker with write access would: then recompute its
    digest, so only cargoship's own checks stand in the way."""
    from planner.plan.codec import digest_of

    data = json.loads(path.read_text())
    edit(data)
    data["digest"] = digest_of(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


@pytest.mark.reliability("trust: what is shown is what is applied")
def test_a_harmless_diff_cannot_stand_for_a_harmful_desired_state(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    # The desired mirror becomes the attacker's; the reviewed diff still shows the lab's.
    _edit_plan(plan_file, lambda d: d["desired"]["engineConfig"]["registries"]["mirrors"][
        "docker.io"].update(endpoint=["https://evil.example"]))
    for command in (["show", plan_file], ["show", plan_file, "--markdown"],
                    ["apply", plan_file, "--confirm"]):
        result = cargoship(*command, timeout=300)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "is not what the plan would write" in result.stderr, result.stderr
        assert "mirror.lab.internal" not in result.stdout  # the harmless diff is never shown
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED


@pytest.mark.reliability("trust: what is shown is what is applied")
def test_an_edited_old_side_of_a_diff_is_refused_at_apply(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)

    def hide_the_old_side(data: dict) -> None:  # type: ignore[type-arg]
        # What the host had is only the host's to say: offline it can't be checked...
        for change in data["changes"]:
            change["diff"] = change["diff"].replace("-mirrors: {}", "-mirrors: {} # same")
    _edit_plan(plan_file, hide_the_old_side)
    assert cargoship("show", plan_file).returncode == 0
    # ... so apply asks the host, and refuses before changing anything.
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "the diff shown for /etc/rancher/rke2/registries.yaml is not what this plan would " \
           "do" in applied.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED


@pytest.mark.reliability("trust: records never lost together")
def test_a_local_record_that_cannot_be_written_costs_no_host_its_record(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan_id = plan(lab, plan_file)
    (tmp_path / "plan.applied.json").mkdir()  # something in the way of the local record
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "could not write the local apply record" in applied.stdout
    assert "wrk-1" in applied.stdout and ": applied" in applied.stdout  # outcomes printed
    for host in ("ctl-1", "wrk-1"):
        record = json.loads(lab.exec(host, f"cat /var/lib/cargoship/applied/{plan_id}.json")
                            .stdout)
        assert record["plan_id"] == plan_id and record["outcome"] == "applied"


@pytest.mark.reliability("trust: what is shown is what is applied")
def test_key_changes_a_compact_plan_leads_with_are_the_plans_own(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case(2)
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    [change] = json.loads(plan_file.read_text())["changes"]
    assert change["key_changes"], change  # the compact view shows these, not the diff
    lying, hiding = tmp_path / "lying.json", tmp_path / "hiding.json"
    for path, edit in ((lying, "lie"), (hiding, "hide")):
        path.write_text(plan_file.read_text())

        def edit_keys(data: dict, edit: str = edit) -> None:  # type: ignore[type-arg]
            keys = data["changes"][0]["key_changes"]
            if edit == "lie":
                keys[0]["after"] = '"https://harmless.example"'
            else:
                keys.pop()
        _edit_plan(path, edit_keys)
    shown = cargoship("show", lying)
    assert shown.returncode == 1 and "is not what the plan would write" in shown.stderr
    # A key change left out: only the host can tell, so apply does.
    assert cargoship("show", hiding).returncode == 0
    applied = cargoship("apply", hiding, "--confirm", timeout=300)
    assert applied.returncode == 1 and "is not what this plan would do" in applied.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
