"""Servers that accept a TCP connection and then stall an SSH client at one stage:

    silent   accepts and says nothing (a hung sshd, a tarpit, not an SSH server)
    banner   sends a valid "SSH-2.0-x" banner, then nothing (no key exchange)
    auth     a real SSH server (paramiko) that finishes the key exchange, then never
             answers authentication (an sshd stuck on PAM or LDAP)

Every connection is held open until close(). In-process for unit tests; for end-to-end
tests, `python -m tests.stalling_listener MODE` inside a lab host's network namespace
prints its port on a line of its own, then serves until it is killed.

(tests/unit/test_dial.py's silent_listener is the other kind: a full backlog, so the TCP
connection itself never completes.)
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import paramiko

BANNER = b"SSH-2.0-x\r\n"
MODES = ("silent", "banner", "auth")


class _NeverAnswers(paramiko.ServerInterface):
    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        self.release.wait()  # the transport's thread, so no answer of any kind goes out
        return paramiko.AUTH_FAILED

    def check_auth_none(self, username: str) -> int:
        self.release.wait()
        return paramiko.AUTH_FAILED


class StallingListener:
    def __init__(self, mode: str, host: str = "127.0.0.1", port: int = 0,
                 host_key: paramiko.PKey | None = None) -> None:
        if mode not in MODES or (mode == "auth") != (host_key is not None):
            raise ValueError(f"mode {mode!r}: one of {MODES}; a host key for auth only")
        self.mode = mode
        self.host_key = host_key
        self.listener = socket.create_server((host, port))
        self.port: int = self.listener.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket | paramiko.Transport] = []
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # close() shut the listener down
            self.accepted += 1
            if self.mode == "auth":
                transport = paramiko.Transport(conn)
                assert self.host_key is not None
                transport.add_server_key(self.host_key)
                transport.start_server(event=threading.Event(),
                                       server=_NeverAnswers(self._release))
                self._held.append(transport)
                continue
            if self.mode == "banner":
                conn.sendall(BANNER)
            self._held.append(conn)

    def wait_accepted(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.accepted < count:
            assert time.monotonic() < deadline, f"{self.accepted} of {count} accepted"
            time.sleep(0.01)

    def close(self) -> None:
        # shutdown() wakes the accept() blocked in the serving thread (Linux); close alone
        # would leave it waiting on a socket nobody can reach.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self._thread.join(5)
        self._release.set()
        for held in self._held:
            held.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("silent", "banner"):
        print("usage: python -m tests.stalling_listener silent|banner", file=sys.stderr)
        return 2
    listener = StallingListener(argv[0], host="0.0.0.0")  # every address of a lab host
    print(listener.port, flush=True)
    threading.Event().wait()  # until killed
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
