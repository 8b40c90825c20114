"""Every rule of the drift comparison (executor/drift.py differences), without a lab: each
test changes one thing between the saved plan and the fresh one and expects exactly the
messages that rule gives. The lab tests (tests/e2e) stay as the end-to-end proof."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from executor import drift
from executor.drift import change_key
from planner.facts.applied import TARGET as APPLIED
from planner.plan.model import Change, HostIdentity, HostRef, KeyChange, Plan, Unassessed
from tests.unit.test_plan_codec import CTL1, sample_plan

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
CONFIG = "/etc/rancher/rke2/config.yaml"
OTHER_ID = "fedcba9876543210fedcba9876543210"
WRK1 = HostRef("wrk-1", "10.0.0.2", 22)


def differences(saved: Plan, fresh: Plan, **seen: Any) -> list[str]:
    """drift.differences, a line each: `host: what`, or `what` for the cluster's."""
    return [f"{host}: {text}" if host is not None else text
            for host, text in drift.differences(saved, fresh, **seen)]


def digest(c: str) -> str:
    return "sha256:" + c * 64


def worker(**changed: object) -> HostIdentity:
    host = HostIdentity("wrk-1", "10.0.0.2", 22, "worker", None, "SHA256:" + "W" * 43,
                        "Ubuntu 22.04", "amd64", "v1.30.4+rke2r1",
                        {REGISTRIES: digest("d"), APPLIED: "none"})
    return replace(host, **changed)  # type: ignore[arg-type]


def worker_change(**changed: object) -> Change:
    made = Change(WRK1, "Sync Registry Config Worker", "write-file", REGISTRIES,
                  digest("d"), digest("e"), "--- a\n+++ b\n", restart=True)
    return replace(made, **changed)  # type: ignore[arg-type]


def two_hosts() -> Plan:
    """The sample plan with a worker too, and the applied-plans read on both hosts."""
    plan = sample_plan()
    ctl = replace(plan.hosts[0], reads={**plan.hosts[0].reads, APPLIED: "none"})
    return replace(plan, hosts=(ctl, worker()), changes=(*plan.changes, worker_change()))


def with_host(plan: Plan, index: int, **changed: object) -> Plan:
    hosts = list(plan.hosts)
    hosts[index] = replace(hosts[index], **changed)  # type: ignore[arg-type]
    return replace(plan, hosts=tuple(hosts))


def test_a_plan_matches_itself() -> None:
    # Kills any rule inverted into "report when equal".
    plan = two_hosts()
    assert differences(plan, plan) == []
    assert differences(plan, replace(plan)) == []
    assert differences(sample_plan(), sample_plan()) == []


def test_a_host_gone_is_named() -> None:
    saved = two_hosts()
    fresh = replace(saved, hosts=saved.hosts[:1])
    assert differences(saved, fresh) == ["wrk-1 (10.0.0.2): no longer in the cluster"]


def test_a_new_host_is_named() -> None:
    saved = two_hosts()
    fresh = replace(saved, hosts=(*saved.hosts, worker(name="wrk-2", address="10.0.0.3")))
    assert differences(saved, fresh) == ["wrk-2 (10.0.0.3): new host, not in the plan"]


def test_hosts_are_their_address_and_port_and_listed_in_order() -> None:
    saved = two_hosts()
    moved = replace(saved, hosts=(saved.hosts[0], worker(port=2222),
                                  worker(name="wrk-0", address="10.0.0.0", port=2222)))
    # Same name and address on another port is another host; a renamed host is the same.
    assert differences(saved, moved) == [
        "wrk-1 (10.0.0.2): no longer in the cluster",
        "wrk-0 (10.0.0.0:2222): new host, not in the plan",
        "wrk-1 (10.0.0.2:2222): new host, not in the plan",
    ]
    renamed = with_host(saved, 1, name="worker-one")
    assert differences(saved, renamed) == []


