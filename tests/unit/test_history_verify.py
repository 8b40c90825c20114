"""Which records history believes (planner/history_verify.py), as pure decisions."""

from __future__ import annotations

from typing import Any

import pytest

from planner.history_verify import shared_digests, verified_signers, verify

HOSTS = ["10.0.0.1:22", "10.0.0.2:22", "10.0.0.3:22"]


def record(**changes: Any) -> dict[str, Any]:
    return {"plan_id": "a" * 32, "plan_digest": "sha256:" + "1" * 64, "plan_hosts": HOSTS,
            "applied_by": "ops", "changes": [{"target": "/x", "status": "done"}],
            "signatures": [], **changes}


def test_agreeing_records_on_every_host_are_verified() -> None:
    copies = {h: {**record(), "host": h, "status": "applied"} for h in HOSTS}
    verdict = verify(copies, set(HOSTS), in_progress=False)
    assert verdict.verified and verdict.why == [] and verdict.dissent == []


def test_one_dissenting_record_is_outvoted_and_named() -> None:
    copies = {h: record() for h in HOSTS}
    copies[HOSTS[2]] = record(changes=[])
    verdict = verify(copies, set(HOSTS), in_progress=False)
    assert verdict.verified and verdict.dissent == [HOSTS[2]]
    assert verdict.record["changes"] == [{"target": "/x", "status": "done"}]


def test_no_majority_is_unverified() -> None:
    copies = {HOSTS[0]: record(), HOSTS[1]: record(changes=[])}
    verdict = verify(copies, {HOSTS[0], HOSTS[1]}, in_progress=False)
    assert not verdict.verified and "no majority agrees" in verdict.why[0]


def test_a_record_only_one_host_holds_is_unverified() -> None:
    verdict = verify({HOSTS[0]: record()}, set(HOSTS), in_progress=False)
    assert not verdict.verified
    assert verdict.why == ["no record of it on 10.0.0.2:22, 10.0.0.3:22, host(s) of the plan"]
    # Unless the plan's own record says those hosts could not take theirs.
    missing = [{"address": "10.0.0.2", "port": 22}, {"address": "10.0.0.3", "port": 22}]
    assert verify({HOSTS[0]: record(records_missing_on=missing)}, set(HOSTS),
                  in_progress=False).verified


def test_records_without_a_digest_are_unverified() -> None:
    old = {h: {k: v for k, v in record().items() if k != "plan_digest"} for h in HOSTS}
    assert not verify(old, set(HOSTS), in_progress=False).verified


def test_a_digest_copied_into_another_plan_stays_with_the_verified_one() -> None:
    real = verify({h: record() for h in HOSTS}, set(HOSTS), in_progress=False)
    fake = verify({HOSTS[0]: record(plan_id="b" * 32, plan_hosts=[HOSTS[0]])}, set(HOSTS),
                  in_progress=False)
    assert fake.verified  # alone it looks whole
    verdicts = {"a" * 32: real, "b" * 32: fake}
    shared_digests(verdicts)
    assert real.verified and not fake.verified
    assert fake.why == [f"its digest is also claimed by plan(s) {'a' * 32}"]


def test_signers_come_from_the_check_never_the_record() -> None:
    signed = record(signers=["alice"], signatures=[{"key": "k1", "signature": "s1"},
                                                   {"key": "k2", "signature": "s2"}])
    assert verified_signers(signed, lambda d, s: "bob" if s["key"] == "k2" else None) == ["bob"]


def test_a_record_held_by_a_host_the_plan_does_not_name_is_unverified() -> None:
    # One host forges a record of a plan that never touched it, naming only itself as
    # missing elsewhere: the plan's own host list decides who may hold its record.
    stranger = "10.0.0.9:22"
    missing = [{"address": a, "port": 22} for a in ("10.0.0.1", "10.0.0.2", "10.0.0.3")]
    verdict = verify({stranger: record(records_missing_on=missing)}, {stranger, *HOSTS},
                     in_progress=False)
    assert not verdict.verified
    assert verdict.why == [f"held by {stranger}, which the plan does not name"]


@pytest.mark.parametrize("odd", [{"plan_hosts": ["10.0.0.1:22", {"a": 1}]},
                                 {"plan_hosts": ["10.0.0.1:22", ["b"], None, 5]},
                                 {"records_missing_on": 5}, {"records_missing_on": "x"}])
def test_a_record_s_lists_holding_what_no_host_is_never_stop_the_verdict(odd: dict[str, Any]
                                                                         ) -> None:
    # Root on one host writes its record as it likes: anything in a list that cannot name
    # a host is left out, and the verdict is reached as for the rest.
    record = {"plan_digest": "sha256:" + "0" * 64, "plan_hosts": ["10.0.0.1:22"], **odd}
    verdict = verify({"10.0.0.1:22": record}, {"10.0.0.1:22"}, in_progress=False)
    assert verdict.verified, verdict.why
