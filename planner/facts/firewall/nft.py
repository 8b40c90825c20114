"""nftables: `nft -j list ruleset` -> its active tables, chains and rules."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from .chains import Action, Chain, OpaqueAction, Rule, Table
from .conditions import Condition, Opaque
from .model import FirewallParseError
from .nft_exprs import NftScope, nft_match, nft_verdict, nft_vmap, vmap_key_conditions
from .nft_json import as_object, as_string, single
from .nft_text import nft_rule_text

_NFT_IGNORED: Final = frozenset({"counter", "log", "mangle", "notrack"})


def _nft_rule(raw: Mapping[str, object], scope: NftScope) -> tuple[Rule, bool]:
    """The rule, and whether it holds iptables-nft's opaque xt expressions."""
    exprs = raw.get("expr")
    if not isinstance(exprs, list):
        raise FirewallParseError("nft -j: a rule has no expression list")
    conditions: list[Condition] = []
    action: Action = None
    uses_xt = False
    for expr in exprs:
        pair = single(expr)
        key, body = pair if pair else ("?", None)
        uses_xt = uses_xt or key == "xt"
        verdict = nft_verdict(key, body)
        if action is not None or key in _NFT_IGNORED:
            continue  # statements after the verdict never run; counters and logs decide nothing
        if verdict is not None:
            action = verdict
        elif key == "match":
            conditions.extend(nft_match(body, scope))
        elif key == "vmap":
            action = nft_vmap(body, scope)
            conditions.extend(vmap_key_conditions(body))
        elif key == "xt" and isinstance(body, dict) and body.get("type") == "target":
            action = OpaqueAction("xt target")
        elif key in ("queue", "synproxy"):
            action = OpaqueAction(key)
        else:
            conditions.append(Opaque(key))  # limit, fib, quota, xt match...: skip the rule
    return Rule(tuple(conditions), action, nft_rule_text(exprs, raw.get("comment"))), uses_xt


def _nft_objects(text: str) -> list[dict[str, object]]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FirewallParseError(
            f"`nft -j list ruleset` printed invalid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno})"
        ) from None
    except ValueError:  # a number of more than 4300 digits: int() refuses it
        raise FirewallParseError("`nft -j list ruleset` printed a number no ruleset holds") \
            from None
    items = document.get("nftables") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise FirewallParseError('`nft -j list ruleset` printed JSON without an "nftables" list')
    return [as_object(item, "ruleset item") for item in items]


def parse_nft_ruleset(text: str) -> tuple[Table, ...]:
    """Every active table of the ruleset, with its chains and rules in listing order."""
    try:
        return _parse_ruleset(text)
    except RecursionError:
        # json.loads and the walks over expressions recurse once per level of nesting: a
        # listing nested a thousand deep is no ruleset nft prints.
        raise FirewallParseError("`nft -j list ruleset` printed JSON nested too deeply") \
            from None


def _parse_ruleset(text: str) -> tuple[Table, ...]:
    # metainfo, flowtables, stateful objects... hold nothing that filters input traffic.
    objects = [
        (kind, as_object(body, kind))
        for item in _nft_objects(text)
        for kind, body in item.items()
        if kind in ("table", "set", "map", "chain", "rule")
    ]
    tables: dict[tuple[str, str], bool] = {}  # (family, name) -> dormant
    sets: dict[tuple[str, str], dict[str, Sequence[object]]] = {}
    chains: dict[tuple[str, str, str], dict[str, object]] = {}
    rules: dict[tuple[str, str, str], list[Mapping[str, object]]] = {}
    for kind, body in objects:
        family = as_string(body.get("family"), f"{kind} family")
        table = as_string(body.get("table", body.get("name")), f"{kind} table")
        if kind == "table":
            flags = body.get("flags")
            tables[family, table] = isinstance(flags, list) and "dormant" in flags
        elif kind in ("set", "map"):
            elements = body.get("elem")
            named = sets.setdefault((family, table), {})
            elements = elements if isinstance(elements, list) else []
            named[as_string(body.get("name"), "set name")] = elements
        elif kind == "chain":
            chains[family, table, as_string(body.get("name"), "chain name")] = body
        elif kind == "rule":
            key = (family, table, as_string(body.get("chain"), "rule chain"))
            rules.setdefault(key, []).append(body)
    unknown = set(rules) - set(chains)
    if unknown:
        raise FirewallParseError(f"nft -j: rules of undeclared chain {sorted(unknown)[0]}")
    # Chains by table first: looking through every chain for each table was quadratic in a
    # listing of many tables.
    by_table: dict[tuple[str, str], dict[str, Mapping[str, object]]] = {}
    for (family, table, chain_name), spec in chains.items():
        by_table.setdefault((family, table), {})[chain_name] = spec
    return tuple(
        _nft_table(family, name, by_table.get((family, name), {}), rules,
                   NftScope(sets.get((family, name), {})))
        for (family, name), dormant in tables.items()
        if not dormant  # a dormant table is loaded but not evaluated by the kernel
    )


def _nft_table(
    family: str,
    name: str,
    chains: Mapping[str, Mapping[str, object]],
    rules: Mapping[tuple[str, str, str], Sequence[Mapping[str, object]]],
    scope: NftScope,
) -> Table:
    built: list[Chain] = []
    uses_xt = False
    for chain_name, spec in chains.items():
        parsed = [_nft_rule(raw, scope) for raw in rules.get((family, name, chain_name), ())]
        uses_xt = uses_xt or any(xt for _, xt in parsed)
        prio = spec.get("prio", 0)
        is_filter = spec.get("type") == "filter"
        built.append(Chain(
            chain_name,
            tuple(rule for rule, _ in parsed),
            hook=str(spec["hook"]) if is_filter and "hook" in spec else None,
            priority=prio if isinstance(prio, int) else 0,
            policy=str(spec.get("policy", "accept")) if "hook" in spec else "",
        ))
    return Table("nftables", family, name, tuple(built), uses_xt=uses_xt)
