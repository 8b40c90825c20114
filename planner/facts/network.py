"""Hostname, private interface and private address, from `ip` output."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ..hosts.batch import Fact, FactParseError, Output
from .bounds import check_size


@dataclass(frozen=True)
class InterfaceAddress:
    interface: str
    address: str
    prefix: int
    scope: str


@dataclass(frozen=True)
class Network:
    addresses: tuple[InterfaceAddress, ...]
    default_interface: str | None

    def addresses_of(self, interface: str) -> list[str]:
        return [a.address for a in self.addresses if a.interface == interface]

    def private_interface(self) -> str | None:
        """The default route's interface, else the first with a global address."""
        if self.default_interface and self.addresses_of(self.default_interface):
            return self.default_interface
        for entry in self.addresses:
            if entry.scope == "global" and entry.interface != "lo":
                return entry.interface
        return None


# RFC 1123 labels, plus the '_' some real hosts have. The hostname becomes a Kubernetes
# node name and goes into messages and the plan: a host that reports `$(...)`, `../x` or
# an escape sequence is lying or broken, and is refused rather than carried along.
# Only matched against at most 253 characters (checked first), and each label's runs are
# bounded ({0,61}) and separated by a literal dot: no runaway backtracking.
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?"
                       r"(\.[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?)*$")


# What the kernel keeps (64 bytes), with room to spare; the addresses and routes of a host
# with very many interfaces.
MAX_HOSTNAME_OUTPUT = 1024
MAX_NETWORK_OUTPUT = 1 << 20


def parse_hostname(out: Output) -> str:
    name = check_size(out, MAX_HOSTNAME_OUTPUT, "the hostname").strip()
    if out.exit_code != 0 or len(name) > 253 or not _HOSTNAME.match(name):
        raise FactParseError(f"unusable hostname {name[:60]!r} (expected an RFC 1123 name)")
    return name


def parse_addresses(text: str) -> tuple[InterfaceAddress, ...]:
    """`ip -o -4 addr show`: `2: eth0    inet 10.0.0.5/16 brd ... scope global eth0 ...`."""
    found: list[InterfaceAddress] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != "inet":
            continue
        interface = fields[1].split("@", 1)[0]
        address, _, prefix = fields[3].partition("/")
        try:
            ipaddress.IPv4Address(address)
            bits = int(prefix or "32")
        except ValueError:
            raise FactParseError(f"bad address {fields[3][:40]!r} on {interface}") from None
        scope = fields[fields.index("scope") + 1] if "scope" in fields[:-1] else "global"
        found.append(InterfaceAddress(interface, address, bits, scope))
    return tuple(found)


def parse_default_interface(text: str) -> str | None:
    """`ip -4 route show default`: `default via 10.0.0.1 dev eth0 proto dhcp metric 100`."""
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["default"] and "dev" in fields[:-1]:
            return fields[fields.index("dev") + 1]
    return None


def parse_network(out: Output) -> Network:
    text = check_size(out, MAX_NETWORK_OUTPUT, "the network listing")
    addresses, sep, routes = text.partition("--routes--\n")
    if out.exit_code != 0 or not sep:
        raise FactParseError("`ip` is missing or failed (iproute2 is required)")
    return Network(parse_addresses(addresses), parse_default_interface(routes))


HOSTNAME: Fact[str] = Fact(
    "hostname", f"head -c {MAX_HOSTNAME_OUTPUT + 1} /proc/sys/kernel/hostname",
    parse_hostname)
NETWORK: Fact[Network] = Fact(
    "network",
    "ip -o -4 addr show && echo --routes-- && ip -4 route show default",
    parse_network,
    MAX_NETWORK_OUTPUT,
)
