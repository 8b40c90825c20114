"""Connect to the hosts of a plan with write access, holding each to the host key the plan
was made against."""

from __future__ import annotations

from collections.abc import Callable

from planner.config.model import ClusterConfig, HostConfig, SshConfig
from planner.errors import HostKeyError
from planner.hosts.pool import parallel
from planner.hosts.ssh import ConnectOptions, SshSession, open_session
from planner.plan.model import Plan

from .remote import HostWriter
from .waits import DEFAULT, Waits

# How apply opens a session: (label, the host's ssh settings, options, the pinned host key
# or None): ssh_session in real runs; unit tests pass a fake (tests/unit/fakes.py).
SessionFactory = Callable[[str, SshConfig, ConnectOptions, str | None], SshSession]


def ssh_session(label: str, ssh: SshConfig, options: ConnectOptions,
                pinned: str | None) -> SshSession:
    """The real one: SSH, held to `pinned` when it is given."""
    return open_session(label, ssh, options, pinned=pinned)


def pinned_keys(plan: Plan) -> dict[tuple[str, int], str | None]:
    return {(h.address, h.port): h.host_key for h in plan.hosts}


def connect_all(config: ClusterConfig, options: ConnectOptions,
                pinned: dict[tuple[str, int], str | None] | None = None, *,
                sessions: SessionFactory = ssh_session, waits: Waits = DEFAULT,
                ) -> list[HostWriter | Exception]:
    """One writer per host, in config order (or the Exception that host raised)."""
    pinned = pinned or {}

    def dial(host: HostConfig, want: str | None) -> SshSession:
        label = host.hostname or host.ssh.address
        session = sessions(label, host.ssh, options, want)
        # Checked again on the open session: the pin must hold whatever ~/.ssh/config did.
        if want and session.host_key_fingerprint != want:
            session.close()
            raise HostKeyError(label, f"host key is {session.host_key_fingerprint}, the plan was "
                                      f"made against {want}: refusing (re-plan if the "
                                      "host was rebuilt)")
        return session

    def connect(host: HostConfig) -> HostWriter:
        session = dial(host, pinned.get((host.ssh.address, host.ssh.port or 22)))
        # A reconnection must reach the very host this connection reached.
        first_key = session.host_key_fingerprint
        return HostWriter(session, session.user, config.options.command_timeout,
                          redial=lambda: dial(host, first_key),
                          reconnect_within=waits.reconnect_window(
                              config.options.connect_timeout))

    return parallel(list(config.hosts), connect, config.options.host_concurrency)
