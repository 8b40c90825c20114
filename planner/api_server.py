"""Which address a controller's own API server answers on, as cargoship tells it to a
client: read from the host (its addresses, its engine's tls-san and node-ip) at plan time
and used again by apply, which is why this lives here and not in a phase."""

from __future__ import annotations

from typing import Any

from .context import HostState, PlanContext
from .kube import api_server, own_address


def server_for(ctx: PlanContext, host: HostState, admin: dict[str, Any]) -> tuple[str, str]:
    """The cluster's API server URL, read from this controller, and where it came from."""
    sans = host.engine_settings.list_of("tls-san") if host.engine_settings else []
    return api_server(admin, ctx.config.options.kubeconfig_server, sans, host_address(host))


def host_address(host: HostState) -> str:
    """The controller's own address for its own API server (covered by its certificate)."""
    addresses = [a.address for a in host.network.addresses] if host.network else []
    node_ips = host.engine_settings.list_of("node-ip") if host.engine_settings else []
    return own_address(host.config.ssh.address, addresses, node_ips, host.private_address)
