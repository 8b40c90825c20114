"""The plan file codec: round trips, and strict refusal of anything edited or unknown."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from planner.plan import codec
from planner.plan.model import (
    Change,
    HostIdentity,
    HostRef,
    KeyChange,
    Note,
    Notice,
    PhaseOutcome,
    Plan,
    Unassessed,
)

CTL1 = HostRef("ctl-1", "10.0.0.1", 22)

DIFF = ("--- /etc/rancher/rke2/registries.yaml (live)\n"
        "+++ /etc/rancher/rke2/registries.yaml (desired)\n"
        "@@ -1 +1,4 @@\n-mirrors: {}\n+configs:\n+  r.io:\n+    auth:\n"
        "+      password: '*** (changed)'\n# mode 644 -> 600\n")


def sample_plan() -> Plan:
    return Plan(
        plan_id="0123456789abcdef0123456789abcdef",
        created_at="2026-12-01T03:00:00.000Z",
        created_by="alice@laptop",
        cargoship_version="0.1.0",
        config_digest="a" * 64,
        cluster="prod-eu",
        desired={"cluster": "prod-eu", "engine": {"distro": "rke2", "version": "v1.30.4+rke2r1"},
                 "hosts": [], "options": {},
                 "engineConfig": {"registries": {"configs": {"r.io": {"auth": {
                     "password": {"secret": "env:PW", "digest": "hmac-sha256:ab"}}}}}}},
        hosts=(HostIdentity("ctl-1", "10.0.0.1", 22, "controller", None,
                            "SHA256:" + "A" * 43, "Ubuntu 22.04", "amd64", "v1.30.4+rke2r1",
                            {"/etc/rancher/rke2/registries.yaml": "sha256:" + "b" * 64}),),
        phases=(PhaseOutcome(1, "Connect to hosts", "runs, reads only", "ran",
                             (Note(CTL1, "connected"), Note(None, "cluster-wide"))),),
        changes=(Change(CTL1, "Sync Registry Config Controller", "write-file",
                        "/etc/rancher/rke2/registries.yaml", "sha256:" + "b" * 64,
                        "sha256:" + "c" * 64, DIFF, drain=True, restart=True),),
        unassessed=(Unassessed("Labeling nodes with their profile group", CTL1, "why",
                               "label-node"),),
        warnings=(Notice(None, None, "a warning"),),
        salt="00" * 16,
    )


def test_round_trip_is_identical(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    plan = sample_plan()
    codec.write(plan, path)
    again = codec.read(path)
    assert again == plan
    codec.write(again, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
    data = json.loads(path.read_text())
    assert data["summary"] == {"hosts": 1, "changes": 1, "hosts_changed": 1, "restarts": 1,
                               "unassessed": 1, "warnings": 1, "problems": 0}


def test_truncated_plan_is_refused_with_one_line(tmp_path: Path) -> None:
    text = codec.dumps(sample_plan())
    with pytest.raises(codec.PlanFileError, match=r"not valid JSON at line \d+ .*truncated"):
        codec.loads(text[: len(text) // 2], "plan.json")


def test_edited_plan_is_refused_by_its_digest() -> None:
    data = json.loads(codec.dumps(sample_plan()))
    data["changes"][0]["target"] = "/etc/rancher/rke2/config.yaml"
    with pytest.raises(codec.PlanFileError, match="integrity digest does not match"):
        codec.loads(json.dumps(data), "plan.json")


def test_a_format_version_of_digits_int_refuses_is_no_plan_file() -> None:
    data = json.loads(codec.dumps(sample_plan()))
    for version in ("\u00b2.0", "9" * 5000 + ".0", "\u0662.0"):
        data["format_version"] = version
        with pytest.raises(codec.PlanFileError, match="not a plan file"):
            codec.loads(json.dumps(data), "plan.json")


def test_unknown_major_format_version_is_refused_before_the_schema() -> None:
    data = json.loads(codec.dumps(sample_plan()))
    for old_or_new in ("1.0", "3.0"):
        data["format_version"] = old_or_new
        data["something_new"] = True
        with pytest.raises(codec.PlanFileError,
                           match=rf"plan format version {old_or_new} is not supported .*"
                                 r"reads 2\.x.*re-plan"):
            codec.loads(json.dumps(data), "plan.json")


@pytest.mark.parametrize(("edit", "where"), [
    ({"action": "write-file", "restart": False}, r"changes\[0\]\.restart"),
    ({"action": "label-node", "node": None, "restart": False, "drain": False},
     r"changes\[0\]\.node"),
    ({"action": "merge-kubeconfig", "restart": False, "drain": False, "context": "c"},
     r"changes\[0\]\.host"),
    ({"host": "ctl-1 (10.0.0.1)"}, r"changes\[0\]\.host"),
    ({"action": "Write File"}, r"changes\[0\]\.action"),
])
def test_each_action_is_held_to_the_fields_it_needs(edit, where) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(codec.dumps(sample_plan()))
    data["changes"][0].update(edit)
    data["digest"] = codec.digest_of(data)
    with pytest.raises(codec.PlanFileError, match=where):
        codec.loads(json.dumps(data), "plan.json")


def test_schema_violations_name_the_place() -> None:
    data = json.loads(codec.dumps(sample_plan()))
    data["hosts"][0]["port"] = "22"
    with pytest.raises(codec.PlanFileError, match=r"hosts\[0\]\.port"):
        codec.loads(json.dumps(data), "plan.json")


@pytest.mark.parametrize("text", ["", "[]", "null", '{"format_version": 1}', "[" * 100000])
def test_garbage_is_refused(text: str) -> None:
    with pytest.raises(codec.PlanFileError):
        codec.loads(text, "plan.json")


def test_an_invalid_plan_is_never_written(tmp_path: Path) -> None:
    bad = replace(sample_plan(), plan_id="not-hex")
    with pytest.raises(codec.PlanFileError):
        codec.write(bad, tmp_path / "plan.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("where", "value", "expected"), [
    (("engineConfig", "charts"), {"../../../../etc/cron.d/x": {"values": {}}},
     r"desired\.engineConfig\.charts: .*got '\.\./"),
    (("engineConfig", "registries", "configs", "r.io", "auth", "password"),
     {"secret": "vault:x", "digest": "hmac-sha256:ab"}, r"desired\.engineConfig\.registries"),
    (("hosts",), [{"index": 0, "role": "controller", "profile": None,
                   "hostname": "$(touch /tmp/pwned)", "private_interface": None,
                   "private_address": None, "ssh": {"address": "10.0.0.1", "port": 22,
                   "user": None, "key_path": None, "known_hosts": None, "bastion": None}}],
     r"desired\.hosts\[0\]\.hostname"),
    (("options",), {"kubeconfig_path": "a\nb"}, r"desired\.options\.kubeconfig_path"),
])
def test_an_edited_desired_state_is_held_to_the_config_rules(where, value, expected) -> None:  # type: ignore[no-untyped-def]
    # Someone who edits a plan can recompute its digest: the digest is not what stops a
    # value the config schema would have refused.
    data = json.loads(codec.dumps(sample_plan()))
    parent = data["desired"]
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    data["digest"] = codec.digest_of(data)
    with pytest.raises(codec.PlanFileError, match=expected):
        codec.loads(json.dumps(data), "plan.json")


# The text a reviewer reads is the plan's own: an edited diff with a recomputed digest is
# refused (planner.plan.verify).

def _with_diff(diff: str, before: str | None = "sha256:" + "b" * 64,
               target: str | None = None) -> str:
    plan = sample_plan()
    change = replace(plan.changes[0], diff=diff, before=before,
                     target=target or plan.changes[0].target)
    return codec.dumps(replace(plan, changes=(change,)))


@pytest.mark.parametrize("diff, says", [
    (DIFF.replace("'*** (changed)'", "hunter2"), "new side at line 1 is not what the plan"),
    (DIFF.replace("+configs:", "+mirrors: {}"), "new side at line 1"),
    (DIFF.replace("@@ -1 +1,4 @@", "@@ -1 +1,3 @@"), "text outside its hunks"),
    (DIFF.replace("644 -> 600", "644 -> 644"), "promises mode 644"),
    (DIFF.replace("(desired)", "(wanted)"), "its diff is not of that file"),
    (DIFF + "+  evil: true\n", "text outside its hunks"),
    # Digits int() refuses (over 4300 of them) or reads though they are not ASCII: a
    # malformed header, never a crash or another script's numbers believed.
    (DIFF.replace("@@ -1 +1,4 @@", "@@ -1 +1," + "9" * 5000 + " @@"), "a malformed hunk header"),
    (DIFF.replace("@@ -1 +1,4 @@", "@@ -1 +1,\u0664 @@"), "a malformed hunk header"),
    (DIFF.replace("644 -> 600", "644 -> 999"), "promises mode 999"),
    (DIFF.replace("644 -> 600", "644 -> \u0666\u0660\u0660"), "promises mode"),
])
def test_an_edited_diff_is_refused_even_with_its_digest_recomputed(diff: str, says: str) -> None:
    with pytest.raises(codec.PlanFileError, match="the plan was edited after it was made"
                       ) as refused:
        codec.loads(_with_diff(diff), "plan.json")
    assert says in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_a_change_of_mode_or_owner_alone_is_a_note_that_must_promise_the_desired_ones() -> None:
    codec.loads(_with_diff("# mode 644 -> 600, owner 1000:0 -> 0:0 (uid:gid)\n"), "plan.json")
    with pytest.raises(codec.PlanFileError, match="promises owner 1000:0"):
        codec.loads(_with_diff("# owner 0:0 -> 1000:0 (uid:gid)\n"), "plan.json")


def test_a_create_must_show_the_whole_file() -> None:
    partial = DIFF.replace("@@ -1 +1,4 @@\n-mirrors: {}\n", "@@ -0,0 +1,2 @@\n").replace(
        "+    auth:\n+      password: '*** (changed)'\n", "")
    with pytest.raises(codec.PlanFileError, match="does not show the whole file"):
        codec.loads(_with_diff(partial, before=None), "plan.json")


def test_a_change_of_a_file_the_desired_state_does_not_write_is_refused() -> None:
    with pytest.raises(codec.PlanFileError, match="writes no such file there"):
        codec.loads(_with_diff(DIFF, target="/etc/rancher/rke2/config.yaml"), "plan.json")


def _with_keys(*keys: KeyChange) -> str:
    plan = sample_plan()
    return codec.dumps(replace(plan, changes=(replace(plan.changes[0], key_changes=keys),)))


def test_key_changes_must_say_what_the_desired_state_holds() -> None:
    path = 'configs."r.io".auth.password'
    codec.loads(_with_keys(KeyChange("change", path, '"***"', '"*** (changed)"')), "p.json")
    codec.loads(_with_keys(KeyChange("remove", "mirrors", '{}', None)), "p.json")
    for lie, says in [
            (KeyChange("add", 'mirrors."docker.io".endpoint[0]', None, '"https://ok"'),
             "is not what the plan would write"),
            (KeyChange("change", path, '"***"', '"hunter2"'), "is not what the plan would"),
            (KeyChange("remove", path, '"***"', None), "says configs"),
    ]:
        with pytest.raises(codec.PlanFileError, match=says):
            codec.loads(_with_keys(lie), "p.json")


WRK1 = HostRef("wrk-1", "10.0.0.2", 22)
CONNECT, DETECT, SYNC = "Connect to hosts", "Detect OS", "Sync Registry Config Worker"


def partly_reached() -> Plan:
    """ctl-1 read; wrk-1 unreachable: failed in phase 1, skipped in phase 2, never read by
    the sync phase."""
    plan = sample_plan()
    return replace(
        plan,
        hosts=(*plan.hosts, HostIdentity("wrk-1", "10.0.0.2", 22, "worker", None, None, None,
                                         None, None)),
        phases=(PhaseOutcome(1, CONNECT, "runs, reads only", "ran", (Note(CTL1, "connected"),)),
                PhaseOutcome(2, DETECT, "runs, reads only", "ran",
                             (Note(CTL1, "Ubuntu 22.04"),)),
                PhaseOutcome(3, SYNC, "reported, not run", "unassessed")),
        unassessed=(Unassessed(SYNC, WRK1, "host not read: unreachable", None),),
        problems=(Notice(WRK1, CONNECT, "cannot connect to 10.0.0.2:22: timed out"),),
        applyable=False, complete=False)


def test_each_phase_counts_its_hosts_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    plan = partly_reached()
    codec.write(plan, path)
    data = json.loads(path.read_text())
    assert data["format_version"] == "2.1"
    assert [p["hosts"] for p in data["phases"]] == [
        {"ok": 1, "failed": 1, "skipped": 0}, {"ok": 1, "failed": 0, "skipped": 1}, None]
    again = codec.read(path)
    assert again == plan
    codec.write(again, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_host_counts_are_required_from_2_1_and_must_be_the_plans_own() -> None:
    data = json.loads(codec.dumps(partly_reached()))
    missing = json.loads(json.dumps(data))
    del missing["phases"][1]["hosts"]
    missing["digest"] = codec.digest_of(missing)
    with pytest.raises(codec.PlanFileError, match=r"phases\[1\]"):
        codec.loads(json.dumps(missing), "plan.json")
    for lie in ({"ok": 2, "failed": 0, "skipped": 0}, None):
        edited = json.loads(json.dumps(data))
        edited["phases"][0]["hosts"] = lie
        edited["digest"] = codec.digest_of(edited)
        with pytest.raises(codec.PlanFileError,
                           match=r"phases\[0\]\.hosts: .* are not the counts of the phase's"):
            codec.loads(json.dumps(edited), "plan.json")
    wrong = json.loads(json.dumps(data))
    wrong["phases"][0]["hosts"] = {"ok": 1, "failed": 1}
    wrong["digest"] = codec.digest_of(wrong)
    with pytest.raises(codec.PlanFileError, match=r"phases\[0\]\.hosts"):
        codec.loads(json.dumps(wrong), "plan.json")


def test_a_2_0_plan_is_read_and_written_as_it_was(tmp_path: Path) -> None:
    # A plan of the older minor has no host counts: read as it is, its digest (and so its
    # signatures) unchanged when written again.
    old = replace(partly_reached(), format_version="2.0")
    text = codec.dumps(old)
    data = json.loads(text)
    assert data["format_version"] == "2.0"
    assert all("hosts" not in p for p in data["phases"])
    again = codec.loads(text, "old.json")
    assert again == old
    assert codec.dumps(again) == text
    assert codec.plan_digest(again) == data["digest"]
