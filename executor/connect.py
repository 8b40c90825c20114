"""Connect to the hosts of a plan with write access, holding each to the host key the plan
was made against."""

from __future__ import annotations

from planner.config.model import ClusterConfig, HostConfig
from planner.errors import HostKeyError
from planner.hosts.pool import parallel
from planner.hosts.ssh import ConnectOptions, open_session
from planner.plan.model import Plan

from .remote import HostWriter


def pinned_keys(plan: Plan) -> dict[tuple[str, int], str | None]:
    return {(h.address, h.port): h.host_key for h in plan.hosts}


def connect_all(config: ClusterConfig, options: ConnectOptions,
                pinned: dict[tuple[str, int], str | None] | None = None,
                ) -> list[HostWriter | Exception]:
    """One writer per host, in config order (or the Exception that host raised)."""
    pinned = pinned or {}

    def connect(host: HostConfig) -> HostWriter:
        label = host.hostname or host.ssh.address
        expected = pinned.get((host.ssh.address, host.ssh.port or 22))
        session = open_session(label, host.ssh, options, pinned=expected)
        # Checked again on the open session: the pin must hold whatever ~/.ssh/config did.
        if expected and session.host_key_fingerprint != expected:
            session.close()
            raise HostKeyError(label, f"host key is {session.host_key_fingerprint}, the plan was "
                                      f"made against {expected}: refusing (re-plan if the "
                                      "host was rebuilt)")
        return HostWriter(session, session.user, config.options.command_timeout)

    return parallel(list(config.hosts), connect, config.options.host_concurrency)
