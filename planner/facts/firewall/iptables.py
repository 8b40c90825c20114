"""iptables: `iptables-save`, one dump per backend -> its tables, chains and rules."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Final

from ...safetext import decimal
from ..bounds import plain_words
from .chains import Action, Chain, OpaqueAction, Rule, Table, Verdict
from .conditions import Condition, CtState, Dport, Iface, Opaque, Proto
from .model import PROTOCOL_NUMBERS, FirewallParseError, port_spec

# Entry points a packet for the host crosses, in hook order (nat is left out: it rewrites).
_IPTABLES_ENTRIES: Final = (
    ("raw", "PREROUTING", "prerouting", -300),
    ("mangle", "PREROUTING", "prerouting", -150),
    ("mangle", "INPUT", "input", -150),
    ("filter", "INPUT", "input", 0),
    ("security", "INPUT", "input", 50),
)
# Targets that log or tag and let the packet go on to the next rule.
_IPTABLES_PASS_TARGETS: Final = frozenset({
    "LOG", "NFLOG", "ULOG", "MARK", "CONNMARK", "CT", "NOTRACK", "TRACE", "AUDIT", "SET",
    "CLASSIFY", "DSCP", "TOS", "TCPMSS", "TTL", "HL", "CHECKSUM", "CONNSECMARK", "SECMARK",
})
_IPTABLES_MODULES: Final = frozenset({"tcp", "udp", "multiport", "conntrack", "state", "comment"})
_IPTABLES_ARITY: Final[Mapping[str, int]] = MappingProxyType(
    {"--tcp-flags": 2, "--syn": 0, "-f": 0}
)


def _ipt_option(option: str, args: Sequence[str], negate: bool) -> Condition | None:
    """The condition an iptables match option adds; None for options that only load modules."""
    value = args[0] if args else ""
    if option in ("-p", "--protocol"):
        number = decimal(value)
        if value.isdigit() and number is None:  # "²", or more digits than any protocol
            raise FirewallParseError(f"iptables-save: unexpected protocol {value!r:.40}")
        name = PROTOCOL_NUMBERS.get(number, value) if number is not None else value.lower()
        return None if name in ("all", "0") and not negate else Proto(frozenset({name}), negate)
    if option in ("-i", "--in-interface"):
        return Iface(frozenset({value}), negate)
    if option in ("--dport", "--destination-port"):
        return Dport((port_spec(value, ":"),), negate)
    if option in ("--dports", "--destination-ports"):
        return Dport(tuple(port_spec(part, ":") for part in value.split(",")), negate)
    if option in ("--ctstate", "--state"):
        return CtState(frozenset(value.lower().split(",")), negate)
    if option == "-m":
        return None if value in _IPTABLES_MODULES else Opaque(f"-m {value}")
    if option == "--comment":
        return None
    # -s, -d, --sport, addrtype, set, mark, limit, recent...
    return Opaque(option, peer=option in ("-s", "--source", "--src-range"))


def _ipt_arity(tokens: Sequence[str], start: int) -> int:
    """How many arguments the option at `start` takes: by a table where known, else the
    words up to the next option. Counted in place: a copy of the rest of the line per
    option made a line of many options quadratic."""
    option = tokens[start]
    arity = _IPTABLES_ARITY.get(option)
    if arity is not None:
        return min(arity, len(tokens) - start - 1)
    if len(option) == 2:
        return min(1, len(tokens) - start - 1)  # -s, -m, -j...: one argument, even "-..."
    end = start + 1
    while end < len(tokens) and not tokens[end].startswith(("-", "!")):
        end += 1
    return end - start - 1


def _ipt_action(target: str, chains: Iterable[str], goto: bool) -> Action:
    if target in ("ACCEPT", "DROP", "REJECT", "RETURN"):
        return Verdict(target.lower())
    if target in chains:
        return Verdict("goto" if goto else "jump", target)
    if target in _IPTABLES_PASS_TARGETS:
        return None
    return OpaqueAction(target)  # QUEUE, NFQUEUE, extension targets: cannot tell


# No rule iptables-save prints comes near this: the kernel keeps a rule in under 64 KiB
# (xt_entry's u16 offsets) and its longest printed parts (a comment: 256 bytes, bpf: 64
# instructions) are short. A longer line is refused before shlex, which is linear but
# reads a character at a time.
MAX_RULE_LINE: Final = 64 * 1024


def _ipt_tokens(line: str) -> list[str]:
    if len(line) > MAX_RULE_LINE:
        raise FirewallParseError(f"iptables-save: a rule line of {len(line)} characters "
                                 f"(more than {MAX_RULE_LINE}): {line!r:.80}")
    words = plain_words(line)  # what iptables-save quotes (comments) needs shlex
    if words is not None:
        return words
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise FirewallParseError(f"iptables-save: cannot split {line!r:.80}: {exc}") from None


def _ipt_rule(line: str, chains: Iterable[str]) -> tuple[str, Rule]:
    tokens = _ipt_tokens(line)
    if len(tokens) < 2:
        raise FirewallParseError(f"iptables-save: rule without a chain: {line!r:.80}")
    conditions: list[Condition] = []
    action: Action = None
    negate = False
    index = 2
    while index < len(tokens):
        option = tokens[index]
        if option == "!":
            negate, index = True, index + 1
            continue
        arity = _ipt_arity(tokens, index)
        args = tokens[index + 1:index + 1 + arity]
        if option in ("-j", "--jump", "-g", "--goto"):
            # The target comes last in iptables-save; what follows are the target's options.
            action = _ipt_action(args[0] if args else "", chains, option in ("-g", "--goto"))
            break
        condition = _ipt_option(option, args, negate)
        if condition is not None:
            conditions.append(condition)
        negate, index = False, index + 1 + arity
    return tokens[1], Rule(tuple(conditions), action, line)


def _ipt_backend(line: str) -> str:
    return "nf_tables" if "(nf_tables)" in line else "legacy"


def parse_iptables_save(text: str) -> tuple[Table, ...]:
    """Every table of every dump; a dump's header line tells which backend it came from."""
    tables: list[Table] = []
    backend = "legacy"
    name: str | None = None
    policies: dict[str, str] = {}
    rule_lines: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("# Generated by"):
            backend = _ipt_backend(line)
        elif not line or line.startswith("#"):
            continue
        elif line.startswith("*") and name is None:
            name, policies, rule_lines = line[1:], {}, []
        elif line.startswith(":") and name is not None:
            words = line[1:].split()
            if not words:  # ":" alone: a chain with no name is no iptables-save output
                raise FirewallParseError(f"iptables-save line {number}: a chain without a "
                                         "name")
            chain, policy = [*words, "-"][:2]
            policies[chain] = "" if policy == "-" else policy
        elif line.startswith("-A ") and name is not None:
            rule_lines.append(line)
        elif line == "COMMIT" and name is not None:
            tables.append(_ipt_table(name, backend, policies, rule_lines))
            name = None
        else:
            raise FirewallParseError(f"iptables-save line {number}: unexpected {line!r:.80}")
    if name is not None:
        raise FirewallParseError(f"iptables-save: table {name} has no COMMIT line")
    return tuple(tables)


