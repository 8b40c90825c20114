"""What the firewall fact talks about: ports, what blocks them, the packet judged, and errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from ...hosts.batch import FactParseError


class FirewallParseError(FactParseError):
    """The firewall listing could not be understood; the message says what was expected."""


@dataclass(frozen=True)
class Port:
    proto: str  # "tcp" | "udp"
    number: int
    purpose: str  # e.g. "kube-apiserver", used in messages

    def __str__(self) -> str:
        return f"{self.number}/{self.proto}"


@dataclass(frozen=True)
class BlockedPort:
    port: Port
    tool: str  # "nftables" | "iptables" | "firewalld" | "ufw"
    reason: str  # which table/chain/rule or policy blocks it


@dataclass(frozen=True)
class ToolError:
    """A tool was present but its listing failed: nothing is known about what it blocks."""

    tool: str
    message: str


@dataclass(frozen=True)
class Packet:
    """The first packet of a new inbound connection (or UDP flow) to one port of the host."""

    proto: str
    port: int
    ip_version: int


# IP protocol numbers by name, as nft and iptables may print them.
PROTOCOL_NUMBERS: Final[Mapping[int, str]] = MappingProxyType(
    {1: "icmp", 6: "tcp", 17: "udp", 33: "dccp", 58: "ipv6-icmp", 132: "sctp", 136: "udplite"}
)


def port_spec(text: str, separator: str) -> tuple[int, int]:
    """`6443`, `2379:2380` (iptables), `2379-2380` (firewalld); open ends as iptables allows."""
    lo, sep, hi = text.partition(separator)
    try:
        if not sep:
            return int(lo), int(lo)
        return int(lo or 0), int(hi or 65535)
    except ValueError:
        raise FirewallParseError(f"unexpected port {text!r:.40}") from None
