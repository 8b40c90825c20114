"""What a failed handshake says (planner/hosts/handshake.py ssh2_failure): pure words."""

from __future__ import annotations

from ssh2 import exceptions as ssh2_errors

from planner.hosts.handshake import ssh2_failure


class _Session:
    def __init__(self, code: int, said: bytes) -> None:
        self.code, self.said = code, said

    def last_errno(self) -> int:
        return self.code

    def last_error(self) -> bytes:
        return self.said


def test_a_bare_libssh2_error_carries_libssh2s_own_words() -> None:
    # A bare SSH2Error was all a CI failure said ("SSH handshake failed (SSH2Error)").
    said = ssh2_failure(ssh2_errors.SSH2Error(), 5,
                        _Session(-8, b"Unable to exchange encryption keys"))
    assert said == ("SSH handshake failed (SSH2Error: libssh2 error -8, Unable to exchange "
                    "encryption keys)")


def test_a_session_that_cannot_say_adds_nothing() -> None:
    assert ssh2_failure(ssh2_errors.SSH2Error(), 5) == "SSH handshake failed (SSH2Error)"
    assert ssh2_failure(ssh2_errors.SSH2Error(), 5, _Session(0, b"")) == \
        "SSH handshake failed (SSH2Error)"


def test_errors_with_words_of_ours_keep_them() -> None:
    assert ssh2_failure(ssh2_errors.SocketDisconnectError(), 5, _Session(-13, b"x")) == \
        "the host closed the connection during the SSH handshake"
