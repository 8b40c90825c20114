"""firewalld: `firewall-cmd --state`, `--list-all` (default zone), `--info-service=` each
service -> what the default zone opens."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from .model import FirewallParseError, Packet, Port, port_spec

# Fallback when a service's definition was not listed: firewalld's shipped definitions of the
# services that carry engine ports, with their <include>s flattened, and of the ones default
# zones enable (so that a reason does not call them unknown).
_FIREWALLD_SERVICES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "ssh": ("22/tcp",),
    "dhcpv6-client": ("546/udp",),
    "cockpit": ("9090/tcp",),
    "mdns": ("5353/udp",),
    "kube-apiserver": ("6443/tcp",),
    "kube-api": ("10250/tcp",),  # upstream: "Kubernetes Kubelet API", not the API server
    "kubelet": ("10250/tcp",),
    "etcd-client": ("2379/tcp",),
    "etcd-server": ("2380/tcp",),
    "kube-control-plane": ("2379/tcp", "2380/tcp", "6443/tcp", "10250/tcp", "10257/tcp",
                           "10259/tcp"),
    "kube-worker": ("10250/tcp", "30000-32767/tcp"),
    "kubelet-worker": ("10250/tcp", "30000-32767/tcp"),
    "kube-flannel": ("8285/udp", "8472/udp"),
})


@dataclass(frozen=True)
class _PortRange:
    proto: str
    lo: int
    hi: int

    def opens(self, packet: Packet) -> bool:
        return self.proto == packet.proto and self.lo <= packet.port <= self.hi


def _port_ranges_text(words: Iterable[str]) -> tuple[_PortRange, ...]:
    """`6443/tcp 2379-2380/tcp` (firewalld)."""
    found = []
    for word in words:
        port, sep, proto = word.partition("/")
        if not sep:
            raise FirewallParseError(f"firewalld: port without protocol {word!r:.40}")
        found.append(_PortRange(proto, *port_spec(port, "-")))
    return tuple(found)


@dataclass(frozen=True)
class FirewalldService:
    name: str
    ports: tuple[_PortRange, ...]
    protocols: frozenset[str]
    includes: tuple[str, ...]


@dataclass(frozen=True)
class FirewalldZone:
    name: str
    target: str
    services: tuple[str, ...]
    ports: tuple[_PortRange, ...]
    protocols: frozenset[str]
    rich_rules: int  # not evaluated: counted to say so in the reason


@dataclass(frozen=True)
class FirewalldState:
    running: bool
    zone: FirewalldZone | None = None
    services: tuple[FirewalldService, ...] = ()

    def opens(self, packet: Packet) -> tuple[bool, tuple[str, ...]]:
        """Whether the default zone lets the packet in, and the services of unknown ports."""
        zone = self.zone
        if zone is None or zone.target.upper() == "ACCEPT":
            return True, ()
        if any(r.opens(packet) for r in zone.ports) or packet.proto in zone.protocols:
            return True, ()
        unknown: list[str] = []
        listed = {service.name: service for service in self.services}
        pending, seen = list(zone.services), set()
        while pending:
            name = pending.pop(0)
            if name in seen:
                continue
            seen.add(name)
            service = listed.get(name) or self._fallback(name)
            if service is None:
                unknown.append(name)
            elif any(r.opens(packet) for r in service.ports) or packet.proto in service.protocols:
                return True, ()
            else:
                pending.extend(service.includes)
        return False, tuple(unknown)

    @staticmethod
    def _fallback(name: str) -> FirewalldService | None:
        ports = _FIREWALLD_SERVICES.get(name)
        if ports is None:
            return None
        return FirewalldService(name, _port_ranges_text(ports), frozenset(), ())


# The listing script reads at most this many services (script.py), each once.
MAX_SERVICES = 256


def _firewalld_blocks(text: str) -> list[tuple[str, dict[str, str]]]:
    """`name (attrs)` header lines, each followed by `  key: value` lines."""
    # A value's lines are collected, then joined once: joining at every continuation line
    # copied the value so far each time, quadratic in a zone of many rich rules.
    blocks: list[tuple[str, dict[str, list[str]]]] = []
    last_key = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            if len(blocks) > MAX_SERVICES:  # the zone's block, then its services'
                raise FirewallParseError(f"firewalld: more than {MAX_SERVICES} services "
                                         "listed; refused")
            blocks.append((line.strip(), {}))
        elif not blocks:
            raise FirewallParseError(f"firewalld: indented line before any zone: {line!r:.60}")
        elif line.startswith("\t"):  # continuation of `rich rules:` / `forward-ports:`
            blocks[-1][1].setdefault(last_key, []).append(line.strip())
        else:
            key, sep, value = line.strip().partition(":")
            if not sep:
                raise FirewallParseError(f"firewalld: unexpected line {line!r:.60}")
            blocks[-1][1][key] = [value.strip()]
            last_key = key
    return [(header, {key: "\n".join(part for part in parts if part)
                      for key, parts in values.items()}) for header, values in blocks]


def parse_firewalld(text: str) -> FirewalldState:
    state, _, rest = text.strip().partition("\n")
    if state.strip() == "not running":
        return FirewalldState(running=False)
    if state.strip() != "running":
        raise FirewallParseError(f"firewalld: unexpected state {state.strip()!r:.40}")
    blocks = _firewalld_blocks(rest)
    if not blocks:
        raise FirewallParseError("firewalld is running but its default zone was not listed")
    (header, zone), services = blocks[0], blocks[1:]
    if "target" not in zone:
        raise FirewallParseError(f"firewalld: zone {header!r:.40} has no target line")
    return FirewalldState(
        running=True,
        zone=FirewalldZone(
            name=header.split()[0],
            target=zone["target"],
            services=tuple(zone.get("services", "").split()),
            ports=_port_ranges_text(zone.get("ports", "").split()),
            protocols=frozenset(zone.get("protocols", "").split()),
            rich_rules=len(zone.get("rich rules", "").splitlines()),
        ),
        services=tuple(
            FirewalldService(
                name=name.split()[0],
                ports=_port_ranges_text(values.get("ports", "").split()),
                protocols=frozenset(values.get("protocols", "").split()),
                includes=tuple(values.get("includes", "").split()),
            )
            for name, values in services
        ),
    )


def firewalld_block(state: FirewalldState | None, packet: Packet, port: Port) -> str | None:
    if state is None or not state.running or state.zone is None:
        return None
    opened, unknown = state.opens(packet)
    if opened:
        return None
    zone = state.zone
    notes = []
    if zone.target.upper() not in ("DEFAULT", "ACCEPT"):
        notes.append(f"target {zone.target}")
    if unknown:
        notes.append(f"services of unknown ports: {', '.join(unknown)}")
    if zone.rich_rules:
        notes.append(f"{zone.rich_rules} rich rule(s) not evaluated")
    note = f" ({'; '.join(notes)})" if notes else ""
    return f"firewalld zone {zone.name} does not open {port}{note}"
