"""4. Gather host facts: hostname, private interface and private address.

Overrides from the host entry and its profile win over what the host reports.
"""

from __future__ import annotations

from typing import Any

from ..context import HostState, PlanContext
from ..facts.network import HOSTNAME, NETWORK, Network
from ..hosts.batch import Fact
from .base import DryRun, Phase


class GatherHostFacts(Phase):
    title = "Gather host facts"
    dry_run = DryRun.RUNS_READ_ONLY

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        return [(HOSTNAME, False), (NETWORK, False)]

    def run(self, ctx: PlanContext) -> None:
        for host, (hostname, network) in ctx.gather(self.title, lambda _: [HOSTNAME, NETWORK]):
            host.network = network
            host.os_hostname = hostname
            host.hostname = host.config.hostname or hostname
            problem = _choose_private(host, network)
            if problem:
                ctx.fail_host(self.title, host, problem)
                continue
            overridden = " (from config)" if host.config.private_address else ""
            ctx.found(self.title, host,
                      f"hostname {host.hostname}, private address {host.private_address}"
                      f"{overridden} on {host.private_interface}")


def _choose_private(host: HostState, network: Network) -> str | None:
    cfg = host.config
    interface = cfg.private_interface or network.private_interface()
    if cfg.private_interface and not network.addresses_of(cfg.private_interface):
        return f"private interface {cfg.private_interface} (from config) has no IPv4 address " \
               "on the host"
    if cfg.private_address:
        host.private_interface = interface or "?"
        host.private_address = cfg.private_address
        return None
    if interface is None:
        return "no private address found: no default route and no global IPv4 address " \
               "(set privateAddress in the config)"
    host.private_interface = interface
    host.private_address = network.addresses_of(interface)[0]
    return None