def _ipt_table(
    name: str, backend: str, policies: Mapping[str, str], lines: Sequence[str]
) -> Table:
    rules: dict[str, list[Rule]] = {chain: [] for chain in policies}
    for line in lines:
        chain, rule = _ipt_rule(line, policies)
        rules.setdefault(chain, []).append(rule)
    hooks = {chain: (hook, prio) for table, chain, hook, prio in _IPTABLES_ENTRIES if table == name}
    chains = []
    for chain, chain_rules in rules.items():
        hook, priority = hooks.get(chain, (None, 0))
        chains.append(Chain(chain, tuple(chain_rules), hook, priority, policies.get(chain, "")))
    return Table("iptables", "ip", name, tuple(chains), backend=backend)


def split_iptables_nft(
    nft: tuple[Table, ...], iptables: tuple[Table, ...]
) -> tuple[tuple[Table, ...], tuple[Table, ...]]:
    """Judge each iptables-nft table once: it is both an nft `ip` table and an iptables dump.

    `nft -j` shows iptables-nft's multiport/conntrack/... matches as opaque "xt" expressions,
    so a table holding any is judged from the iptables-save text; otherwise the nft view is
    exact and kept (iptables-save can misprint native nft rules it does not know).
    """
    dumped = {t.name for t in iptables if t.backend == "nf_tables"}
    shared = {t.name: t for t in nft if t.family == "ip" and t.name in dumped}
    drop_nft = {name for name, table in shared.items() if table.uses_xt}
    drop_ipt = set(shared) - drop_nft
    kept_nft = tuple(t for t in nft if not (t.family == "ip" and t.name in drop_nft))
    kept_ipt = tuple(t for t in iptables if not (t.backend == "nf_tables" and t.name in drop_ipt))
    return kept_nft, kept_ipt
