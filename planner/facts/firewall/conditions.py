"""What a rule can test, three-valued: True/False when the answer follows from the packet alone,
None when it depends on something unknown at validation time (the peer, marks, rates...)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .model import Packet


class Condition(Protocol):
    def test(self, packet: Packet) -> bool | None: ...


@dataclass(frozen=True)
class Proto:
    names: frozenset[str]
    negate: bool = False

    def test(self, packet: Packet) -> bool | None:
        return (packet.proto in self.names) != self.negate


@dataclass(frozen=True)
class Dport:
    ranges: tuple[tuple[int, int], ...]
    negate: bool = False

    def test(self, packet: Packet) -> bool | None:
        return any(lo <= packet.port <= hi for lo, hi in self.ranges) != self.negate


@dataclass(frozen=True)
class CtState:
    states: frozenset[str]
    negate: bool = False

    def test(self, packet: Packet) -> bool | None:
        # The question is about opening a connection: its first packet is in state "new".
        return ("new" in self.states) != self.negate


@dataclass(frozen=True)
class Iface:
    names: frozenset[str]
    negate: bool = False

    def test(self, packet: Packet) -> bool | None:
        # Traffic from other nodes never arrives on loopback; any other name may be the one.
        if self.names == {"lo"}:
            return self.negate
        return None


@dataclass(frozen=True)
class Family:
    versions: frozenset[int]
    negate: bool = False

    def test(self, packet: Packet) -> bool | None:
        return (packet.ip_version in self.versions) != self.negate


@dataclass(frozen=True)
class Opaque:
    what: str
    peer: bool = False  # depends on who the peer is (its address), not on an unsupported match

    def test(self, packet: Packet) -> bool | None:
        return None


def all_match(conditions: Iterable[Condition], packet: Packet) -> bool | None:
    """Three-valued AND: one certain mismatch settles it, else any unknown leaves it unknown."""
    result: bool | None = True
    for condition in conditions:
        outcome = condition.test(packet)
        if outcome is False:
            return False
        if outcome is None:
            result = None
    return result