def test_a_changed_host_key_is_named() -> None:
    saved = two_hosts()
    fresh = with_host(saved, 1, host_key="SHA256:" + "X" * 43)
    assert differences(saved, fresh) == [
        f"wrk-1 (10.0.0.2): SSH host key changed (SHA256:{'W' * 43} -> SHA256:{'X' * 43})"]
    # An unreachable host in the plan (no key) that answers now is drift too.
    unknown = with_host(saved, 1, host_key=None)
    assert differences(unknown, saved) == [
        f"wrk-1 (10.0.0.2): SSH host key changed (None -> SHA256:{'W' * 43})"]


def test_a_changed_engine_version_is_named() -> None:
    saved = two_hosts()
    fresh = with_host(saved, 1, engine_version="v1.31.0+rke2r1")
    assert differences(saved, fresh) == [
        "wrk-1 (10.0.0.2): engine version changed (v1.30.4+rke2r1 -> v1.31.0+rke2r1)"]


def test_a_changed_read_is_named_whether_changed_added_or_gone() -> None:
    saved = two_hosts()
    reads = saved.hosts[1].reads
    changed = with_host(saved, 1, reads={**reads, REGISTRIES: digest("0")})
    assert differences(saved, changed) == [
        f"wrk-1 (10.0.0.2): {REGISTRIES} changed since the plan was made"]
    added = with_host(saved, 1, reads={**reads, CONFIG: "absent"})
    assert differences(saved, added) == [
        f"wrk-1 (10.0.0.2): {CONFIG} changed since the plan was made"]
    gone = with_host(saved, 1, reads={APPLIED: "none"})
    assert differences(saved, gone) == [
        f"wrk-1 (10.0.0.2): {REGISTRIES} changed since the plan was made"]


def test_every_changed_read_of_every_host_is_named_in_order() -> None:
    saved = two_hosts()
    fresh = with_host(saved, 1, reads={REGISTRIES: digest("0"), CONFIG: "absent",
                                       APPLIED: "none"})
    fresh = with_host(fresh, 0, reads={**saved.hosts[0].reads, REGISTRIES: digest("1")})
    assert differences(saved, fresh) == [
        f"ctl-1 (10.0.0.1): {REGISTRIES} changed since the plan was made",
        f"wrk-1 (10.0.0.2): {CONFIG} changed since the plan was made",
        f"wrk-1 (10.0.0.2): {REGISTRIES} changed since the plan was made",
    ]


def test_a_plan_that_did_not_read_the_applied_plans_is_refused() -> None:
    saved = two_hosts()
    older = with_host(saved, 1, reads={REGISTRIES: digest("d")})  # an older cargoship
    assert differences(older, saved) == [
        "wrk-1 (10.0.0.2): the plan does not say which plans were applied here when it was "
        "made (an older cargoship?)"]
    # Neither read it: nothing to compare (the rule is about the plan lacking the read).
    assert differences(older, older) == []


def test_a_plan_applied_since_supersedes_this_one() -> None:
    saved = two_hosts()
    since = with_host(saved, 1, reads={**saved.hosts[1].reads,
                                       APPLIED: f"1 applied, newest {OTHER_ID}, set abcd"})
    assert differences(saved, since) == [
        f"wrk-1 (10.0.0.2): superseded by plan {OTHER_ID}"]
    # A fingerprint that names no plan (a record removed since) still supersedes.
    removed = with_host(saved, 1, reads={**saved.hosts[1].reads, APPLIED: "garbled"})
    assert differences(saved, removed) == [
        "wrk-1 (10.0.0.2): superseded by plan (unknown)"]


def test_changes_other_than_the_planned_ones_are_refused() -> None:
    saved = two_hosts()
    planned = "the changes to make are not the ones planned"
    ctl_change, wrk_change = saved.changes
    for changes in (
        (ctl_change,),  # one fewer
        (ctl_change, wrk_change, worker_change(target=CONFIG)),  # one more
        (ctl_change, replace(wrk_change, after=digest("f"))),  # another result
        (ctl_change, replace(wrk_change, before=digest("f"))),  # from another start
        (ctl_change, replace(wrk_change, action="delete-file")),
        (ctl_change, replace(wrk_change, host=HostRef("wrk-1", "10.0.0.2", 2222))),
    ):
        assert differences(saved, replace(saved, changes=changes)) == [planned], changes
    # The same changes in another order are the same changes.
    assert differences(saved, replace(saved, changes=(wrk_change, ctl_change))) == []


