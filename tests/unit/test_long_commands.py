"""Commands longer than an SSH exec request may carry (libssh2's packet limit) or than one
argument may be (the kernel's 128 KiB): planner/hosts/channel.py's as_exec sends them on
stdin, and the snapshot's root part reaches its shell through a pipe. Run for real with
the local sh, as sshd would run them (`sh -c COMMAND`, stdin from the channel)."""

from __future__ import annotations

import shlex
import subprocess

from hypothesis import given
from hypothesis import strategies as st

from planner.hosts.batch import Fact
from planner.hosts.channel import EXEC_LIMIT, as_exec
from planner.hosts.snapshot import SnapshotScript

BIG = 200_000  # over MAX_ARG_STRLEN (131072): no single argument may be this long


def over_ssh(command: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """What a host does with the exec request and stdin as_exec makes of `command`."""
    exec_request, data = as_exec(command, stdin)
    assert len(exec_request.encode()) <= EXEC_LIMIT
    return subprocess.run(["sh", "-c", exec_request], input=data or b"", capture_output=True,
                          timeout=30, check=False)


def test_a_short_command_is_sent_as_it_is() -> None:
    assert as_exec("sh -c 'echo hi'", b"x") == ("sh -c 'echo hi'", b"x")


def test_a_long_sh_c_script_runs_with_the_rest_of_stdin_left_to_it() -> None:
    script = f": '{'x' * BIG}'\necho \"$1\" start\ncat\necho end"
    done = over_ssh("sh -c " + shlex.quote(script), b"the data\n")
    assert done.returncode == 0, done.stderr
    # head -c took the script's bytes and no more: cat read the rest, to the byte.
    assert done.stdout == b" start\nthe data\nend\n"


def test_a_long_sudo_script_keeps_its_sudo() -> None:
    script = f": '{'y' * BIG}'\nid -u"
    exec_request, data = as_exec("sudo -n -- sh -c " + shlex.quote(script), None)
    assert exec_request.startswith("sudo -n -- sh -c 'eval ")
    assert data == script.encode()


def test_a_snapshot_whose_root_part_is_over_an_arguments_limit_answers_every_fact() -> None:
    big = Fact("big", f": '{'z' * BIG}'; echo big read", lambda out: out.stdout)
    user = Fact("user", "echo user read", lambda out: out.stdout)
    tail = Fact("after", "cat; echo after read", lambda out: out.stdout)  # stdin: /dev/null
    script = SnapshotScript.of([(user, False), (big, True), (tail, True)], sudo=False)
    done = over_ssh(script.command(wait=1))
    assert done.returncode == 0, done.stderr
    snapshot = script.split(done.stdout.decode(), done.stderr.decode())
    assert [o.stdout.strip() for o in snapshot.answer([user], False) or []] == ["user read"]
    assert [o.stdout.strip() for o in snapshot.answer([big, tail], True) or []] == [
        "big read", "after read"]



@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_a_long_quoted_script_is_sent_exactly_as_the_shell_would_read_it(text: str) -> None:
    script = text + " " * EXEC_LIMIT  # long, and so quoted by shlex (it holds spaces)
    for prefix in ("", "sudo -n -- "):
        exec_request, data = as_exec(prefix + "sh -c " + shlex.quote(script), b"in")
        assert data == script.encode() + b"in"
        assert exec_request == prefix + f"sh -c 'eval \"$(head -c {len(script.encode())})\"'"
