"""The host lock against real lab hosts over real SSH: create, refuse, take over, race,
touch, release, force-unlock, and locking many hosts at once."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from executor.host_lock import (
    LockHeld,
    LockInfo,
    LockSet,
    acquire,
    force_unlock,
    new_lock_info,
    release,
    touch,
)
from executor.remote import HostWriter
from planner.config.model import SshConfig
from planner.facts.lock_holder import LOCK, LOCK_PATH
from planner.hosts.ssh import ConnectOptions, open_session
from tests.lab import HostSpec, Lab
from tests.waiting import poller

HOSTS = ["ctl-1", "ctl-2", "wrk-1"]
ALICE_HOST = "wrk-2"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    # One lab for the whole module: every test starts from unlocked hosts (see `clean`).
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    specs = [HostSpec(name, "controller" if name.startswith("ctl") else "worker")
             for name in HOSTS]
    specs.append(HostSpec(ALICE_HOST, "worker", user="alice", sudo=True))
    started = Lab.up(tmp_path_factory.mktemp("locklab"), specs)
    yield started
    started.down()


@pytest.fixture(autouse=True)
def clean(lab: Lab) -> None:
    for name in [*HOSTS, ALICE_HOST]:
        lab.exec(name, f"rm -f {LOCK_PATH}")


@pytest.fixture
def connect(lab: Lab) -> Iterator[Callable[[str], HostWriter]]:
    """Opens a new SSH session (a separate run, as far as the host can tell) per call."""
    opened: list[HostWriter] = []

    def open_writer(name: str) -> HostWriter:
        host = lab.host(name)
        ssh = SshConfig(address=host.address, user=host.user,
                        key_path=lab.dir / "id_ed25519", known_hosts=lab.dir / "known_hosts")
        writer = HostWriter(open_session(name, ssh, ConnectOptions()), host.user, 30.0)
        opened.append(writer)
        return writer

    yield open_writer
    for writer in opened:
        writer.close()


def lock_content(lab: Lab, name: str) -> dict[str, object] | None:
    result = lab.exec(name, f"cat {LOCK_PATH}", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def lock_id(lab: Lab, name: str) -> object:
    content = lock_content(lab, name)
    return content["id"] if content else None


def lock_age(lab: Lab, name: str) -> int:
    out = lab.exec(name, f"echo $(( $(date +%s) - $(stat -c %Y {LOCK_PATH}) ))").stdout
    return int(out)


def age_lock(lab: Lab, name: str, when: str) -> None:
    lab.exec(name, f"touch -d {when!r} {LOCK_PATH}")


poll = poller(timeout=20)


def test_acquire_creates_the_lock_file(lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    host = connect("ctl-1")
    info = new_lock_info("plan-123")
    assert acquire(host, info) is None
    assert lock_content(lab, "ctl-1") == {"id": info.id, "holder": info.holder,
                                          "pid": os.getpid(), "plan_id": "plan-123",
                                          "since": info.since}
    modes = lab.exec("ctl-1", f"stat -c '%a %U' {LOCK_PATH} /run/cargoship").stdout.split()
    assert modes == ["600", "root", "700", "root"]  # root's alone: no user can flock it
    # The planner's read-only fact sees a live lock held by this run.
    state = host.gather([LOCK])[0]
    assert state.live and state.holder["id"] == info.id
    # Acquiring again with the same LockInfo (a retried round trip) is not a conflict.
    assert acquire(host, info) is None
    assert lock_id(lab, "ctl-1") == info.id


def test_second_run_is_refused_naming_the_holder(
        lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    first = LockInfo("aaaa1111", "bob@laptop", 4242, "plan-7", "2024-05-01T10:00:00+00:00")
    acquire(connect("ctl-1"), first)
    with pytest.raises(LockHeld) as caught:
        acquire(connect("ctl-1"), new_lock_info("plan-8"))
    message = str(caught.value)
    for part in ("ctl-1", "bob@laptop", "aaaa1111", "plan-7", "pid 4242",
                 "2024-05-01T10:00:00+00:00", "touched"):
        assert part in message
    assert caught.value.lock_id == "aaaa1111"
    assert lock_id(lab, "ctl-1") == "aaaa1111"


def test_stale_lock_is_taken_over_and_fresh_one_is_not(
        lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    old = new_lock_info(None)
    acquire(connect("ctl-1"), old)
    age_lock(lab, "ctl-1", "-30 sec")  # older than TOUCH_EVERY, but not stale
    newer = new_lock_info(None)
    with pytest.raises(LockHeld):
        acquire(connect("ctl-1"), newer)
    age_lock(lab, "ctl-1", "-2 min")
    assert acquire(connect("ctl-1"), newer) == old.id
    assert lock_id(lab, "ctl-1") == newer.id
    assert lock_age(lab, "ctl-1") <= 5
    mode = lab.exec("ctl-1", f"stat -c %a {LOCK_PATH}").stdout.strip()
    assert mode == "600"
    # No temp file is left behind next to the lock.
    listing = lab.exec("ctl-1", "ls -A /run/cargoship").stdout.split()
    assert sorted(listing) == ["lock", "lock.mutex"]


def race(writers: list[HostWriter]) -> tuple[list[str], list[str]]:
    """Every writer calls acquire at the same moment, each for its own run."""
    infos = [new_lock_info(None) for _ in writers]
    start = threading.Barrier(len(writers))
    won: list[str] = []
    refused: list[str] = []
    errors: list[BaseException] = []

    def run(writer: HostWriter, info: LockInfo) -> None:
        start.wait()
        try:
            acquire(writer, info)
            won.append(info.id)
        except LockHeld:
            refused.append(info.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=pair)
               for pair in zip(writers, infos, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    return won, refused


@pytest.mark.parametrize("runners", [2, 5])
def test_racing_runs_exactly_one_wins(lab: Lab, connect: Callable[[str], HostWriter],
                                      runners: int) -> None:
    writers = [connect("ctl-2") for _ in range(runners)]
    for _ in range(5):
        lab.exec("ctl-2", f"rm -f {LOCK_PATH}")
        won, refused = race(writers)
        assert len(won) == 1 and len(refused) == runners - 1
        assert lock_id(lab, "ctl-2") == won[0]
    # A stale lock is raced for too: still exactly one taker.
    for _ in range(3):
        age_lock(lab, "ctl-2", "-2 min")
        won, refused = race(writers)
        assert len(won) == 1 and len(refused) == runners - 1
        assert lock_id(lab, "ctl-2") == won[0]


def test_touch_refreshes_only_our_lock(lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    ours, theirs = new_lock_info(None), new_lock_info(None)
    host = connect("ctl-1")
    acquire(host, ours)
    age_lock(lab, "ctl-1", "-50 sec")
    assert touch(host, ours) is True
    assert lock_age(lab, "ctl-1") <= 5
    age_lock(lab, "ctl-1", "-2 min")
    assert acquire(connect("ctl-1"), theirs) == ours.id
    age_lock(lab, "ctl-1", "-50 sec")
    assert touch(host, ours) is False
    assert lock_age(lab, "ctl-1") >= 49  # their lock was not refreshed by us
    assert lock_id(lab, "ctl-1") == theirs.id


def test_release_removes_only_our_lock(lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    ours, theirs = new_lock_info(None), new_lock_info(None)
    host = connect("ctl-1")
    acquire(host, ours)
    assert release(host, theirs) is False
    assert lock_id(lab, "ctl-1") == ours.id
    assert release(host, ours) is True
    assert lock_content(lab, "ctl-1") is None
    assert release(host, ours) is False


def test_force_unlock_needs_the_right_id(lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    crashed = new_lock_info(None)
    acquire(connect("ctl-1"), crashed)
    host = connect("ctl-1")
    assert force_unlock(host, "0123abcd") is False
    assert lock_id(lab, "ctl-1") == crashed.id
    assert force_unlock(host, crashed.id) is True
    assert lock_content(lab, "ctl-1") is None
    assert force_unlock(host, crashed.id) is False


def test_lockset_releases_what_it_took_when_one_host_is_held(
        lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    other = new_lock_info("other")
    acquire(connect("wrk-1"), other)  # last in label order: the others get locked first
    locks = LockSet([connect("ctl-2"), connect("wrk-1"), connect("ctl-1")],
                    new_lock_info("mine"))
    with pytest.raises(LockHeld, match="wrk-1"):
        locks.acquire_all()
    assert lock_content(lab, "ctl-1") is None
    assert lock_content(lab, "ctl-2") is None
    assert lock_id(lab, "wrk-1") == other.id


def test_lockset_waits_for_the_holder(lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    other = new_lock_info("other")
    other_host = connect("ctl-2")
    acquire(other_host, other)
    mine = new_lock_info("mine")
    waits: list[tuple[str | None, float]] = []
    locks = LockSet([connect("ctl-1"), connect("ctl-2")], mine, wait_timeout=30, poll=0.1,
                    on_wait=lambda held, left: waits.append((held.lock_id, left)))
    outcome: list[object] = []
    waiter = threading.Thread(target=lambda: outcome.append(locks.acquire_all()))
    waiter.start()
    try:
        # ctl-1 comes first; release the holder only once the set was refused on ctl-2
        # at least twice (so it really retried) and is still waiting.
        poll(lambda: len(waits) >= 2)
        assert waits[0][0] == other.id and waits[-1][1] < waits[0][1] <= 30
        assert waiter.is_alive() and lock_id(lab, "ctl-1") == mine.id
        assert release(other_host, other)
        waiter.join(30)
        assert outcome == [[]]
        assert lock_id(lab, "ctl-1") == mine.id and lock_id(lab, "ctl-2") == mine.id
    finally:
        waiter.join(30)
        locks.release_all()
    assert lock_content(lab, "ctl-1") is None and lock_content(lab, "ctl-2") is None


def test_lockset_wait_times_out_with_lock_held(
        lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    acquire(connect("ctl-1"), new_lock_info("other"))
    locks = LockSet([connect("ctl-1")], new_lock_info("mine"), wait_timeout=0.5, poll=0.1)
    started = time.monotonic()
    with pytest.raises(LockHeld):
        locks.acquire_all()
    assert time.monotonic() - started >= 0.5


def test_lockset_toucher_keeps_locks_fresh_and_notices_takeover(
        lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    locks = LockSet([connect("ctl-1"), connect("ctl-2")], new_lock_info(None), touch_every=0.2)
    assert locks.acquire_all() == []
    try:
        for name in ("ctl-1", "ctl-2"):
            age_lock(lab, name, "-50 sec")
            poll(lambda name=name: lock_age(lab, name) <= 5)  # type: ignore[misc]
        # Another run took ctl-2 over (as if our touches had stopped for a minute): the
        # toucher says so. The takeover's result is written directly: aging our lock and
        # taking it over would race with our own toucher, which would keep it fresh.
        theirs = new_lock_info(None)
        lab.exec("ctl-2", f"cat > {LOCK_PATH}", input=theirs.to_json())
        poll(lambda: locks.lost() == {"ctl-2"})
    finally:
        locks.release_all()
        locks.release_all()  # idempotent
    assert lock_content(lab, "ctl-1") is None
    assert lock_id(lab, "ctl-2") == theirs.id  # not ours to remove


def test_lockset_reports_takeover_and_releases_on_interrupt(
        lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    crashed = new_lock_info(None)
    for name in ("ctl-2", "wrk-1"):
        acquire(connect(name), crashed)
        age_lock(lab, name, "-2 min")
    mine = new_lock_info(None)
    with pytest.raises(KeyboardInterrupt):
        with LockSet([connect("ctl-1"), connect("ctl-2"), connect("wrk-1")], mine) as locks:
            # One note for the one crashed run, naming its hosts.
            assert locks.notes == [f"took over stale lock {crashed.id} on 2 host(s): "
                                   "ctl-2, wrk-1"]
            assert lock_id(lab, "ctl-1") == mine.id and lock_id(lab, "ctl-2") == mine.id
            raise KeyboardInterrupt
    for name in ("ctl-1", "ctl-2", "wrk-1"):
        assert lock_content(lab, name) is None


def test_non_root_user_with_sudo(lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    host = connect(ALICE_HOST)
    assert host.user == "alice"
    info = new_lock_info(None)
    assert acquire(host, info) is None
    assert lab.exec(ALICE_HOST, f"stat -c '%a %U' {LOCK_PATH}").stdout.split() == ["600", "root"]
    with pytest.raises(LockHeld):
        acquire(connect(ALICE_HOST), new_lock_info(None))
    age_lock(lab, ALICE_HOST, "-50 sec")
    assert touch(host, info) is True and lock_age(lab, ALICE_HOST) <= 5
    assert release(host, info) is True
    assert lock_content(lab, ALICE_HOST) is None



def test_lockset_locks_in_label_order(lab: Lab, connect: Callable[[str], HostWriter]) -> None:
    # A run waiting for ctl-1 must not sit on ctl-2 meanwhile, whatever order it was given
    # its hosts in: that is what keeps two runs from deadlocking each other.
    other_host = connect("ctl-1")
    other = new_lock_info("other")
    acquire(other_host, other)
    mine = new_lock_info("mine")
    waits: list[tuple[str | None, float]] = []
    locks = LockSet([connect("ctl-2"), connect("ctl-1")], mine, wait_timeout=30, poll=0.1,
                    on_wait=lambda held, left: waits.append((held.lock_id, left)))
    waiter = threading.Thread(target=locks.acquire_all)
    waiter.start()
    try:
        poll(lambda: len(waits) >= 2)
        assert waits[0][0] == other.id and waits[-1][1] < waits[0][1] <= 30
        assert lock_content(lab, "ctl-2") is None
        assert release(other_host, other)
        waiter.join(30)
        assert lock_id(lab, "ctl-1") == mine.id and lock_id(lab, "ctl-2") == mine.id
    finally:
        waiter.join(30)
        locks.release_all()
