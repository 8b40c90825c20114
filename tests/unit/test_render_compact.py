"""Compact rendering: host ranges, grouping, the summary line, who gets preflight detail,
key-changes round trip through the plan file, and colours by the diff column."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from planner.plan import codec
from planner.plan.model import Change, HostRef, KeyChange, Note, Notice, PhaseOutcome
from planner.render import View, render_markdown, render_text, summary_line
from planner.render.groups import grouped, host_list
from tests.unit.test_plan_codec import DIFF, sample_plan

WORKER = "Sync Registry Config Worker"
REG = "/etc/rancher/rke2/registries.yaml"
KEY = (KeyChange("change", 'mirrors."docker.io".endpoint[0]', '"https://a"', '"https://b"'),)


def host(label: str) -> HostRef:
    """`wrk-1 (10.0.0.2)` as a host object."""
    name, _, address = label.partition(" (")
    return HostRef(name, address.rstrip(")"))


def change(label: str | None, **kw: object) -> Change:
    base = Change(host(label) if label else None, WORKER, "write-file", REG, "b", "a",
                  "--- r (live)\n+++ r (desired)\n@@ -1,3 +1,3 @@\n mirrors:\n   - keep\n"
                  "-  - https://a\n+  - https://b\n", True, True, key_changes=KEY)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_host_lists_compress_numbered_runs() -> None:
    names = [f"wrk-{i}" for i in (8, 1, 2, 3, 5, 6, 7, 10)] + ["edge-a", "ctl-1", "ctl-2"]
    assert host_list(names) == "ctl-1, ctl-2, edge-a, wrk-1..wrk-3, wrk-5..wrk-8, wrk-10"
    assert host_list(["10.0.0.11", "10.0.0.12", "10.0.0.13", None]) == \
        "10.0.0.11..10.0.0.13, this machine"


def test_identical_changes_group_and_different_ones_do_not() -> None:
    changes = [change(f"wrk-{i} (10.0.0.{i})") for i in range(1, 9)]
    changes.append(change("wrk-9 (10.0.0.9)", key_changes=(), diff="--- x\n+++ y\n"))
    groups = grouped(changes)
    assert [g.hosts for g in groups] == [tuple(f"wrk-{i}" for i in range(1, 9)), ("wrk-9",)]


def test_summary_line_counts_cargoships_nouns() -> None:
    plan = replace(sample_plan(), unassessed=(), changes=(
        change("ctl-1 (10.0.0.1)"), change("wrk-1 (10.0.0.2)"),
        change("wrk-1 (10.0.0.2)", target="/etc/rancher/rke2/other.yaml"),
        change("wrk-2 (10.0.0.3)", action="write-file-in-place", restart=False, drain=False),
        Change(host("wrk-3 (10.0.0.4)"), "Labeling nodes with their profile group",
               "label-node", "node/wrk-3", None, "true", "+ node-role.kubernetes.io/edge=true\n",
               node="wrk-3", label="node-role.kubernetes.io/edge")))
    assert summary_line(plan) == \
        "Plan: 4 files to change on 4 hosts, 2 restarts, 1 label, 0 unassessed."
    assert summary_line(replace(plan, changes=(), unassessed=(), problems=())) == \
        "No changes. Every host matches the desired engine config."


def test_preflight_detail_for_hosts_named_by_a_problem() -> None:
    phase = PhaseOutcome(5, "Validate hosts", "runs, reads only", "ran", (
        Note(host("ctl-1 (10.0.0.1)"), "root, arch amd64"),
        Note(host("wrk-1 (10.0.0.2)"), "root, arch arm"),
        Note(host("wrk-2 (10.0.0.3)"), "root, arch amd64")))
    plan = replace(sample_plan(), phases=(phase,), changes=(), unassessed=(), warnings=(),
                   problems=(Notice(host("wrk-1 (10.0.0.2)"), "Validate hosts",
                                    "CPU architecture arm is not supported"),))
    text = render_text(plan)
    assert "wrk-1 (10.0.0.2)  root, arch arm" in text and "2 other host(s) ok" in text
    assert "ctl-1 (10.0.0.1)" not in text
    assert "ctl-1 (10.0.0.1)  root, arch amd64" in render_text(plan, View(full=True))
    assert "| Validate hosts | wrk-1 (10.0.0.2) | root, arch arm |" in render_markdown(plan)


def test_colours_by_diff_column_not_content(tmp_path: Path) -> None:
    plan = replace(sample_plan(), changes=(change("wrk-1 (10.0.0.2)"),), unassessed=(),
                   phases=(PhaseOutcome(8, WORKER, "reported, not run", "planned"),))
    lines = render_text(plan, View(diff=True, color=True)).splitlines()
    assert "             - keep" in lines  # a YAML list item in context: no colour
    assert "\x1b[31m          -  - https://a\x1b[0m" in lines
    assert "\x1b[32m          +  - https://b\x1b[0m" in lines
    assert "\x1b[1m          --- r (live)\x1b[0m" in lines
    assert "\x1b[36m          @@ -1,3 +1,3 @@\x1b[0m" in lines
    assert ('\x1b[33m          ~ mirrors."docker.io".endpoint[0]: "https://a" -> '
            '"https://b"\x1b[0m') in lines
    # And through the plan file: key changes survive a round trip, inside the digest.
    path = tmp_path / "plan.json"
    real_keys = (KeyChange("change", 'configs."r.io".auth.password', '"***"',
                           '"*** (changed)"'),)  # what the sample plan's desired state holds
    real = replace(plan, changes=(replace(sample_plan().changes[0], key_changes=real_keys),))
    codec.write(real, path)
    assert codec.read(path).changes[0].key_changes == real_keys


def test_a_plan_made_before_key_changes_still_reads_and_shows_its_diff() -> None:
    import json

    data = codec.to_dict(replace(sample_plan(), changes=(
        replace(sample_plan().changes[0], key_changes=KEY),)))
    for item in data["changes"]:
        del item["key_changes"]
    data["digest"] = codec.digest_of(data)
    plan = codec.loads(json.dumps(data))
    assert plan.changes[0].key_changes == ()
    assert "-mirrors: {}" in render_text(plan)  # no summary by key: the diff instead
    assert DIFF.splitlines()[3] == "-mirrors: {}"
