"""Applying a plan again (executor/replay.py): what the records found on its hosts allow,
without a lab. tests/e2e/test_interrupted_apply.py is the end-to-end proof."""

from __future__ import annotations

from typing import Any

import pytest

from executor.apply import ApplyRefused
from executor.replay import Earlier, judge, key, name

PLAN = "0123456789abcdef0123456789abcdef"
CTL = ("10.0.0.1", 22)
WRK = ("10.0.0.2", 2222)


def host(name: str, at: tuple[str, int]) -> dict[str, Any]:
    return {"name": name, "address": at[0], "port": at[1]}


def record(status: str, *, interrupted: bool | None = True, at: str = "2026-12-01T03:00:00",
           changes: tuple[dict[str, Any], ...] = (), where: dict[str, Any] | None = None,
           ) -> dict[str, Any]:
    found: dict[str, Any] = {"plan_id": PLAN, "status": status, "applied_at": at,
                             "changes": list(changes)}
    if interrupted is not None:
        found["interrupted"] = interrupted
    if where is not None:
        found["host"] = where
    return found


def change(at: tuple[str, int] | None, target: str, status: str,
           action: str = "write-file") -> dict[str, Any]:
    return {"host": None if at is None else host("h", at), "action": action,
            "target": target, "status": status}


def test_no_record_anywhere_is_a_first_apply() -> None:
    assert judge(PLAN, {}) == Earlier()
    assert judge(PLAN, {}).record is None  # apply says "resumed" only when there was one


def test_a_run_that_was_not_interrupted_means_already_applied() -> None:
    for finished in (False, None):  # False, or a record that does not say
        found = {CTL: record("applied", interrupted=finished,
                             where=host("ctl-1", CTL))}
        with pytest.raises(ApplyRefused, match=rf"^plan {PLAN} was already applied "
                                               r"\(records on ctl-1 \(10\.0\.0\.1\)\); "
                                               "make a new plan$"):
            judge(PLAN, found)


def test_one_uninterrupted_record_among_interrupted_ones_is_enough_to_refuse() -> None:
    found = {CTL: record("applied", where=host("ctl-1", CTL)),
             WRK: record("unchanged", interrupted=False)}
    with pytest.raises(ApplyRefused, match=r"already applied \(records on ctl-1 "
                                           r"\(10\.0\.0\.1\), 10\.0\.0\.2:2222\)"):
        judge(PLAN, found)


def test_interrupted_with_a_true_that_is_not_true_is_already_applied() -> None:
    # Only a JSON true says interrupted: "yes" or 1 in an edited record does not.
    for odd in ("yes", 1):
        found = {CTL: record("applied")}
        found[CTL]["interrupted"] = odd
        with pytest.raises(ApplyRefused, match="already applied"):
            judge(PLAN, found)


@pytest.mark.parametrize("status", ["failed", "rolled back", "in progress", "unknown"])
def test_an_interrupted_run_that_left_a_host_broken_cannot_be_finished(status: str) -> None:
    found = {CTL: record("applied", where=host("ctl-1", CTL)),
             WRK: record(status, where=host("wrk-1", WRK))}
    with pytest.raises(ApplyRefused) as refused:
        judge(PLAN, found)
    assert str(refused.value) == (
        f"plan {PLAN} was interrupted and can't be finished: in that run "
        f"wrk-1 (10.0.0.2:2222) {status}; nothing was changed. Make a new plan "
        "(cargoship plan -c CLUSTER.yaml -out PLAN.json) and apply that")


def test_a_record_without_a_status_cannot_be_finished() -> None:
    found = {CTL: record("applied")}
    del found[CTL]["status"]
    with pytest.raises(ApplyRefused, match=r"in that run 10\.0\.0\.1:22 None;"):
        judge(PLAN, found)


@pytest.mark.parametrize("status", ["applied", "unchanged", "not started"])
def test_each_resumable_state_on_its_own_can_be_finished(status: str) -> None:
    earlier = judge(PLAN, {CTL: record(status)})
    assert earlier.finished == (frozenset({CTL}) if status == "applied" else frozenset())


