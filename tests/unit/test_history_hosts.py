"""Every host of a plan stays in its history entry (planner/history.py): one whose own
record was not read gets the status the records that were read give it, and says why."""

from __future__ import annotations

from typing import Any

from planner.history import _not_held
from planner.plan.hostref import HostRef


def _record(*hosts: tuple[str, str, str]) -> dict[str, Any]:
    return {"hosts": [{"host": {"name": name, "address": address, "port": 22},
                       "status": status} for name, address, status in hosts]}


RECORD = _record(("ctl-1", "10.0.0.1", "applied"), ("wrk-1", "10.0.0.2", "applied"),
                 ("wrk-2", "10.0.0.3", "not started"))


def test_a_host_not_read_now_keeps_its_line_with_the_others_word() -> None:
    held = {"10.0.0.1:22": object(), "10.0.0.3:22": object()}
    found = _not_held(RECORD, held, read={"10.0.0.1:22", "10.0.0.3:22"})
    assert found == {HostRef("wrk-1", "10.0.0.2", 22):
                     "applied (as the other hosts' records say; not read now)"}


def test_a_host_read_without_its_record_says_it_is_missing() -> None:
    held = {"10.0.0.1:22": object()}
    found = _not_held(RECORD, held, read={"10.0.0.1:22", "10.0.0.2:22", "10.0.0.3:22"})
    assert found[HostRef("wrk-2", "10.0.0.3", 22)] == \
        "not started (as the other hosts' records say; its own record of this plan is missing)"
    assert len(found) == 2


def test_a_malformed_host_entry_is_passed_over() -> None:
    record = {"hosts": [{"host": {"address": "10.0.0.9", "port": "22"}}, "x",
                        {"host": {"address": "10.0.0.8", "port": True}}, {"host": None}]}
    assert _not_held(record, {}, read=set()) == {}
    assert _not_held({"hosts": "all"}, {}, read=set()) == {}


def test_an_unverified_record_adds_no_host_to_its_entry() -> None:
    # One host's word is not enough to put hosts in the entry that nobody read: root on
    # that host could list any.
    from planner.history import _entry
    from planner.history_verify import Verdict

    copies = {"10.0.0.1:22": (HostRef("ctl-1", "10.0.0.1", 22), {"status": "applied"}, None)}
    read = {"10.0.0.1:22"}
    trusted = _entry("p1", copies, Verdict(RECORD, True), None, read)
    alone = _entry("p1", copies, Verdict(RECORD, False, ["only one host"]), None,
                   read)
    assert len(trusted.outcomes) == 3
    assert list(alone.outcomes) == [HostRef("ctl-1", "10.0.0.1", 22)]
