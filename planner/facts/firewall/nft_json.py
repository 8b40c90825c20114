"""The shapes of `nft -j` JSON: objects, strings and one-key expressions."""

from __future__ import annotations

from .model import FirewallParseError


def as_object(value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise FirewallParseError(f"nft -j: expected an object for {what}, got {value!r:.60}")
    return {str(key): item for key, item in value.items()}


def as_string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise FirewallParseError(f"nft -j: expected a string for {what}, got {value!r:.60}")
    return value


def single(expr: object) -> tuple[str, object] | None:
    """nft JSON expressions are one-key objects: {"match": {...}}, {"accept": null}..."""
    if isinstance(expr, dict) and len(expr) == 1:
        ((key, body),) = expr.items()
        return str(key), body
    return None