def test_finished_hosts_done_changes_and_the_newest_record() -> None:
    ctl = record("applied", at="2026-12-01T03:00:05", where=host("ctl-1", CTL), changes=(
        change(CTL, "/etc/rancher/rke2/config.yaml", "done"),
        change(WRK, "/etc/rancher/rke2/config.yaml", "in progress"),
        change(None, "~/.kube/config", "not done", action="merge-kubeconfig")))
    wrk = record("not started", at="2026-12-01T03:00:09", where=host("wrk-1", WRK), changes=(
        change(CTL, "/etc/rancher/rke2/config.yaml", "done"),
        change(WRK, "/etc/rancher/rke2/registries.yaml", "done"),
        change(None, "prod", "done", action="merge-kubeconfig")))
    other = record("unchanged", at="2026-12-01T03:00:01")
    earlier = judge(PLAN, {CTL: ctl, WRK: wrk, ("10.0.0.3", 22): other})
    assert earlier.finished == frozenset({CTL})  # applied only: unchanged/not started run
    assert earlier.done == frozenset({
        (CTL, "write-file", "/etc/rancher/rke2/config.yaml"),
        (WRK, "write-file", "/etc/rancher/rke2/registries.yaml"),
        (None, "merge-kubeconfig", "prod"),
    })
    assert earlier.record is wrk  # the newest by its time, not the first found
    # Whichever order the hosts were read in.
    again = judge(PLAN, {("10.0.0.3", 22): other, WRK: wrk, CTL: ctl})
    assert again.record is wrk


def test_the_newest_record_is_the_last_one_written_even_when_it_comes_first() -> None:
    newest = record("applied", at="2026-12-01T03:00:09")
    older = record("applied", at="2026-12-01T03:00:05")
    assert judge(PLAN, {CTL: newest, WRK: older}).record is newest


def test_a_record_without_changes_has_none_done() -> None:
    found = {CTL: record("applied")}
    del found[CTL]["changes"]
    assert judge(PLAN, found) == Earlier(frozenset({CTL}), frozenset(), found[CTL])


def test_record_host_keys_and_names() -> None:
    assert key({"name": "a", "address": "10.0.0.9", "port": "2200"}) == ("10.0.0.9", 2200)
    assert key(None) is None
    assert key("10.0.0.9") is None
    # The name comes from the record, where from the host it was read on.
    assert name({"host": host("ctl-1", ("10.9.9.9", 1))}, CTL) == "ctl-1 (10.0.0.1)"
    assert name({"host": host("10.0.0.1", CTL)}, CTL) == "10.0.0.1"
    assert name({}, WRK) == "10.0.0.2:2222"


@pytest.mark.parametrize("changes", [
    5, "done", [5, None, "x"],
    [{"host": {"name": "h", "address": "10.0.0.1", "port": "22x"}, "action": "write-file",
      "target": "/etc/x", "status": "done"}],
    [{"host": {"name": "h", "address": "10.0.0.1"}, "action": "write-file",
      "target": "/etc/x", "status": "done"}],
    [{"host": {"name": "h", "address": "10.0.0.1", "port": True}, "action": "write-file",
      "target": "/etc/x", "status": "done"}],
    [{"host": "10.0.0.1", "action": "merge-kubeconfig", "target": "prod", "status": "done"}],
])
def test_changes_a_record_lists_that_name_no_change_claim_nothing(changes: Any) -> None:
    # Root on one host writes its record as it likes: what names no change, or no host by
    # its address and port, is no claim (never a crash, never the local machine's change).
    found = record("applied")
    found["changes"] = changes
    assert judge(PLAN, {CTL: found}) == Earlier(frozenset({CTL}), frozenset(), found)


def test_a_port_written_as_its_digits_alone_names_the_host() -> None:
    assert key({"address": "10.0.0.9", "port": "2200"}) == ("10.0.0.9", 2200)
    assert key({"address": "10.0.0.9", "port": "\u00b2"}) is None
    assert key({"address": "10.0.0.9", "port": "9" * 5000}) is None
    assert key({"address": 5, "port": 22}) is None
