"""ufw: `ufw status verbose` -> its default incoming policy and rules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ..bounds import MAX_LINE, bounded_lines
from .chains import caveat, shown, worth_naming
from .conditions import Condition, Dport, Family, Iface, Opaque, Proto, all_match
from .model import FirewallParseError, Packet, port_spec

# A rule line is read word by word, not by a pattern: the one it had,
# `^(?P<to>.+?)\s+(?P<action>...)...(?:\s+(?P<from>.*?))?\s*(?:#.*)?$`, tried every split
# of a line that did not match, so one rule row padded with 50,000 blanks held a plan at
# 100% CPU for good.
_ACTIONS: Final = frozenset({"ALLOW", "DENY", "REJECT", "LIMIT"})
_DIRECTIONS: Final = frozenset({"IN", "OUT", "FWD"})
# Anchored; a digit class, then a literal "/": each position is tried once.
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


def _split_rule(line: str) -> tuple[str, str, str, str] | None:
    """`To  Action [Direction]  From  [# comment]` -> (to, action, direction, from): the
    first action word after the To column ends it, a `#` after it starts the comment (as
    the lazy pattern read them)."""
    words = line.split()
    at = next((i for i, word in enumerate(words) if i > 0 and word in _ACTIONS), None)
    if at is None:
        return None
    rest = words[at + 1:]
    direction = rest.pop(0) if rest and rest[0] in _DIRECTIONS else "IN"
    source = " ".join(rest).partition("#")[0].strip()
    return " ".join(words[:at]), words[at], direction, source or "Anywhere"


def _without_log(source: str) -> str:
    for suffix in ("(log)", "(log-all)"):
        if source.endswith(suffix):
            return source.removesuffix(suffix).rstrip()
    return source


def _ufw_rule(line: str) -> UfwRule | None:
    found = _split_rule(line)
    if found is None:
        raise FirewallParseError(f"ufw: unexpected rule line {line.strip()!r:.80}")
    to, action, direction, source = found
    if direction != "IN":
        return None  # outgoing and routed rules do not see traffic to the host
    version = 6 if "(v6)" in to or "(v6)" in source else 4
    to, source = (" ".join(text.replace("(v6)", " ").split()) for text in (to, source))
    source = _without_log(source)
    conditions = [Family(frozenset({version})), *_ufw_to(to)]
    if source != "Anywhere":
        conditions.append(Opaque(f"from {source}", peer=True))
    return UfwRule(line.strip(), action.lower(), tuple(conditions))


def _incoming_policy(default: str) -> str | None:
    """The word right before " (incoming)" on the Default: line."""
    for part in default.split(" (incoming)")[:-1]:
        start = len(part)
        while start > 0 and (part[start - 1].isalnum() or part[start - 1] == "_"):
            start -= 1
        if start < len(part):
            return part[start:]
    return None


def parse_ufw(text: str) -> UfwState:
    # No line of `ufw status` comes near MAX_LINE; a longer one is refused, not skipped
    # (a rule skipped could be the one that opens or closes a port).
    lines = bounded_lines(text, "ufw", MAX_LINE, FirewallParseError)
    status = next((line for line in lines if line.startswith("Status:")), None)
    if status is None:
        raise FirewallParseError("ufw status printed no 'Status:' line")
    if status.split(":", 1)[1].strip() != "active":
        return UfwState(active=False)
    default = next((line for line in lines if line.startswith("Default:")), None)
    incoming = _incoming_policy(default or "")
    if incoming is None:
        raise FirewallParseError("ufw is active but printed no 'Default: ... (incoming)' policy")
    table = [i for i, line in enumerate(lines) if line.startswith("--")]
    rule_lines = lines[table[0] + 1:] if table else []
    rules = (_ufw_rule(line) for line in rule_lines if line.strip())
    return UfwState(True, incoming.lower(), tuple(rule for rule in rules if rule))


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
            return None if rule.action == "allow" else f"ufw rule '{shown(rule.text)}'"
    if state.default_incoming == "allow":
        return None
    return f"ufw default incoming policy {state.default_incoming}" + caveat(skipped)
