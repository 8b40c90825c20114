"""The run's connections to gateways: bastions (cluster.yaml) and ProxyJump hosts
(~/.ssh/config), one connection each for every host behind it, each host a direct-tcpip
channel over it; and ProxyCommand pipes.

A connection per host made a bastion take as many unauthenticated connections at once as
hosts connect at once, and OpenSSH's default MaxStartups (10:30:100) drops most of them.

libssh2 runs a session on a socket, so a host behind a gateway gets one end of a socket
pair, and a pump on the run's loop carries bytes between the other end and the host's
channel over the gateway's session.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import Any

from ssh2 import exceptions as ssh2_errors
from ssh2.session import Session as Ssh2Session

from ..config.model import SshConfig
from ..errors import ConnectError, HostError
from .dial import dial
from .handshake import Checks, DialSettings, Peer, connect_failure, shake
from .host_keys import DEFAULT_KNOWN_HOSTS
from .ssh_config import Hop, Target
from .wire import EAGAIN, Wire

_CHUNK = 65536
Opener = Callable[[DialSettings], Awaitable[Wire]]


class _Gateway:
    """One gateway's connection, opened once for every host behind it."""

    def __init__(self, endpoint: str, opener: Opener) -> None:
        self.endpoint = endpoint
        self._open = opener
        self._lock: asyncio.Lock | None = None
        self._wire: Wire | None = None
        self._retired: list[Wire] = []
        self._failure: HostError | None = None
        self._connected_once = False
        self._attempts = 0

    async def wire(self, label: str, options: DialSettings, stale: Wire | None = None) -> Wire:
        """The gateway's connection; a new one if `stale` (the one a caller saw fail) is
        still the current one."""
        attempts = self._attempts
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._wire is not None and self._wire is not stale:
                return self._wire
            if stale is not None and stale.jammed:
                # Alive, with hosts' channels on it: kept for them, not used for new ones.
                self._retired.append(stale)
                self._wire = None
            # A gateway that never answered is dead for this run: every host behind it
            # gets that one attempt's error, not an attempt (a full timeout) of its own.
            # One that dropped a connection it had (an sshd restart) is dialled again, but
            # hosts that waited on an attempt share its outcome.
            if self._failure is not None and (not self._connected_once
                                              or attempts != self._attempts):
                raise type(self._failure)(label, self._failure.message)
            if self._wire is not None:  # dead: its hosts' channels went with it
                self._wire.shut()
                self._wire = None
            self._attempts += 1
            try:
                self._wire = await self._open(options)
            except HostError as exc:
                self._failure = exc
                raise type(exc)(label, exc.message) from None
            self._failure = None
            self._connected_once = True
            return self._wire

    def close(self) -> None:
        for wire in [*self._retired, *([self._wire] if self._wire is not None else [])]:
            wire.shut()
        self._retired, self._wire = [], None


