"""An nftables rule's JSON expressions back to `nft list` text, to name the rule in reasons."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .nft_json import as_object, single


def _nft_value_text(value: object, quoted: bool = False) -> str:
    pair = single(value)
    if pair and pair[0] == "set" and isinstance(pair[1], list):
        return "{ " + ", ".join(_nft_value_text(item, quoted) for item in pair[1]) + " }"
    if pair and pair[0] == "range" and isinstance(pair[1], list):
        return "-".join(_nft_value_text(item) for item in pair[1])
    if pair and pair[0] == "prefix":
        prefix = as_object(pair[1], "prefix")
        return f"{prefix.get('addr')}/{prefix.get('len')}"
    if pair and pair[0] == "elem":
        return _nft_value_text(as_object(pair[1], "elem").get("val"), quoted)
    if isinstance(value, list):
        if all(isinstance(item, list) and len(item) == 2 for item in value):  # a vmap's data
            return "{ " + ", ".join(
                f"{_nft_value_text(k)} : {_nft_expr_text(v)}" for k, v in value
            ) + " }"
        return ",".join(_nft_value_text(item, quoted) for item in value)
    if isinstance(value, str):
        return f'"{value}"' if quoted and not value.startswith("@") else value
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _nft_lhs_text(value: object) -> str:
    pair = single(value)
    if pair and isinstance(pair[1], dict):
        spec = pair[1]
        if pair[0] == "payload":
            return f"{spec.get('protocol')} {spec.get('field')}"
        if pair[0] == "meta":
            key = str(spec.get("key"))
            return key if key in ("iif", "iifname", "oif", "oifname") else f"meta {key}"
        if pair[0] in ("ct", "fib"):
            return f"{pair[0]} {spec.get('key') or spec.get('result')}"
    return _nft_value_text(value)


def _nft_expr_text(expr: object) -> str:
    pair = single(expr)
    if pair is None:
        return _nft_value_text(expr)
    key, body = pair
    spec = body if isinstance(body, dict) else {}
    if key == "match":
        op = spec.get("op")
        lhs = _nft_lhs_text(spec.get("left"))
        rhs = _nft_value_text(spec.get("right"), quoted=lhs in ("iifname", "oifname"))
        return f"{lhs} {'' if op in ('==', 'in') else f'{op} '}{rhs}"
    if key in ("jump", "goto"):
        return f"{key} {spec.get('target')}"
    if key == "reject" and spec:
        detail = " ".join(str(spec[part]) for part in ("type", "expr") if part in spec)
        return f"reject with {detail}"
    if key == "vmap":
        data = spec.get("data")
        pairs = data if isinstance(data, str) else (single(data) or ("", data))[1]
        return f"{_nft_lhs_text(spec.get('key'))} vmap {_nft_value_text(pairs)}"
    if key == "xt":
        return f"xt {spec.get('type', '')} {spec.get('name', '')}".strip()
    return "" if key == "counter" else key


def nft_rule_text(exprs: Sequence[object], comment: object) -> str:
    text = " ".join(part for part in map(_nft_expr_text, exprs) if part)
    return f'{text} comment "{comment}"' if isinstance(comment, str) else text
