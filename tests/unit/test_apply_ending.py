"""How an apply ends (cargoship/outcome.py): each host's outcome, the summary, and on a
failure what every host is left with, said once, not the failure's story again."""

from __future__ import annotations

from types import SimpleNamespace

from cargoship.outcome import apply_outcome_lines
from executor.host_job import HostOutcome


def _ending(*hosts: tuple[str, HostOutcome]) -> list[str]:
    result = SimpleNamespace(hosts=list(hosts), after_rollout=[], warnings=[],
                             ok=all(o.status in ("applied", "unchanged") for _, o in hosts),
                             interrupted=False)
    return apply_outcome_lines(result, 4.0)


def test_a_failed_host_is_left_with_what_its_outcome_says_is_left() -> None:
    story = ("rke2-agent is crash-looping; ROLLBACK FAILED: rke2-agent is crash-looping; "
             "the previous files are back in place; the engine was started again but was "
             "not seen back; the node is left cordoned")
    left = ("the previous files are back in place; the engine was started again but was "
            "not seen back; the node is left cordoned")
    lines = _ending(("ctl-1 (10.0.0.1)", HostOutcome("ctl-1", "applied", restarts=1)),
                    ("wrk-1 (10.0.0.2)", HostOutcome("wrk-1", "failed", story, 2, left=left)),
                    ("wrk-2 (10.0.0.3)", HostOutcome("wrk-2", "not started", "an earlier "
                                                     "host failed")))
    assert "  wrk-1 (10.0.0.2): failed: " + story in lines
    ending = lines[lines.index("Each host is left with:") + 1:]
    assert ending == ["  ctl-1 (10.0.0.1): the new config",
                      f"  wrk-1 (10.0.0.2): {left}",
                      "  wrk-2 (10.0.0.3): its previous config, untouched"]
    assert "Apply FAILED after 4.0s: 1 host(s) changed, 3 engine restart(s), 1 failed, " \
           "1 not started." in lines


def test_a_failed_host_with_nothing_more_to_say_is_left_with_its_detail() -> None:
    detail = "the drain timed out; nothing was changed"
    lines = _ending(("wrk-1 (10.0.0.2)", HostOutcome("wrk-1", "failed", detail)))
    assert lines[-1] == f"  wrk-1 (10.0.0.2): {detail}"
