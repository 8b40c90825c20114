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


def test_a_marker_names_only_backup_directories_of_cargoships_own() -> None:
    from executor.file_writes import BACKUP_ROOT
    from planner.facts.interrupted import BACKUPS, _parse
    from planner.hosts.batch import Output

    plan_id = "0123456789abcdef0123456789abcdef"
    assert BACKUPS.fullmatch(f"{BACKUP_ROOT}/{plan_id}")
    good = _parse(Output(f'{{"plan_id": "{plan_id}", "since": "x", "step": "rolling back", '
                         f'"backups": "{BACKUP_ROOT}/{plan_id}"}}\n', 0))
    assert good is not None and good.rolling_back
    for hostile in ("/etc", f"{BACKUP_ROOT}/{plan_id}/../../../etc", f"{BACKUP_ROOT}/x"):
        marker = _parse(Output(f'{{"plan_id": "{plan_id}", "since": "x", "step": '
                               f'"rolling back", "backups": "{hostile}"}}\n', 0))
        assert marker is not None and marker.backups is None and not marker.rolling_back
