"""Rules, chains and tables, shared by nftables and iptables, and how a packet walks them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
class _Skipped:
    """Rules skipped on the way, as a caveat names them: the first few and how many in all
    (a list of every one would double with each chain reached twice)."""

    shown: tuple[str, ...] = ()
    total: int = 0

    def plus(self, other: _Skipped) -> _Skipped:
        if not other.total:
            return self
        return _Skipped((*self.shown, *other.shown)[:_MAX_CAVEATS], self.total + other.total)

    def add(self, text: str) -> _Skipped:
        return self.plus(_Skipped((text,), 1))


_NONE_SKIPPED: Final = _Skipped()


@dataclass(frozen=True)
class _Outcome:
    verdict: str | None  # None: fell off the chain (or returned) without deciding
    path: tuple[str, ...] = ()  # the chains from the walked one to where it was decided
    rule: str = ""
    skipped: _Skipped = _NONE_SKIPPED


@dataclass
class _Walk:
    """One packet's walk through one table. A chain's outcome does not depend on who jumped
    to it, so each chain is walked once and its outcome reused: rulesets where chains jump
    twice to the next (netfilter takes them: there is no loop) cost 2**depth walks
    otherwise. A jump to a chain still being walked (a loop, which netfilter refuses) is
    skipped like one past the depth limit."""

    table: Table
    packet: Packet
    done: dict[str, _Outcome] = field(default_factory=dict)
    active: list[str] = field(default_factory=list)

    def chain(self, chain: Chain) -> _Outcome:
        found = self.done.get(chain.name)
        if found is None:
            self.active.append(chain.name)
            try:
                found = self.done[chain.name] = _walk(self, chain)
            finally:
                self.active.pop()
        return found

    def can_enter(self, chain: Chain) -> bool:
        return chain.name not in self.active and len(self.active) < _MAX_JUMP_DEPTH


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


def _walk(walk: _Walk, chain: Chain) -> _Outcome:
    skipped = _NONE_SKIPPED
    here = (chain.name,)
    for rule in chain.rules:
        verdict = _resolve(rule, walk.packet)
        if verdict is None:
            continue
        if isinstance(verdict, OpaqueAction):
            if _could_open(rule, walk.packet):
                skipped = skipped.add(rule.text)
            continue
        if verdict.kind in _TERMINAL:
            return _Outcome(verdict.kind, here, rule.text, skipped)
        if verdict.kind == "return":
            return _Outcome(None, here, "", skipped)
        target = walk.table.by_name.get(verdict.target)
        if target is None or not walk.can_enter(target):
            skipped = skipped.add(rule.text)
            continue
        sub = walk.chain(target)
        skipped = skipped.plus(sub.skipped)
        # A goto never comes back here: whatever the target ends with, this chain ends with.
        if sub.verdict is not None or verdict.kind == "goto":
            return _Outcome(sub.verdict, (*here, *sub.path), sub.rule, skipped)
    return _Outcome(None, here, "", skipped)


def _base_chain_block(walk: _Walk, chain: Chain) -> str | None:
    table = walk.table
    outcome = walk.chain(chain)
    verdict = outcome.verdict or chain.policy.lower()
    if verdict not in ("drop", "reject"):
        return None
    if outcome.verdict:
        reason = (f"{_where(table)} chain {' > '.join(outcome.path)}: "
                  f"rule '{shown(outcome.rule)}'")
    elif table.tool == "iptables":
        reason = f"{_where(table)} {chain.name} policy {chain.policy}"  # as iptables -L says it
    else:
        reason = f"{_where(table)} chain {chain.name}: policy {chain.policy}"
    return reason + caveat(outcome.skipped.shown, outcome.skipped.total)


def _where(table: Table) -> str:
    if table.tool == "nftables":
        return f"nftables table {table.family} {table.name}"
    return "iptables" if table.name == "filter" else f"iptables table {table.name}"


def shown(text: str, limit: int = 200) -> str:
    """A rule's text as a reason quotes it: a host's rule may be a megabyte long."""
    return text if len(text) <= limit else text[:limit] + "..."


def caveat(skipped: Sequence[str], total: int | None = None) -> str:
    """`skipped`: the first rules skipped (or all of them); `total`: how many in all."""
    if not skipped:
        return ""
    count = len(skipped) if total is None else total
    listed = ", ".join(f"'{shown(text)}'" for text in skipped[:_MAX_CAVEATS])
    more = f" and {count - _MAX_CAVEATS} more" if count > _MAX_CAVEATS else ""
    return f" (rules skipped as they depend on the peer or on unsupported matches: {listed}{more})"


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
    walks: dict[int, _Walk] = {}  # per table: its chains' outcomes serve every base chain
    for _, _, table, chain in entries:
        walk = walks.setdefault(id(table), _Walk(table, packet))
        reason = _base_chain_block(walk, chain)
        if reason:
            return reason
    return None
