"""The host snapshot's script and its split: pure, over fixtures of what a host prints."""

from __future__ import annotations

import shlex
import subprocess

from planner.hosts.batch import Fact, Output
from planner.hosts.snapshot import WAIT_NOTE, SnapshotScript


def fact(command: str) -> Fact[str]:
    return Fact(command, command, lambda out: out.stdout)


def printed(script: SnapshotScript, user: list[str], root: list[str] | None) -> str:
    """What the host prints: each fact's output then its marker line, user part first."""
    text = "".join(f"{out}\n{script.user.token} {i} 0\n" for i, out in enumerate(user))
    if root is not None:
        text += "".join(f"{out}\n{script.root.token} {i} 0\n" for i, out in enumerate(root))
    return text


def test_user_and_root_facts_are_answered_from_one_output() -> None:
    a, b, c = fact("uname -a"), fact("cat /etc/x"), fact("hostname")
    script = SnapshotScript.of([(a, False), (b, True), (c, False), (a, False)], sudo=True)
    assert [f.command for f in script.user.facts] == ["uname -a", "hostname"]  # once each
    assert "| sudo -n -- sh -s\n" in script.command()
    snapshot = script.split(printed(script, ["Linux", "h1"], ["secret: 1"]), "")
    assert snapshot.answer([c, a], False) == [Output("h1", 0), Output("Linux", 0)]
    assert snapshot.answer([b], True) == [Output("secret: 1", 0)]
    assert snapshot.answer([b], False) is None  # read as root, not as the user
    assert snapshot.answer([fact("other")], False) is None


def test_a_root_part_that_did_not_run_says_why() -> None:
    a, b = fact("uname -a"), fact("cat /etc/x")
    script = SnapshotScript.of([(a, False), (b, True)], sudo=True)
    snapshot = script.split(printed(script, ["Linux"], None),
                            "sudo: a password is required\n")
    assert snapshot.answer([a], False) == [Output("Linux", 0)]
    assert snapshot.root_error == "sudo: a password is required"
    assert snapshot.answer([b], True) is None


def test_a_wait_for_the_swap_lock_in_vain_is_never_taken_for_sudo_s_answer() -> None:
    a, b = fact("uname -a"), fact("cat /etc/x")
    script = SnapshotScript.of([(a, False), (b, True)], sudo=True)
    # Waited for as root (the lock's directory is root's alone), before the root facts.
    command = script.command(wait=30)
    assert "flock -s -n /run/cargoship/swap.lock" in command
    assert command.index("cs_root=") < command.index("flock") < command.index("cat /etc/x") \
        < command.index("| sudo -n -- sh -s")
    assert "flock" not in script.command()
    snapshot = script.split(printed(script, ["Linux"], None),
                            f"{WAIT_NOTE} /run/cargoship/swap.lock still held after 30 s\n"
                            "sudo: a password is required\n")
    assert snapshot.root_error == "sudo: a password is required"
    assert snapshot.lock_note == "/run/cargoship/swap.lock still held after 30 s"


def test_as_root_without_sudo_runs_inline() -> None:
    # The SSH user is root: the root facts run on in the same shell (no second sh, no
    # printf into it), after the wait for the swap lock, and split as before.
    user, root = fact("echo user-part"), fact("echo root-part; exit 3")
    script = SnapshotScript.of([(user, False), (root, True)], sudo=False)
    command = script.command(wait=1)
    assert "sudo" not in command and "sh -s" not in command and "cs_root" not in command
    assert command.index("flock") < command.index("root-part")
    done = subprocess.run(["sh", "-c", shlex.split(command)[2]], capture_output=True,
                          text=True, timeout=30, check=False)
    snapshot = script.split(done.stdout, done.stderr)
    assert snapshot.outputs[(user.command, False)] == Output("user-part\n", 0)
    assert snapshot.outputs[(root.command, True)] == Output("root-part\n", 3)
    assert snapshot.root_error is None
