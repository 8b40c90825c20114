"""A host's TCP connection, on the run's loop: its name resolved and every address it
resolves to tried, all inside the one connect deadline.

Every host of a run dials at once (nothing limits dials, only handshakes), so a fleet with
dead hosts costs one connect timeout in all, not one per wave of `concurrency.hosts`. An
address that does not answer gets its share of what is left of the deadline, so the next
address (an IPv4 one after an unreachable IPv6 one) is still tried in time.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from typing import Any


def _numeric(host: str, port: int) -> list[tuple[Any, ...]] | None:
    """An address given as one (most fleets' hosts) resolved here and now: getaddrinfo with
    AI_NUMERICHOST never asks a resolver, so it needs none of the loop's resolver threads
    (a thread hop per host, and a pool of them started for a fleet). None for a name."""
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                  flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        return None


async def _resolve(loop: asyncio.AbstractEventLoop, host: str, port: int,
                   timeout: float) -> list[tuple[Any, ...]]:
    try:
        async with asyncio.timeout(timeout):
            return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise TimeoutError(errno.ETIMEDOUT, "timed out resolving the name") from None


async def dial(host: str, port: int, timeout: float) -> socket.socket:
    """A connected non-blocking socket with TCP_NODELAY, or the OSError of the last address
    tried (socket.gaierror when the name does not resolve, TimeoutError at the deadline)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout
    infos = _numeric(host, port) or await _resolve(loop, host, port, timeout)
    failure: OSError = TimeoutError(errno.ETIMEDOUT, "timed out")
    for index, (family, kind, proto, _, address) in enumerate(infos):
        left = len(infos) - index
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:  # out of file descriptors: this host's error, not all's
            failure = exc
            continue
        sock.setblocking(False)
        try:
            async with asyncio.timeout(remaining / left):
                await loop.sock_connect(sock, address)
        except TimeoutError:
            sock.close()
            failure = TimeoutError(errno.ETIMEDOUT, "timed out")
            continue
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise failure
