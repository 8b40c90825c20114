"""FirewallState: what every firewall tool of one host has loaded, and which ports it blocks."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .chains import Table, tables_block
from .firewalld import FirewalldState, firewalld_block
from .model import BlockedPort, Packet, Port, ToolError
from .ufw import UfwState, ufw_block


@dataclass(frozen=True)
class FirewallState:
    """What each firewall tool of one host has loaded; blocked() judges ports against it."""

    tools: tuple[str, ...]  # tools found active, in TOOLS order
    nftables: tuple[Table, ...] = ()
    iptables: tuple[Table, ...] = ()
    firewalld: FirewalldState | None = None
    ufw: UfwState | None = None
    errors: tuple[ToolError, ...] = ()  # tools present whose listing failed

    def blocked(self, ports: Iterable[Port], *, ip_version: int = 4) -> list[BlockedPort]:
        """Per port, each tool that stops a new inbound connection, with where it does.

        ip_version picks the traffic judged: the engine's node-to-node traffic is IPv4 unless
        the cluster is IPv6 or dual-stack. iptables-save is IPv4 only (ip6tables is not read).
        """
        if ip_version not in (4, 6):
            raise ValueError(f"ip_version must be 4 or 6, not {ip_version!r}")
        found: list[BlockedPort] = []
        for port in dict.fromkeys(ports):
            packet = Packet(port.proto, port.number, ip_version)
            for tool, reason in self._reasons(packet, port):
                if reason:
                    found.append(BlockedPort(port, tool, reason))
        return found

    def _reasons(self, packet: Packet, port: Port) -> list[tuple[str, str | None]]:
        return [
            ("nftables", tables_block(self.nftables, packet)),
            ("iptables", tables_block(self.iptables, packet)),
            ("firewalld", firewalld_block(self.firewalld, packet, port)),
            ("ufw", ufw_block(self.ufw, packet)),
        ]
