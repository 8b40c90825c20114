"""The lock's acquire decision, run for real: executor.host_lock.acquire_script, exactly the
script a host runs but for its place (a temporary directory, and the user running the
tests instead of root: planner.facts.lock_holder.Place), run with sh. Each verdict (new, ours,
held, stale, and the boundary between the last two) in milliseconds, without a lab;
tests/e2e/test_locking.py stays the end-to-end proof on lab hosts."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from executor.host_lock import UNSAFE, LockInfo, acquire_script, parse_acquire
from planner.facts.lock_holder import GUARD, Place, guard
from planner.hosts.shell import load

STALE = 60
OURS = LockInfo("0a0a0a0a0a0a", "alice@laptop", 1111, "p" * 32, "2026-12-01T03:00:00+00:00")
THEIRS = LockInfo("0b0b0b0b0b0b", "bob@ci", 2222, "q" * 32, "2026-12-01T02:59:00+00:00")


@pytest.fixture
def place(tmp_path: Path) -> Place:
    # tmp_path is its user's alone (0700), as /run is root's: the guard accepts it.
    return Place(str(tmp_path / "cargoship"), str(tmp_path / "state"), os.geteuid())


def lock_file(place: Place) -> Path:
    return Path(place.lock_path)


def acquire(place: Place, info: LockInfo = OURS,
            stale: float = STALE) -> tuple[str, subprocess.CompletedProcess[str]]:
    """Run the acquire script for `info` as a host would: its content on stdin."""
    done = subprocess.run(["sh", "-c", acquire_script(info.id, stale, place)],
                          input=info.to_json(), capture_output=True, text=True, timeout=20,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[0], done


def existing(place: Place, info: LockInfo, age: int) -> float:
    """A lock of `info` last touched `age` seconds ago (whole seconds); its mtime."""
    path = lock_file(place)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_text(info.to_json())
    path.chmod(0o600)
    mtime = int(time.time()) - age
    os.utime(path, (mtime, mtime))
    return mtime


def leftovers(place: Place) -> list[str]:
    return sorted(p.name for p in Path(place.lock_dir).iterdir()
                  if p.name not in ("lock", "lock.mutex"))


def test_no_lock_is_new_and_the_lock_is_written_from_stdin(place: Place) -> None:
    verdict, done = acquire(place)
    assert verdict == "new" and done.stdout == "new\n"
    assert lock_file(place).read_text() == OURS.to_json()
    assert lock_file(place).stat().st_mode & 0o777 == 0o600
    assert Path(place.lock_dir).stat().st_mode & 0o777 == 0o700  # made root's alone
    assert leftovers(place) == []  # the temp file was renamed into place
    assert not Path(place.state_dir).exists()  # nothing kept there yet


def test_our_own_lock_is_ours_touched_and_left_as_it_is(place: Place) -> None:
    # Our id's prefix, other content (a retried round trip, or our earlier touch).
    existing(place, THEIRS, 0)
    mine = OURS.to_json().replace('"pid": 1111', '"pid": 9')
    lock_file(place).write_text(mine)
    old = int(time.time()) - 50
    os.utime(lock_file(place), (old, old))
    _, done = acquire(place)
    assert done.stdout == "ours\n"
    assert lock_file(place).read_text() == mine  # stdin not written
    assert lock_file(place).stat().st_mtime >= old + 49  # touched: fresh again


def test_a_fresh_lock_of_another_run_is_held_and_left_unchanged(place: Place) -> None:
    mtime = existing(place, THEIRS, 1)
    verdict, done = acquire(place)
    assert verdict == "held"
    _, state = parse_acquire(done.stdout)
    assert state is not None and state.holder is not None
    assert state.holder["id"] == THEIRS.id and state.age in (1, 2)
    assert lock_file(place).read_text() == THEIRS.to_json()  # not replaced
    assert lock_file(place).stat().st_mtime == mtime  # nor touched
    assert leftovers(place) == []  # no temp written either


def test_an_old_lock_of_another_run_is_stale_and_replaced(place: Place) -> None:
    existing(place, THEIRS, STALE + 100)
    verdict, done = acquire(place)
    assert verdict == "stale"
    _, state = parse_acquire(done.stdout)
    assert state is not None and state.holder is not None
    assert state.holder["id"] == THEIRS.id  # what it took over, for the note
    assert state.age >= STALE + 100
    assert lock_file(place).read_text() == OURS.to_json()
    assert leftovers(place) == []
    assert acquire(place)[0] == "ours"


def test_one_second_past_the_threshold_is_stale(place: Place) -> None:
    existing(place, THEIRS, STALE + 1)
    assert acquire(place)[0] == "stale"
    assert lock_file(place).read_text() == OURS.to_json()


def at_age(place: Place, age: int, stale: float) -> str:
    """The verdict on another run's lock whose age the script measured as exactly `age`.
    The clock may tick between setting the mtime and the script's `date +%s`; the script
    prints the two times it compared, so a run that measured another age did not decide
    about `age`, and is run again on a fresh lock (a tick is rare: the run takes ms)."""
    for _ in range(5):
        existing(place, THEIRS, age)
        verdict, done = acquire(place, stale=stale)
        _, state = parse_acquire(done.stdout)
        assert state is not None
        if state.age == age:
            return verdict
    pytest.fail("the clock ticked during every run")


def test_exactly_the_threshold_is_still_held(place: Place) -> None:
    # `age > stale_after` is stale: at age == stale_after the lock is still held.
    assert at_age(place, STALE, STALE) == "held"
    assert lock_file(place).read_text() == THEIRS.to_json()


def test_a_fractional_threshold_counts_whole_seconds(place: Place) -> None:
    assert at_age(place, 5, 5.9) == "held"  # the shell compares integers: floor(5.9)
    assert at_age(place, 6, 5.9) == "stale"


def test_the_decision_waits_for_the_mutex(place: Place, tmp_path: Path) -> None:
    """Whoever holds the mutex (another run's lock script), this one decides nothing and
    writes nothing until it is let go: check-then-write is one step per host."""
    existing(place, THEIRS, 0)
    lock_file(place).unlink()
    mutex = Path(place.lock_path + ".mutex")
    mutex.touch(mode=0o600)
    given = tmp_path / "stdin"
    given.write_text(OURS.to_json())
    with mutex.open("rb") as held, given.open() as stdin:
        fcntl.flock(held, fcntl.LOCK_EX)
        run = subprocess.Popen(["sh", "-c", acquire_script(OURS.id, STALE, place)],
                               stdin=stdin, stdout=subprocess.PIPE, text=True)
        time.sleep(0.1)  # not a wait for something: how long it must stay undecided
        assert run.poll() is None and not lock_file(place).exists()
    assert run.communicate(timeout=20)[0] == "new\n"
    assert lock_file(place).read_text() == OURS.to_json()


def test_runs_racing_for_a_free_lock_one_wins(place: Place, tmp_path: Path) -> None:
    """The mutex: of runs started together, exactly one creates the lock; the others find
    it held (fresh), whatever the order the kernel gives them."""
    infos = [LockInfo(f"{i:012x}", f"u{i}@m", i, None, "now") for i in range(1, 7)]
    runs = []
    for info in infos:
        # Each run's whole input ready at its start, as a host gets it: the winner reads it
        # while holding the mutex, the others never do.
        given = tmp_path / f"stdin-{info.id}"
        given.write_text(info.to_json())
        with given.open() as stdin:
            runs.append(subprocess.Popen(["sh", "-c", acquire_script(info.id, STALE, place)],
                                         stdin=stdin, stdout=subprocess.PIPE, text=True))
    outs = [run.communicate(timeout=20)[0] for run in runs]
    verdicts = [o.splitlines()[0] for o in outs]
    assert sorted(verdicts) == ["held"] * 5 + ["new"]
    winner = infos[verdicts.index("new")]
    assert lock_file(place).read_text() == winner.to_json()


def test_a_lock_directory_others_may_write_is_refused_unchanged(place: Place) -> None:
    existing(place, THEIRS, STALE + 100)
    Path(place.lock_dir).chmod(0o777)
    done = subprocess.run(["sh", "-c", acquire_script(OURS.id, STALE, place)],
                          input=OURS.to_json(), capture_output=True, text=True, timeout=20,
                          check=False)
    assert done.returncode == UNSAFE and done.stdout == ""
    assert done.stderr == (f"{place.lock_dir} is mode 0777 (writable by others): refusing "
                           "to use it (it must be root's alone); nothing was changed\n")
    assert lock_file(place).read_text() == THEIRS.to_json()


def test_on_a_host_the_directories_are_roots() -> None:
    # Place exists for these tests; the scripts every host runs hold root to it.
    assert GUARD == guard(0) and GUARD.startswith("OWNER_UID=0\n")
    host = acquire_script(OURS.id, STALE)
    # The generated block: the values, nothing else, then the files as shipped.
    block = host.splitlines()[:10]
    assert host.splitlines()[10] == load("planner.facts", "guard.sh").splitlines()[0]
    assert block == [
        "OWNER_UID=0", "LOCK_DIR=/run/cargoship", "STATE_DIR=/var/lib/cargoship",
        "LOCK_PATH=/run/cargoship/lock", "MUTEX=/run/cargoship/lock.mutex", "MUTEX_WAIT=10",
        f"WANT='{{\"id\": \"{OURS.id}\", '", "UNSAFE=10", "WAIT_TIMEOUT=11", "STALE_AFTER=60"]
