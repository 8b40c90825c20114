"""The etcd look's parser and the quorum gate's decision, on what real etcd 3.4 members
printed in the lab (tests/unit/fixtures/etcd/, captured with planner/facts/sh/etcd_look.sh
on a 3-controller lab with --etcd: healthy, one member stopped, one paused, and ctl-1
without a quorum)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from planner.facts.etcd import PART_BYTES, EtcdLook, parse_etcd
from planner.facts.etcd_gate import CAUGHT_UP_ENTRIES, ControllerEtcd, judge, member_back
from planner.hosts.batch import FactParseError, Output

FIXTURES = Path(__file__).parent / "fixtures" / "etcd"
LABELS = ("ctl-1", "ctl-2", "ctl-3")


def look(name: str) -> EtcdLook:
    return parse_etcd(Output((FIXTURES / f"{name}.txt").read_text(), 0))


def healthy() -> dict[str, EtcdLook]:
    return {label: look(f"healthy-{label}") for label in LABELS}


def cluster(looks: dict[str, EtcdLook], engines: dict[str, str] | None = None
            ) -> list[ControllerEtcd]:
    return [ControllerEtcd(label, (engines or {}).get(label, "running"), value)
            for label, value in looks.items()]


def texts(verdict) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{who}: {what}" if who else what for who, what in verdict.problems]


def test_the_healthy_cluster_parses_and_passes() -> None:
    looks = healthy()
    status = looks["ctl-1"].status
    assert status is not None and status.leader is not None and status.applied_index > 0
    assert len(looks["ctl-1"].members or ()) == 3 and looks["ctl-1"].healthy is True
    assert looks["ctl-1"].readyz_ok is True
    verdict = judge(cluster(looks))
    assert verdict.gated and verdict.problems == (), verdict.problems
    assert "3 members healthy, leader on ctl-1" in verdict.summary
    for label in LABELS:
        assert judge(cluster(looks), stopping=label).problems == ()


def test_a_stopped_member_is_named_and_its_loss_breaks_the_quorum_of_the_next_stop() -> None:
    looks = {**healthy(), "ctl-2": look("stopped-ctl-2")}
    verdict = judge(cluster(looks))
    found = texts(verdict)
    assert "ctl-2: etcd member does not answer (connection refused (not running))" in found
    assert any(t.startswith("ctl-2: API server is not ready (/readyz: [-]etcd failed")
               for t in found), found
    assert any("would leave 1 of 3 etcd members healthy, and a quorum needs 2" in t
               for t in found), found
    # Right before ctl-1 is stopped: ctl-1 and ctl-3 answer, but ctl-1's stop would leave
    # ctl-3 alone.
    before = texts(judge(cluster(looks), stopping="ctl-1"))
    assert "stopping ctl-1 would leave 1 of 3 etcd members healthy, and a quorum needs 2" \
        in before, before


def test_a_paused_member_does_not_answer_and_a_member_without_quorum_says_so() -> None:
    paused = look("paused-ctl-3")
    assert paused.status is None and "no answer within 2 s" in paused.status_error
    lost = look("no-quorum-ctl-1")
    assert lost.status is not None and lost.status.leader is None
    assert lost.status.errors == ("etcdserver: no leader",) and lost.healthy is False
    found = texts(judge(cluster({"ctl-1": lost, "ctl-2": look("stopped-ctl-2"),
                                 "ctl-3": paused})))
    assert "ctl-1: etcd member reports: etcdserver: no leader" in found
    assert "ctl-1: etcd member is unhealthy (/health false)" in found
    assert any(t.startswith("ctl-3: etcd member does not answer (no answer") for t in found)


def _with_status(value: EtcdLook, **changes: object) -> EtcdLook:
    assert value.status is not None
    return dataclasses.replace(value, status=dataclasses.replace(value.status, **changes))


def test_a_member_behind_the_leader_is_not_caught_up() -> None:
    looks = healthy()
    leader = looks["ctl-1"]  # the fixtures' leader
    assert leader.status is not None
    looks["ctl-1"] = _with_status(leader, applied_index=leader.status.applied_index + 5000)
    assert len(looks) == 3
    found = texts(judge(cluster(looks)))
    assert any(t.startswith("ctl-2: etcd member is 49") and "behind the leader" in t
               for t in found), found
    # Within the bound: caught up.
    looks["ctl-1"] = _with_status(leader, applied_index=leader.status.applied_index
                                  + CAUGHT_UP_ENTRIES)
    assert judge(cluster(looks)).problems == ()


def test_members_disagreeing_on_the_leader() -> None:
    looks = healthy()
    looks["ctl-3"] = _with_status(looks["ctl-3"], leader="42")
    assert any("disagree on the leader" in t for t in texts(judge(cluster(looks))))


def test_a_stranger_or_a_learner_in_the_member_list() -> None:
    looks = healthy()
    members = looks["ctl-1"].members
    assert members is not None
    stranger = dataclasses.replace(members[0], id="99", name="old-ctl-4-deadbeef")
    for label in LABELS:
        looks[label] = dataclasses.replace(looks[label], members=(*members, stranger))
    found = texts(judge(cluster(looks)))
    assert any("4 members for 3 controllers: old-ctl-4-deadbeef (99) belong to no "
               "controller" in t for t in found), found
    learner = dataclasses.replace(members[0], learner=True)
    looks = {label: dataclasses.replace(value, members=(learner, *members[1:]))
             for label, value in healthy().items()}
    assert any("is a learner" in t for t in texts(judge(cluster(looks))))


def test_an_engine_not_running_is_a_problem() -> None:
    found = texts(judge(cluster(healthy(), {"ctl-3": "stopped"})))
    assert found == ["ctl-3: engine is stopped: start it and wait until it is ready"]


def test_two_members_tolerate_no_loss() -> None:
    looks = healthy()
    gone = looks.pop("ctl-3").status
    assert gone is not None
    for label, value in looks.items():
        kept = tuple(m for m in value.members or () if m.id != gone.member_id)
        looks[label] = dataclasses.replace(value, members=kept)
    found = texts(judge(cluster(looks)))
    assert any("add a third controller" in t for t in found), found


def test_not_gated_single_external_or_without_embedded_etcd() -> None:
    one = judge(cluster({"ctl-1": healthy()["ctl-1"]}))
    assert not one.gated and "single controller" in one.summary
    external = judge(cluster(healthy()), external=True)
    assert not external.gated and "external datastore" in external.summary
    none = parse_etcd(Output("etcd none\n== readyz [+]ping ok readyz check passed "
                             "cs-rc=0\n", 0))
    verdict = judge(cluster({label: none for label in LABELS}))
    assert not verdict.gated and "no embedded etcd" in verdict.summary
    # Some with certificates, some without: a problem, not a pass.
    mixed = {**healthy(), "ctl-3": none}
    assert any(t.startswith("ctl-3: no etcd client certificate")
               for t in texts(judge(cluster(mixed))))


def test_readyz_checks_named_either_way_and_curl_missing() -> None:
    ok = parse_etcd(Output("etcd certs\n== readyz [+]ping ok [+]etcd-readiness ok readyz "
                           "check passed cs-rc=0\n", 0))
    assert ok.readyz_ok is True
    bad = parse_etcd(Output("etcd certs\n== readyz [+]ping ok [-]etcd-readiness failed: "
                            "reason withheld readyz check failed cs-rc=0\n", 0))
    assert bad.readyz_ok is False and bad.readyz_detail.startswith("[-]etcd-readiness failed")
    no_curl = parse_etcd(Output("etcd no-curl\n", 0))
    looks = {**healthy(), "ctl-1": no_curl}
    assert any(t.startswith("ctl-1: curl is not installed") for t in texts(judge(cluster(looks))))


@pytest.mark.parametrize("text", [
    "",
    "etcd maybe\n",
    "etcd certs\n== status {\"header\": 1} cs-rc=0\n",
    "etcd certs\n== status [1, 2] cs-rc=0\n",
    "etcd certs\n== status {\"header\":{\"member_id\":\"x\"}} cs-rc=0\n",
    "etcd certs\n== members {\"members\": []} cs-rc=0\n",
    "etcd certs\n== status {\"header\":{\"member_id\":\"" + "9" * 30 + "\"}} cs-rc=0\n",
])
def test_unreadable_looks_are_refused(text: str) -> None:
    with pytest.raises(FactParseError):
        parse_etcd(Output(text, 0))


def test_a_part_cut_short_is_not_taken_for_an_answer() -> None:
    cut = parse_etcd(Output("etcd certs\n== status {\"header\":" + "x" * 100 + "\n", 0))
    assert cut.status is None and f"longer than {PART_BYTES}" in cut.status_error


def test_back_means_listed_healthy_and_caught_up() -> None:
    looks = healthy()
    assert member_back(cluster(looks), "ctl-2") is None
    # Restarted and still catching up: the leader is far ahead.
    leader = looks["ctl-1"]
    assert leader.status is not None
    ahead = {**looks, "ctl-1": _with_status(leader, applied_index=leader.status.applied_index
                                            + 3000)}
    assert (member_back(cluster(ahead), "ctl-2") or "").startswith(
        "its etcd member is 29") and "entries behind the leader" in (
        member_back(cluster(ahead), "ctl-2") or "")
    assert member_back(cluster({**looks, "ctl-2": look("stopped-ctl-2")}), "ctl-2") == \
        "its etcd member does not answer (connection refused (not running))"
    assert member_back(cluster({**looks, "ctl-1": look("no-quorum-ctl-1")}), "ctl-1") == \
        "its etcd member reports: etcdserver: no leader"
    # Not in the member list (removed, or a new member not yet added).
    unlisted = {label: dataclasses.replace(value, members=tuple(
        m for m in value.members or () if not m.name.startswith("ctl-2")))
        for label, value in looks.items()}
    assert "is not in the member list" in (member_back(cluster(unlisted), "ctl-2") or "")
