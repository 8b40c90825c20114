"""The waits apply uses: the real ones unless cargoship's own tests shorten them, and then
only shorter (executor/waits.py)."""

from __future__ import annotations

import json

import pytest

from executor.waits import DEFAULT, ENV, UNDER_TEST, Waits, from_environment
from planner.errors import CargoshipError


def test_without_the_variable_the_waits_are_the_real_ones() -> None:
    assert from_environment({}) is DEFAULT
    assert from_environment({UNDER_TEST: "t.py::test (call)"}) is DEFAULT
    assert DEFAULT == Waits()
    assert DEFAULT.silence == 15.0 and DEFAULT.reconnect_window(2.0) == 6.0
    assert DEFAULT.reconnect_window(1.0) == 5.0  # the floor: an sshd restart's time


def test_a_test_may_shorten_waits() -> None:
    waits = from_environment({UNDER_TEST: "t.py::test (call)",
                              ENV: json.dumps({"silence": 4, "reconnect_floor": 2.5})})
    assert waits == Waits(silence=4.0, reconnect_floor=2.5)
    assert waits.reconnect_window(0.5) == 2.5


def test_outside_a_test_the_variable_is_refused_not_ignored() -> None:
    with pytest.raises(CargoshipError, match=f"{ENV} is for cargoship's own tests"):
        from_environment({ENV: json.dumps({"silence": 4})})


@pytest.mark.parametrize("given, why", [
    ({"silence": 16}, "silence must be above 0 and at most its default 15"),
    ({"silence": 0}, "silence must be above 0"),
    ({"silence": -1}, "silence must be above 0"),
    ({"silence": True}, "silence must be above 0"),
    ({"silence": "4"}, "silence must be above 0"),
    ({"stale_after": 1}, "unknown wait 'stale_after'"),
    ([4], "expected an object"),
])
def test_only_shorter_known_waits_are_taken(given: object, why: str) -> None:
    with pytest.raises(CargoshipError, match=why):
        from_environment({UNDER_TEST: "t.py::test (call)", ENV: json.dumps(given)})
    with pytest.raises(CargoshipError, match="not JSON"):
        from_environment({UNDER_TEST: "t.py::test (call)", ENV: "{silence"})
