"""ufw: `ufw status verbose` -> its default incoming policy and rules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .chains import caveat, worth_naming
from .conditions import Condition, Dport, Family, Iface, Opaque, Proto, all_match
from .model import FirewallParseError, Packet, port_spec

_UFW_RULE: Final = re.compile(
    r"^(?P<to>.+?)\s+(?P<action>ALLOW|DENY|REJECT|LIMIT)(?:\s+(?P<dir>IN|OUT|FWD))?"
    r"(?:\s+(?P<from>.*?))?\s*(?:#.*)?$"
)
_UFW_PORTS: Final = re.compile(r"^(?P<ports>[0-9:,]+)(?:/(?P<proto>tcp|udp))?$")


@dataclass(frozen=True)
class UfwRule:
    text: str
    action: str  # allow | deny | reject | limit
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class UfwState:
    active: bool
    default_incoming: str = ""  # allow | deny | reject
    rules: tuple[UfwRule, ...] = ()


def _ufw_to(to: str) -> list[Condition]:
    """The To column: `6443/tcp`, `2379:2380/tcp`, `80,443/tcp`, `22`, `Anywhere`, with an
    optional ` on IFACE`; an address or an application profile cannot be evaluated."""
    target, _, iface = to.partition(" on ")
    conditions: list[Condition] = []
    if iface:
        conditions.append(Iface(frozenset({iface.strip()})))
    if target == "Anywhere":
        return conditions
    found = _UFW_PORTS.match(target)
    if found is None:
        return [*conditions, Opaque(target)]
    conditions.append(Dport(tuple(port_spec(p, ":") for p in found["ports"].split(","))))
    if found["proto"]:
        conditions.append(Proto(frozenset({found["proto"]})))
    return conditions


def _ufw_rule(line: str) -> UfwRule | None:
    found = _UFW_RULE.match(line.strip())
    if found is None:
        raise FirewallParseError(f"ufw: unexpected rule line {line.strip()!r:.80}")
    if (found["dir"] or "IN") != "IN":
        return None  # outgoing and routed rules do not see traffic to the host
    to, source = found["to"], (found["from"] or "Anywhere").strip()
    version = 6 if "(v6)" in to or "(v6)" in source else 4
    to, source = (" ".join(text.replace("(v6)", " ").split()) for text in (to, source))
    source = re.sub(r"\s*\((log|log-all)\)$", "", source)
    conditions = [Family(frozenset({version})), *_ufw_to(to)]
    if source != "Anywhere":
        conditions.append(Opaque(f"from {source}", peer=True))
    return UfwRule(line.strip(), found["action"].lower(), tuple(conditions))


def parse_ufw(text: str) -> UfwState:
    lines = text.splitlines()
    status = next((line for line in lines if line.startswith("Status:")), None)
    if status is None:
        raise FirewallParseError("ufw status printed no 'Status:' line")
    if status.split(":", 1)[1].strip() != "active":
        return UfwState(active=False)
    default = next((line for line in lines if line.startswith("Default:")), None)
    incoming = re.search(r"(\w+) \(incoming\)", default or "")
    if incoming is None:
        raise FirewallParseError("ufw is active but printed no 'Default: ... (incoming)' policy")
    table = [i for i, line in enumerate(lines) if line.startswith("--")]
    rule_lines = lines[table[0] + 1:] if table else []
    rules = (_ufw_rule(line) for line in rule_lines if line.strip())
    return UfwState(True, incoming[1].lower(), tuple(rule for rule in rules if rule))


def ufw_block(state: UfwState | None, packet: Packet) -> str | None:
    if state is None or not state.active:
        return None
    skipped: list[str] = []
    for rule in state.rules:
        hit = all_match(rule.conditions, packet)
        if hit is None or (hit and rule.action == "limit"):
            if rule.action in ("allow", "limit") and worth_naming(rule.conditions, packet):
                skipped.append(rule.text)
            continue
        if hit:
            return None if rule.action == "allow" else f"ufw rule '{rule.text}'"
    if state.default_incoming == "allow":
        return None
    return f"ufw default incoming policy {state.default_incoming}" + caveat(skipped)
