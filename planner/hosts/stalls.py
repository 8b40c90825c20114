"""Where an SSH handshake stalled once its TCP connection was up, and one line saying so.

A host that accepts the connection and then says nothing (an overloaded or hung sshd, a
tarpit, something other than sshd on the port) used to be reported as a connect timeout:
"host down, or a firewall dropping port 22's packets", sending whoever reads it to look
at the wrong thing. A handshake that stalls is now named by its stage: no banner, a
banner but no key exchange, or a key exchange but no answer to authentication.

The whole handshake has one deadline, the connect timeout counted from the TCP connection
(handshake.py).
"""

from __future__ import annotations

import socket
import sys
from typing import Literal

Stage = Literal["banner", "proxy", "kex", "auth"]

_STALLS: dict[Stage, tuple[str, str]] = {
    "banner": ("connected, but the SSH server sent no banner",
               "an overloaded or hung sshd, a tarpit, or not an SSH server on that port"),
    "proxy": ("no SSH banner came through its ProxyCommand",
              "the command did not get through, an overloaded or hung sshd, or not an SSH "
              "server on that port"),
    "kex": ("connected and the SSH server sent its banner, but the key exchange did not "
            "finish", "an overloaded or hung sshd"),
    "auth": ("connected and the key exchange finished, but authentication did not finish",
             "sshd waiting on PAM, LDAP or DNS, or overloaded"),
}

# The first bytes of a connection, peeked at: enough for a banner and a few lines before it.
_PEEK = 512
# struct tcp_info (linux/tcp.h): tcpi_bytes_received is the u64 at offset 128 (Linux 4.1+).
_TCP_INFO_SIZE = 256
_BYTES_RECEIVED = slice(128, 136)


def stalled(name: str, stage: Stage, timeout: float) -> str:
    """`name` ("10.0.0.21:22", "bastion 10.0.0.9:22") stalled at `stage`, in one line."""
    what, why = _STALLS[stage]
    return f"{name}: {what} within {timeout:g}s ({why}; options.ssh.connectTimeoutSeconds)"


class HandshakeWatch:
    """How far a libssh2 handshake got, for its message if it runs out of time.

    ssh2-python cannot say whether the server's banner came (libssh2_session_banner_get is
    not bound), so the handshake peeks at its socket before each libssh2 step: what the
    server sent that libssh2 has not read yet. Once the banner is seen, peeking stops.
    """

    def __init__(self) -> None:
        self.banner = False  # a line starting "SSH-" was seen
        self.other = False  # something else was seen: lines before a banner, or not SSH
        self.kex_done = False  # set by the handshake once libssh2's handshake returned

    def look(self, sock: socket.socket) -> None:
        if self.banner:
            return
        try:
            # MSG_DONTWAIT: the socket may still be blocking (libssh2 makes it
            # non-blocking in its first step).
            data = sock.recv(_PEEK, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            return  # nothing yet (EAGAIN), or an error libssh2 meets and reports itself
        if data.startswith(b"SSH-") or b"\nSSH-" in data:
            self.banner = True
        elif data:
            self.other = True

    def stage(self, sock: socket.socket) -> Stage:
        if self.kex_done:
            return "auth"
        self.look(sock)
        if self.banner:
            return "kex"
        if self.other:
            return "banner"  # it sent something, never a banner
        # Nothing seen, yet the kernel may have received bytes: a banner that landed
        # between a peek and libssh2's own read of it (the first step's race).
        return "kex" if _bytes_received(sock) else "banner"


def _bytes_received(sock: socket.socket) -> int:
    """Every byte the peer sent on this connection, where the kernel says (Linux); else 0."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except (OSError, AttributeError):  # AttributeError: no TCP_INFO on this system
        return 0
    if len(info) < _BYTES_RECEIVED.stop:
        return 0  # a kernel older than 4.1
    return int.from_bytes(info[_BYTES_RECEIVED], sys.byteorder)  # native, as the kernel's