def test_other_changes_are_not_named_on_top_of_host_drift() -> None:
    saved = two_hosts()
    fresh = with_host(replace(saved, changes=saved.changes[:1]), 1,
                      engine_version="v1.31.0+rke2r1")
    assert differences(saved, fresh) == [
        "wrk-1 (10.0.0.2): engine version changed (v1.30.4+rke2r1 -> v1.31.0+rke2r1)"]


def test_finished_hosts_skip_version_and_reads_but_not_the_host_key() -> None:
    saved = two_hosts()
    wrk = saved.hosts[1].ref.key
    done = {change_key(saved.changes[1])}
    rewritten = with_host(replace(saved, changes=saved.changes[:1]), 1,
                          engine_version="v1.31.0+rke2r1",
                          reads={REGISTRIES: digest("e"), APPLIED: "garbled"})
    assert differences(saved, rewritten, finished={wrk}, done=done) == []
    # Not finished, the same fresh plan is drift.
    assert differences(saved, rewritten, done=done) == [
        "wrk-1 (10.0.0.2): engine version changed (v1.30.4+rke2r1 -> v1.31.0+rke2r1)",
        f"wrk-1 (10.0.0.2): {REGISTRIES} changed since the plan was made",
        "wrk-1 (10.0.0.2): superseded by plan (unknown)",
    ]
    # A finished host is still held to its key; the other hosts to everything.
    rekeyed = with_host(rewritten, 1, host_key="SHA256:" + "X" * 43)
    rekeyed = with_host(rekeyed, 0, engine_version="v1.31.0+rke2r1")
    assert differences(saved, rekeyed, finished={wrk}, done=done) == [
        "ctl-1 (10.0.0.1): engine version changed (v1.30.4+rke2r1 -> v1.31.0+rke2r1)",
        f"wrk-1 (10.0.0.2): SSH host key changed (SHA256:{'W' * 43} -> SHA256:{'X' * 43})",
    ]


def test_changes_done_by_the_interrupted_run_are_not_expected_again() -> None:
    saved = two_hosts()
    made = replace(saved, changes=saved.changes[:1])  # the worker's change was made
    done = {change_key(saved.changes[1])}
    assert differences(saved, made, done=done) == []
    assert differences(saved, made) == ["the changes to make are not the ones planned"]
    # Done, yet planned again (it did not stick): not the changes planned.
    assert differences(saved, saved, done=done) == [
        "the changes to make are not the ones planned"]
    # `done` names the change by host, action and target: another target is not it.
    other = {(WRK1.key, "write-file", CONFIG)}
    assert differences(saved, made, done=other) == [
        "the changes to make are not the ones planned"]


def test_finished_hosts_may_have_their_unassessed_items_planned_now() -> None:
    saved = two_hosts()  # unassessed: label-node on ctl-1
    ctl = CTL1.key
    label = Change(CTL1, "Labeling nodes with their profile group", "label-node", "ctl-1",
                   None, "pool=a", "", node="ctl-1", label="pool")
    # Assessed now, so planned now: the fresh plan has it as a change, no longer unassessed.
    now = replace(saved, changes=(*saved.changes, label), unassessed=())
    assert differences(saved, now, finished={ctl}) == []
    # Only for a host that run finished...
    assert differences(saved, now) == ["the changes to make are not the ones planned"]
    assert differences(saved, now, finished={WRK1.key}) == [
        "the changes to make are not the ones planned"]
    # ...and only the action the plan deferred there.
    kubeconfig = replace(label, action="merge-kubeconfig", target="prod")
    other = replace(saved, changes=(*saved.changes, kubeconfig), unassessed=())
    assert differences(saved, other, finished={ctl}) == [
        "the changes to make are not the ones planned"]


