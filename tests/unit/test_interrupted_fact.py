"""The in-progress marker as a plan reads it (planner/facts/interrupted.py)."""

from __future__ import annotations

from planner.facts.interrupted import INTERRUPTED, Interrupted
from planner.hosts.batch import Output


def test_no_marker() -> None:
    assert INTERRUPTED.parse(Output("none\n", 0)) is None


def test_a_marker_names_its_plan() -> None:
    out = Output('{"plan_id": "ab12", "since": "2026-12-01T06:00:00+00:00"}\n', 0)
    assert INTERRUPTED.parse(out) == Interrupted("ab12", "2026-12-01T06:00:00+00:00")


def test_a_corrupt_marker_still_means_interrupted() -> None:
    assert INTERRUPTED.parse(Output("{not json\n", 0)) == Interrupted("unknown", "unknown")
