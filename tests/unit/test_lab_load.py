"""Lab.load reads a lab's lab.json: one another branch's code wrote (a timing setting this
code does not know) still loads, so `python -m tests.lab down --all` can take it down; one
it cannot read is a LabError, which `down --all` skips, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lab import Lab, LabError, Timing

LAB = {"index": 7, "distro": "rke2", "version": "v1.30.4+rke2r1", "tag": "cs0000aa",
       "token": "t", "kube_api": True, "etcd": False, "hosts": [{
           "spec": {"name": "ctl-1", "role": "controller"}, "index": 0,
           "address": "10.200.7.10", "netns": "cs0000aa-ctl-1", "dir": "/nowhere", "pid": 0}]}


def test_a_timing_setting_this_code_does_not_know_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "lab.json").write_text(json.dumps(
        {**LAB, "timing": {"kubelet_heartbeat": 2.0, "etcd_heartbeat_ms": 500}}))
    lab = Lab.load(tmp_path)
    assert lab.timing.kubelet_heartbeat == 2.0
    assert [h.name for h in lab.hosts] == ["ctl-1"]


def test_a_lab_started_with_a_start_this_code_refuses_still_loads(tmp_path: Path) -> None:
    # Older code allowed an instant start (FAST_NODES had 0): taking such a lab down needs
    # its hosts, not its timing.
    (tmp_path / "lab.json").write_text(json.dumps({**LAB, "timing": {"engine_start": 0}}))
    lab = Lab.load(tmp_path)
    assert lab.timing == Timing() and [h.name for h in lab.hosts] == ["ctl-1"]


@pytest.mark.parametrize("text", ["{not json", json.dumps({**LAB, "hosts": "ctl-1"}),
                                  json.dumps({k: v for k, v in LAB.items() if k != "tag"}),
                                  json.dumps({**LAB, "timing": ["a"]})])
def test_a_lab_json_this_code_cannot_read_is_a_lab_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "lab.json").write_text(text)
    with pytest.raises(LabError, match=r"lab\.json is not"):
        Lab.load(tmp_path)


def test_a_lab_start_shorter_than_two_seconds_is_refused() -> None:
    # A restarted controller's kubelet posts at half its start, once: within the second of
    # the stop, that post could never prove itself fresh (tests/lab/spec.py Timing).
    with pytest.raises(ValueError, match="at least 2 s"):
        Timing(engine_start=1.5)
    assert Timing(engine_start=2).engine_start == 2