def test_a_deferred_local_item_may_be_planned_once_any_host_finished() -> None:
    saved = replace(two_hosts(), unassessed=(
        Unassessed("Admin access", None, "why", "merge-kubeconfig"),))
    merge = Change(None, "Admin access", "merge-kubeconfig", "~/.kube/config", None,
                   digest("9"), "", context="prod")
    now = replace(saved, changes=(*saved.changes, merge), unassessed=())
    assert differences(saved, now, finished={WRK1.key}) == []
    assert differences(saved, now) == ["the changes to make are not the ones planned"]


def test_an_edited_diff_is_refused() -> None:
    saved = two_hosts()
    ctl_change, wrk_change = saved.changes
    # What the reviewer read (saved) is not what this apply would do (fresh).
    fresh = replace(saved, changes=(ctl_change, replace(wrk_change, diff="--- x\n+++ y\n")))
    edited = (f"wrk-1 (10.0.0.2): the diff shown for {REGISTRIES} is not what this plan "
              "would do (the plan was edited after it was made); re-plan")
    assert differences(saved, fresh) == [edited]
    keys = replace(saved, changes=(ctl_change, replace(wrk_change, key_changes=(
        KeyChange("add", "mirrors", None, "{}"),))))
    assert differences(saved, keys) == [edited]
    # Only on top of nothing else: drift is reported first, and alone.
    drifted = with_host(fresh, 1, engine_version="v1.31.0+rke2r1")
    assert differences(saved, drifted) == [
        "wrk-1 (10.0.0.2): engine version changed (v1.30.4+rke2r1 -> v1.31.0+rke2r1)"]


def test_an_edited_local_diff_names_the_local_machine() -> None:
    merge = Change(None, "Admin access", "merge-kubeconfig", "~/.kube/config", None,
                   digest("9"), "+ context prod\n", context="prod")
    saved = replace(two_hosts(), changes=(merge,))
    fresh = replace(saved, changes=(replace(merge, diff="+ context other\n"),))
    assert differences(saved, fresh) == [
        "local: the diff shown for ~/.kube/config is not what this plan would do (the plan "
        "was edited after it was made); re-plan"]


def test_a_change_done_already_has_no_diff_to_compare() -> None:
    saved = two_hosts()
    done = {change_key(saved.changes[1])}
    made = replace(saved, changes=saved.changes[:1])
    # The saved diff of a change no longer planned is not compared with anything.
    assert differences(replace(saved, changes=(
        saved.changes[0], replace(saved.changes[1], diff="edited"))), made, done=done) == []


def test_a_read_the_plan_could_not_make_is_not_claimed_as_changed() -> None:
    # The plan left wrk-1's labels unassessed (its node was due a restart), so it never
    # read them: the fresh read is new, not "changed since the plan was made" (issue 29).
    # On a host the plan read in full, a new read is still drift (the test above).
    saved = two_hosts()
    wrk = saved.hosts[1].ref
    saved = replace(saved, unassessed=(Unassessed("Label nodes", wrk, "restart first",
                                                  "label-nodes"),))
    label = "label:node-role.kubernetes.io/edge"
    fresh = with_host(saved, 1, reads={**saved.hosts[1].reads, label: "absent"})
    assert differences(saved, fresh) == []
    dropin = "/etc/rancher/rke2/config.yaml.d/99-late.yaml"
    appeared = with_host(saved, 1, reads={**saved.hosts[1].reads, dropin: digest("9")})
    assert differences(saved, appeared) == [
        f"wrk-1 (10.0.0.2): {dropin} changed since the plan was made"]
    ctl = with_host(saved, 0, reads={**saved.hosts[0].reads, label: "absent"})
    assert differences(saved, ctl) == [
        f"ctl-1 (10.0.0.1): {label} changed since the plan was made"]
