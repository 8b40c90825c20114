"""Rules, chains and tables, shared by nftables and iptables, and how a packet walks them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Final

from .conditions import Condition, Dport, Iface, Opaque, all_match
from .model import Packet

_MAX_JUMP_DEPTH: Final = 64  # netfilter refuses loops; this only stops a corrupt listing
_MAX_CAVEATS: Final = 3


@dataclass(frozen=True)
class Verdict:
    kind: str  # accept | drop | reject | return | jump | goto
    target: str = ""


@dataclass(frozen=True)
class VerdictMap:
    entries: tuple[tuple[Condition, Verdict], ...]


@dataclass(frozen=True)
class OpaqueAction:
    what: str  # queue, an xt target...: may end the packet's walk, cannot tell how


Action = Verdict | VerdictMap | OpaqueAction | None
_UNSURE: Final = OpaqueAction("unsure")
_TERMINAL: Final = frozenset({"accept", "drop", "reject"})


@dataclass(frozen=True)
class Rule:
    conditions: tuple[Condition, ...]
    action: Action
    text: str


@dataclass(frozen=True)
class Chain:
    name: str
    rules: tuple[Rule, ...]
    hook: str | None = None  # base chains only
    priority: int = 0
    policy: str = ""  # "" for regular chains


@dataclass(frozen=True)
class Table:
    tool: str  # "nftables" | "iptables"
    family: str  # nft family; "ip" for iptables
    name: str
    chains: tuple[Chain, ...]
    uses_xt: bool = False  # nft table holding iptables-nft's opaque matches
    backend: str = ""  # iptables only: "nf_tables" | "legacy"

    @cached_property
    def by_name(self) -> Mapping[str, Chain]:
        return {chain.name: chain for chain in self.chains}


@dataclass(frozen=True)
class _Outcome:
    verdict: str | None  # None: fell off the chain (or returned) without deciding
    path: tuple[str, ...] = ()
    rule: str = ""
    skipped: tuple[str, ...] = ()


def _resolve(rule: Rule, packet: Packet) -> Verdict | OpaqueAction | None:
    """The rule's verdict for this packet; None when it does not apply, _UNSURE when unknown."""
    hit = all_match(rule.conditions, packet)
    if hit is False or rule.action is None:
        return None
    if hit is None or isinstance(rule.action, OpaqueAction):
        return _UNSURE
    if isinstance(rule.action, Verdict):
        return rule.action
    for key, verdict in rule.action.entries:
        found = key.test(packet)
        if found is None:
            return _UNSURE
        if found:
            return verdict
    return None


def worth_naming(conditions: Iterable[Condition], packet: Packet, jumps: bool = False) -> bool:
    """Whether a skipped rule that might have let the packet in is worth naming under a block:
    it names this very port, or it opens everything to some peers (`ip saddr 10.0.0.0/8
    accept`, `-i eth1 -j ACCEPT`). Generic ones (`ct status dnat accept`, a zone dispatch
    `iifname "eth0" goto ...`) would only bury the useful ones."""
    conditions = list(conditions)
    if any(isinstance(c, Dport) and c.test(packet) for c in conditions):
        return True
    unknown = [c for c in conditions if c.test(packet) is None]
    peer_only = all(isinstance(c, Iface) or (isinstance(c, Opaque) and c.peer) for c in unknown)
    return peer_only and not jumps


def _could_open(rule: Rule, packet: Packet) -> bool:
    action = rule.action
    if isinstance(action, Verdict) and action.kind in ("drop", "reject", "return"):
        return False
    jumps = isinstance(action, Verdict) and action.kind in ("jump", "goto")
    return worth_naming(rule.conditions, packet, jumps)


def _walk(table: Table, chain: Chain, packet: Packet, path: tuple[str, ...]) -> _Outcome:
    skipped: list[str] = []
    for rule in chain.rules:
        verdict = _resolve(rule, packet)
        if verdict is None:
            continue
        if isinstance(verdict, OpaqueAction):
            if _could_open(rule, packet):
                skipped.append(rule.text)
            continue
        if verdict.kind in _TERMINAL:
            return _Outcome(verdict.kind, path, rule.text, tuple(skipped))
        if verdict.kind == "return":
            return _Outcome(None, path, "", tuple(skipped))
        target = table.by_name.get(verdict.target)
        if target is None or len(path) >= _MAX_JUMP_DEPTH:
            skipped.append(rule.text)
            continue
        sub = _walk(table, target, packet, (*path, target.name))
        skipped.extend(sub.skipped)
        # A goto never comes back here: whatever the target ends with, this chain ends with.
        if sub.verdict is not None or verdict.kind == "goto":
            return _Outcome(sub.verdict, sub.path, sub.rule, tuple(skipped))
    return _Outcome(None, path, "", tuple(skipped))


def _base_chain_block(table: Table, chain: Chain, packet: Packet) -> str | None:
    outcome = _walk(table, chain, packet, (chain.name,))
    verdict = outcome.verdict or chain.policy.lower()
    if verdict not in ("drop", "reject"):
        return None
    if outcome.verdict:
        reason = f"{_where(table)} chain {' > '.join(outcome.path)}: rule '{outcome.rule}'"
    elif table.tool == "iptables":
        reason = f"{_where(table)} {chain.name} policy {chain.policy}"  # as iptables -L says it
    else:
        reason = f"{_where(table)} chain {chain.name}: policy {chain.policy}"
    return reason + caveat(outcome.skipped)


def _where(table: Table) -> str:
    if table.tool == "nftables":
        return f"nftables table {table.family} {table.name}"
    return "iptables" if table.name == "filter" else f"iptables table {table.name}"


def caveat(skipped: Sequence[str]) -> str:
    if not skipped:
        return ""
    shown = ", ".join(f"'{text}'" for text in skipped[:_MAX_CAVEATS])
    more = f" and {len(skipped) - _MAX_CAVEATS} more" if len(skipped) > _MAX_CAVEATS else ""
    return f" (rules skipped as they depend on the peer or on unsupported matches: {shown}{more})"


# Hooks a packet for the host crosses, in order; only "filter" chains are judged (nat and
# route chains rewrite rather than filter).
_HOOK_ORDER: Final[Mapping[str, int]] = MappingProxyType({"prerouting": 0, "input": 1})
_FAMILY_VERSIONS: Final[Mapping[str, frozenset[int]]] = MappingProxyType(
    {"ip": frozenset({4}), "ip6": frozenset({6}), "inet": frozenset({4, 6})}
)


def tables_block(tables: Iterable[Table], packet: Packet) -> str | None:
    """A packet must get through every base chain on its path: the first one that drops it."""
    entries = [
        (_HOOK_ORDER[chain.hook], chain.priority, table, chain)
        for table in tables
        if packet.ip_version in _FAMILY_VERSIONS.get(table.family, frozenset())
        for chain in table.chains
        if chain.hook is not None and chain.hook in _HOOK_ORDER
    ]
    entries.sort(key=lambda entry: entry[:2])
    for _, _, table, chain in entries:
        reason = _base_chain_block(table, chain, packet)
        if reason:
            return reason
    return None