class Gateways:
    """The gateway connections of one run. Made by whoever runs the hosts and closed when
    they are closed: the connections are the run's, so they live here, not in a module."""

    def __init__(self) -> None:
        self._gateways: dict[Hashable, _Gateway] = {}
        self._commands: list[subprocess.Popen[bytes]] = []
        self._pumps: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # where the pumps run

    def _gateway(self, key: Hashable, endpoint: str, opener: Opener) -> _Gateway:
        self._loop = asyncio.get_running_loop()
        gateway = self._gateways.get(key)
        if gateway is None:
            gateway = self._gateways[key] = _Gateway(endpoint, opener)
        return gateway

    async def bastion(self, label: str, ssh: SshConfig, options: DialSettings, host: str,
                      port: int) -> socket.socket:
        """A socket to `host`:`port` through the host's bastion."""
        assert ssh.bastion is not None
        b = ssh.bastion
        known_hosts = (ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
        user = b.user or ssh.user
        key = ("bastion", b.address, b.port, user, str(b.key_path) if b.key_path else None,
               str(known_hosts))
        endpoint = SshConfig(b.address, b.port).endpoint

        async def opener(options: DialSettings) -> Wire:
            target = options.ssh_config.resolve(
                b.address, b.port, user, (str(b.key_path),) if b.key_path else ())
            who = f"bastion {endpoint}"
            return await _open_gateway(who, "bastion", target, b.key_path, known_hosts,
                                       lambda: self.socket_for(who, target, known_hosts,
                                                               options), options)

        gateway = self._gateway(key, endpoint, opener)
        return await self._forward(gateway, label, ssh.endpoint, f"bastion {endpoint}",
                                   host, port, options)

    async def through_jumps(self, label: str, name: str, hops: tuple[Hop, ...],
                            known_hosts: Path, options: DialSettings, host: str,
                            port: int) -> socket.socket:
        """A socket to `host`:`port` through ProxyJump hosts, visited in order; each hop's
        connection is shared by every host that goes through the same hops."""
        previous: _Gateway | None = None
        via = ""
        for index, hop in enumerate(hops):
            target = options.ssh_config.resolve_hop(hop)
            who = f"jump host {target.endpoint}"

            async def sock(target: Target = target, who: str = who,
                           previous: _Gateway | None = previous,
                           via: str = via) -> tuple[socket.socket, bool]:
                if previous is None:  # the first hop: as its own ssh_config says
                    return await self.socket_for(who, target, known_hosts, options)
                return await self._forward(previous, who, target.endpoint, via, target.host,
                                           target.port, options), False

            async def opener(options: DialSettings, target: Target = target, who: str = who,
                             sock: Callable[[], Awaitable[tuple[socket.socket, bool]]] = sock,
                             ) -> Wire:
                # No cluster.yaml key for a jump host: its IdentityFile, the agent, ~/.ssh.
                return await _open_gateway(who, "jump host", target, None, known_hosts, sock,
                                           options)

            previous = self._gateway(("jump", hops[:index + 1], str(known_hosts)),
                                     target.endpoint, opener)
            via = who
        assert previous is not None
        return await self._forward(previous, label, name, via, host, port, options)

    async def socket_for(self, label: str, target: Target, known_hosts: Path,
                         options: DialSettings) -> tuple[socket.socket, bool]:
        """The socket of a connection to `target`: through its ProxyJump hosts, its
        ProxyCommand (then True: silence is the command's), or dialled directly."""
        if target.proxy_jump:
            return await self.through_jumps(label, target.endpoint, target.proxy_jump,
                                            known_hosts, options, target.host,
                                            target.port), False
        if target.proxy_command is not None:
            self._loop = asyncio.get_running_loop()
            return self._proxy_command(target.proxy_command), True
        try:
            return await dial(target.host, target.port, options.connect_timeout), False
        except OSError as exc:
            raise ConnectError(label, f"cannot connect to {label}: "
                                      f"{connect_failure(exc, options.connect_timeout)}") from None

    def _proxy_command(self, command: str) -> socket.socket:
        """The command's stdin and stdout as one socket, run by the shell as OpenSSH runs
        it; its stderr is the user's, as with ssh."""
        ours, theirs = socket.socketpair()
        try:
            self._commands.append(subprocess.Popen(  # noqa: S602 - the user's own command
                command, shell=True, stdin=theirs.fileno(), stdout=theirs.fileno(), close_fds=True,
                start_new_session=True))
        finally:
            theirs.close()
        ours.setblocking(False)
        return ours

    async def _forward(self, gateway: _Gateway, label: str, name: str, via: str, host: str,
                       port: int, options: DialSettings) -> socket.socket:
        timeout = options.connect_timeout
        wire = await gateway.wire(label, options)
        for retry in (True, False):
            try:
                # sshd's own connect to the host waits for the kernel's TCP timeout
                # (minutes): the host gets the connect timeout, as a direct connection.
                if wire.jammed:  # an open still hangs there: this host opens elsewhere
                    wire = await gateway.wire(label, options, stale=wire)
                channel = await wire.open(wire.session.direct_tcpip_ex, host, port,
                                          "127.0.0.1", 0, timeout=timeout)
                break
            except TimeoutError:
                raise ConnectError(label, f"cannot connect to {name} through {via}: "
                                          f"{connect_failure(TimeoutError(), timeout)}") from None
            except ssh2_errors.ChannelFailure:
                raise ConnectError(label, f"cannot connect to {name} through {via}: "
                                          "refused (the gateway could not connect)") from None
            except (ssh2_errors.SSH2Error, OSError) as exc:
                if not retry:  # the gateway's connection is gone: dialled once more
                    raise ConnectError(label, f"cannot connect to {name} through {via}: "
                                              f"{connect_failure(exc, timeout)}") from None
                wire = await gateway.wire(label, options, stale=wire)
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        self._loop = asyncio.get_running_loop()
        task = self._loop.create_task(_pump(wire, channel, ours))
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        return theirs

    def close(self) -> None:
        """Close every gateway connection, pump and ProxyCommand, on the loop that runs
        them (from any thread)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            try:
                if asyncio.get_running_loop() is loop:
                    self._close()
                    return
            except RuntimeError:
                pass  # not on any loop: a plain thread
            try:
                asyncio.run_coroutine_threadsafe(self._aclose(), loop).result(5)
                return
            except (RuntimeError, TimeoutError):
                pass  # the loop has stopped: nothing runs there any more
        self._close()

    async def _aclose(self) -> None:
        self._close()

    def _close(self) -> None:
        gateways, self._gateways = list(self._gateways.values()), {}
        for gateway in gateways:
            gateway.close()
        for pump in list(self._pumps):
            pump.cancel()
        commands, self._commands = self._commands, []
        for process in commands:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(1)


async def _open_gateway(who: str, kind: str, target: Target, key_path: Path | None,
                        known_hosts: Path,
                        sock: Callable[[], Awaitable[tuple[socket.socket, bool]]],
                        options: DialSettings) -> Wire:
    """A gateway's session; its key is checked exactly like a host's, never accepted
    unseen."""
    connected, proxied = await sock()
    wire = None
    try:
        session = Ssh2Session()
        session.set_blocking(False)
        wire = Wire(session, connected)
        await shake(wire, target, Peer(who, who, kind, known_hosts, key_path), options,
                    Checks(), proxied)
    except BaseException:
        # The loop forgets the socket before it is closed: a handshake cut short by its
        # deadline leaves it watched, and the next socket to get its number would meet
        # the stale watch (epoll: ENOENT, "No such file or directory").
        if wire is not None:
            wire.shut()
        else:
            connected.close()
        raise
    return wire


async def _pump(wire: Wire, channel: Any, sock: socket.socket) -> None:
    """Carry bytes between a host's socket pair end and its channel, both ways, until
    either side ends; then close both."""
    loop = asyncio.get_running_loop()

    async def down() -> None:  # the host's bytes, to the session on the other end
        while True:
            size, data = wire.attempt(channel.read, _CHUNK)
            wire.nudge(everyone=False)
            if size > 0:
                await loop.sock_sendall(sock, data)
            elif size == EAGAIN or (size == 0 and not channel.eof()):
                await wire.wait(ready=lambda: bool(channel.poll_channel_read(0)
                                                   or channel.eof()))
            else:
                return  # EOF, or the gateway's connection failed

    async def up() -> None:  # the session's bytes, to the host
        while data := await loop.sock_recv(sock, _CHUNK):
            view = memoryview(data)
            while view:
                chunk = bytes(view)
                code, sent = wire.attempt(channel.write, chunk)
                wire.nudge(everyone=False)
                view = view[sent:]
                if code == EAGAIN and wire.half_sent():
                    await wire.wait()
                elif code == EAGAIN:
                    await wire.wait(ready=lambda: channel.window_write() > 0)
        await wire.call(channel.send_eof)

    tasks = [loop.create_task(down()), loop.create_task(up())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        pass
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # The gateway's other hosts share its connection: a packet of this channel's cut
        # short (a write, a read's window adjust) is finished, or nothing more goes out on
        # it for any of them; so is the close.
        wire.settle(channel)
        wire.call_soon(channel.close)
        sock.close()
