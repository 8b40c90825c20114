"""executor.polling: soon at first, never more often than the floor, never less than the cap."""

from __future__ import annotations

from executor.polling import FLOOR, pause


def test_pause_grows_with_the_wait_between_floor_and_cap() -> None:
    assert pause(0.0, cap=2.0) == FLOOR
    assert pause(4.0, cap=2.0) == 0.2  # a twentieth of the time waited
    assert pause(600.0, cap=2.0) == 2.0
    assert pause(0.0, cap=0.05) == 0.05  # a cap below the floor wins


def test_a_one_second_event_is_seen_within_a_tenth_of_a_second() -> None:
    waited, checks = 0.0, []
    while waited < 1.0:
        waited += pause(waited, cap=2.0)
        checks.append(waited)
    assert checks[-1] - 1.0 <= 0.1
