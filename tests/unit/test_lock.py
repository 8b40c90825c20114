"""The host lock's pure parts: lock info, ids, the stale threshold, reading the script's
answer, and the LockHeld message."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from executor.host_lock import (
    LockHeld,
    LockInfo,
    LockSet,
    acquire_script,
    check_lock_id,
    id_prefix,
    new_lock_info,
    parse_acquire,
    stale_seconds,
)
from planner.errors import CargoshipError
from planner.facts.lock_holder import STALE_AFTER, LockState


def listing(verdict: str, content: str, mtime: int = 1000, now: int = 1042) -> str:
    return f"{verdict}\nlock {mtime} {now}\n{base64.b64encode(content.encode()).decode()}\n"


def test_new_lock_info() -> None:
    info = new_lock_info("plan-1")
    assert re.fullmatch(r"[0-9a-f]{12}", info.id)
    assert re.fullmatch(r"[^@\s]+@[^@\s]+", info.holder)
    assert info.pid == os.getpid() and info.plan_id == "plan-1"
    assert info.since.endswith("+00:00")
    assert new_lock_info(None).id != info.id


def test_content_is_json_and_starts_with_the_id_prefix() -> None:
    info = LockInfo("abc123", "u@m", 7, None, "2024-01-01T00:00:00+00:00")
    text = info.to_json()
    assert json.loads(text) == {"id": "abc123", "holder": "u@m", "pid": 7, "plan_id": None,
                                "since": "2024-01-01T00:00:00+00:00"}
    assert text.startswith(id_prefix("abc123"))
    # A holder that mentions another id cannot make the prefix match.
    tricky = LockInfo("ffff", '{"id": "abc123", ', 1, None, "x").to_json()
    assert not tricky.startswith(id_prefix("abc123"))


@pytest.mark.parametrize("bad", ["", "ABC", "abc; rm -rf /", "'x'", "a" * 65, "12 34"])
def test_lock_ids_are_hex_only(bad: str) -> None:
    with pytest.raises(CargoshipError, match="not a lock id"):
        check_lock_id(bad)
    assert check_lock_id("0123abcdef") == "0123abcdef"


def test_stale_threshold_in_whole_seconds() -> None:
    assert stale_seconds(60) == 60 and stale_seconds(60.9) == 60 and stale_seconds(0) == 0
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            stale_seconds(bad)
    # The generated block carries the threshold the script compares with (-le).
    assert "\nSTALE_AFTER=60\n" in acquire_script("abc", 60)
    assert "\nSTALE_AFTER=5\n" in acquire_script("abc", 5.5)
    assert '-le "$STALE_AFTER" ]' in acquire_script("abc", 60)


def test_parse_script_answers() -> None:
    assert parse_acquire("new\n") == ("new", None)
    assert parse_acquire("ours\n") == ("ours", None)
    content = LockInfo("beef", "bob@box", 9, "p", "then").to_json()
    verdict, state = parse_acquire(listing("held", content))
    assert verdict == "held" and state is not None
    assert state.holder is not None and state.holder["id"] == "beef" and state.age == 42
    verdict, state = parse_acquire(listing("stale", "not json"))
    assert verdict == "stale" and state is not None and state.holder is not None
    assert "corrupt" in state.holder["holder"]
    with pytest.raises(ValueError):
        parse_acquire("sudo: a password is required\n")


def test_lock_held_message_names_host_and_holder() -> None:
    state = LockState({"id": "beef", "holder": "bob@box", "pid": 9, "plan_id": "p-1",
                       "since": "2024-05-01T10:00:00+00:00"}, 12.0)
    error = LockHeld("ctl-1", state)
    assert isinstance(error, CargoshipError)
    assert error.host == "ctl-1" and error.lock_id == "beef"
    message = str(error)
    for part in ("ctl-1", "bob@box", "beef", "p-1", "2024-05-01T10:00:00+00:00",
                 "touched 12s ago", "force-unlock -c cluster.yaml beef"):
        assert part in message
    assert "\n" not in message


class FakeHost:
    """A host that answers lock scripts; `hang` makes its touches block until released."""

    def __init__(self, label: str, hang: threading.Event | None = None) -> None:
        self.label, self.hang = label, hang
        self.touches: list[float] = []
        self.timeouts: list[float | None] = []

    def run_root(self, script: str, *, stdin: bytes | None = None,
                 timeout: float | None = None, check: bool = True) -> Any:
        if "echo new" in script:  # acquire
            return SimpleNamespace(stdout=b"new\n", stderr=b"", exit_code=0)
        if "touch -c" in script:
            self.touches.append(time.monotonic())
            self.timeouts.append(timeout)
            if self.hang is not None:
                self.hang.wait()
        return SimpleNamespace(stdout=b"yes\n", stderr=b"", exit_code=0)


def test_lock_keeper_touches_every_host_in_parallel_despite_a_hung_one() -> None:
    released = threading.Event()
    hung = FakeHost("a-hung", released)
    good = [FakeHost(f"b-{i}") for i in range(3)]
    locks = LockSet([hung, *good], new_lock_info("p"), touch_every=0.05)  # type: ignore[list-item]
    locks.acquire_all()
    try:
        deadline = time.monotonic() + 10
        while min(len(h.touches) for h in good) < 8:
            assert time.monotonic() < deadline, [len(h.touches) for h in good]
            time.sleep(0.01)
        # The hung host got one touch, not one per round piling up behind it.
        assert len(hung.touches) == 1
        # Each touch is bounded well inside the stale window.
        assert all(t is not None and t <= STALE_AFTER / 4 for h in good for t in h.timeouts)
        # The good hosts were touched about every 50 ms, never held up by the hung one.
        gaps = [b - a for h in good for a, b in itertools.pairwise(h.touches)]
        assert max(gaps) < 1.0
    finally:
        released.set()
        locks.release_all()
    assert not locks.lost()


def test_a_user_without_a_passwd_entry_is_named_by_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    # Containers run as a uid with no passwd entry and no USER: the holder is still named,
    # by plan (facts.lock_holder.whoami) and by apply's lock alike, never a traceback.
    import getpass

    def nobody() -> str:
        raise KeyError("getpwuid(): uid not found")

    from planner.facts.lock_holder import whoami

    monkeypatch.setattr(getpass, "getuser", nobody)
    assert whoami().startswith(f"{os.getuid()}@")
    assert new_lock_info(None).holder == whoami()
