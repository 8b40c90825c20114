"""nftables expressions -> conditions and actions: matches, verdicts and verdict maps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from ...safetext import decimal
from .chains import Action, OpaqueAction, Verdict, VerdictMap
from .conditions import Condition, CtState, Dport, Family, Iface, Opaque, Proto
from .model import PROTOCOL_NUMBERS
from .nft_json import as_object, as_string, single


@dataclass(frozen=True)
class NftScope:
    """What a rule's expressions may refer to: the named sets and maps of its table."""

    sets: Mapping[str, Sequence[object]]


def _elements(value: object, scope: NftScope, named: bool = True) -> list[object] | None:
    """Flatten a right-hand side into its elements: sets, named sets, counted elements.

    A named set is looked up only where the rule names it (the whole right-hand side),
    never from inside a set: nft has no sets of sets, and a listing whose sets each held
    the one before twice would expand to 2**n elements (a list naming one big set many
    times, to their product)."""
    if isinstance(value, str) and value.startswith("@"):
        elements = scope.sets.get(value[1:]) if named else None
        return None if elements is None else _elements(list(elements), scope, named=False)
    if isinstance(value, list):
        found: list[object] = []
        for item in value:
            inner = _elements(item, scope, named=False)
            if inner is None:
                return None
            found.extend(inner)
        return found
    pair = single(value)
    if pair and pair[0] == "set":
        return _elements(pair[1], scope, named=False)
    if pair and pair[0] == "elem":
        return _elements(as_object(pair[1], "elem").get("val"), scope, named=False)
    return [value]


def _port_ranges(value: object, scope: NftScope) -> tuple[tuple[int, int], ...] | None:
    items = _elements(value, scope)
    if items is None:
        return None
    ranges: list[tuple[int, int]] = []
    for item in items:
        pair = single(item)
        if pair and pair[0] == "range" and isinstance(pair[1], list) and len(pair[1]) == 2:
            lo, hi = pair[1]
            if not (isinstance(lo, int) and isinstance(hi, int)):
                return None
            ranges.append((lo, hi))
        elif isinstance(item, int) and not isinstance(item, bool):
            ranges.append((item, item))
        elif isinstance(item, str) and (port := decimal(item)) is not None:
            ranges.append((port, port))
        else:
            return None  # a service name or a concatenation: not a plain port
    return tuple(ranges)


def _names(value: object, scope: NftScope) -> frozenset[str] | None:
    items = _elements(value, scope)
    if items is None:
        return None
    names: set[str] = set()
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            names.add(PROTOCOL_NUMBERS.get(item, str(item)))
        elif isinstance(item, str):
            names.add(item.lower())
        else:
            return None
    return frozenset(names)


_L4_PROTOCOLS: Final = frozenset({"tcp", "udp", "sctp", "dccp", "udplite", "icmp", "icmpv6"})
_IP_VERSIONS: Final[Mapping[str, int]] = MappingProxyType(
    {"ip": 4, "ipv4": 4, "ip6": 6, "ipv6": 6}
)


def nft_match(body: object, scope: NftScope) -> list[Condition]:
    match = as_object(body, "match")
    op, left, right = match.get("op"), single(match.get("left")), match.get("right")
    if op not in ("==", "!=", "in") or left is None:
        return [Opaque("match")]
    negate = op == "!="
    kind = left[0]
    spec = as_object(left[1], kind)
    if kind == "payload":
        return _nft_payload_match(spec, right, negate, scope)
    if kind == "meta":
        return [_nft_meta_match(str(spec.get("key")), right, negate, scope)]
    if kind == "ct" and spec.get("key") == "state":
        states = _names(right, scope)
        return [CtState(states, negate) if states is not None else Opaque("ct state")]
    return [Opaque(kind)]


def _nft_payload_match(
    spec: Mapping[str, object], right: object, negate: bool, scope: NftScope
) -> list[Condition]:
    protocol, fieldname = spec.get("protocol"), spec.get("field")
    conditions: list[Condition] = []
    # Naming a header implies the packet has it: `tcp dport != 22` still requires tcp,
    # `ip saddr ...` in an inet chain never matches an IPv6 packet.
    if protocol in _L4_PROTOCOLS:
        conditions.append(Proto(frozenset({str(protocol)})))
    elif protocol in ("ip", "ip6"):
        conditions.append(Family(frozenset({_IP_VERSIONS[str(protocol)]})))
    elif protocol != "th":
        return [Opaque(f"payload {protocol}")]
    if fieldname == "dport" and protocol not in ("ip", "ip6"):
        ranges = _port_ranges(right, scope)
        conditions.append(Dport(ranges, negate) if ranges is not None else Opaque("dport"))
    elif fieldname in ("protocol", "nexthdr") and protocol in ("ip", "ip6"):
        names = _names(right, scope)
        conditions.append(Proto(names, negate) if names is not None else Opaque("protocol"))
    else:
        # Addresses, source ports, flags; the source address is the one thing users restrict.
        conditions.append(Opaque(f"{protocol} {fieldname}", peer=fieldname == "saddr"))
    return conditions


def _nft_meta_match(key: str, right: object, negate: bool, scope: NftScope) -> Condition:
    names = _names(right, scope)
    if names is None:
        return Opaque(f"meta {key}")
    if key == "l4proto":
        return Proto(names, negate)
    if key in ("iifname", "iif"):
        return Iface(names, negate)
    if key == "nfproto" and names <= _IP_VERSIONS.keys():
        return Family(frozenset(_IP_VERSIONS[name] for name in names), negate)
    return Opaque(f"meta {key}")


def nft_verdict(key: str, body: object) -> Verdict | None:
    if key in ("accept", "drop", "reject", "return"):
        return Verdict(key)
    if key in ("jump", "goto"):
        return Verdict(key, as_string(as_object(body, key).get("target"), f"{key} target"))
    return None


def nft_vmap(body: object, scope: NftScope) -> Action:
    vmap = as_object(body, "vmap")
    key = single(vmap.get("key"))
    data = vmap.get("data")
    if isinstance(data, str) and data.startswith("@"):
        data = list(scope.sets.get(data[1:], ()))
    pair = single(data)
    pairs = pair[1] if pair and pair[0] == "set" else data
    if key is None or not isinstance(pairs, list):
        return OpaqueAction("vmap")
    entries: list[tuple[Condition, Verdict]] = []
    for item in pairs:
        # A key naming a set is no map nft prints, and would expand that set per entry.
        if not (isinstance(item, list) and len(item) == 2) or (
                isinstance(item[0], str) and item[0].startswith("@")):
            return OpaqueAction("vmap")
        conditions = nft_match({"op": "==", "left": dict([key]), "right": item[0]}, scope)
        verdict = single(item[1])
        action = nft_verdict(*verdict) if verdict else None
        # The key of `tcp dport vmap` also implies tcp: that part goes to the rule's conditions.
        lookups = [c for c in conditions if not isinstance(c, Proto | Family)] or conditions
        if action is None or len(lookups) != 1 or isinstance(lookups[0], Opaque):
            return OpaqueAction("vmap")
        entries.append((lookups[0], action))
    return VerdictMap(tuple(entries))


def vmap_key_conditions(body: object) -> list[Condition]:
    key = single(as_object(body, "vmap").get("key"))
    if key and key[0] == "payload":
        protocol = as_object(key[1], "payload").get("protocol")
        if protocol in _L4_PROTOCOLS:
            return [Proto(frozenset({str(protocol)}))]
    return []
