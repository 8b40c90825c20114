"""Turn jsonschema errors into one readable line each: path, what was expected, what was found."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema

from .yamlio import Path_

# Values under these keys are never echoed back: they may be secrets typed in the wrong place.
_SENSITIVE_KEYS = frozenset({"auth", "password", "identity_token", "token", "username"})
_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def describe_errors(
    validator: jsonschema.protocols.Validator, data: Any
) -> Iterator[tuple[Path_, str]]:
    for error in validator.iter_errors(data):
        yield from _describe(error)


def describe_error(error: jsonschema.ValidationError) -> tuple[Path_, str]:
    """One error (say, jsonschema's best match) as the first line `describe_errors` gives."""
    return next(_describe(error), (tuple(error.absolute_path), str(error.message)))


def _describe(error: jsonschema.ValidationError) -> Iterator[tuple[Path_, str]]:
    path: Path_ = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    kind = error.validator
    value = error.instance
    if kind == "additionalProperties" and isinstance(value, dict):
        known = sorted(schema.get("properties", {}))
        for key in sorted(set(value) - set(known)):
            expected = f" (expected one of: {', '.join(known)})" if known else ""
            yield (*path, key), f"unknown key{expected}"
        return
    if kind == "required":
        missing = [k for k in error.validator_value if isinstance(value, dict) and k not in value]
        for key in missing:
            yield path, f"missing required key '{key}'"
        return
    if kind == "propertyNames":
        key = value if isinstance(value, str) else str(value)
        yield path, f"invalid name {_show(key, path)}: expected {_expected(schema, error)}"
        return
    got = "" if _sensitive(path) else f", got {_show(value, path)}"
    yield path, f"expected {_expected(schema, error)}{got}"


def _expected(schema: dict[str, Any], error: jsonschema.ValidationError) -> str:
    kind = error.validator
    limit = error.validator_value
    if kind == "type":
        names = limit if isinstance(limit, list) else [limit]
        return " or ".join(_TYPE_NAMES.get(str(n), str(n)) for n in names)
    if kind == "enum":
        return "one of " + ", ".join(repr(v) for v in limit)
    if kind == "const":
        return repr(limit)
    if kind in ("minimum", "exclusiveMinimum"):
        return f"a value {'>=' if kind == 'minimum' else '>'} {limit}"
    if kind in ("maximum", "exclusiveMaximum"):
        return f"a value {'<=' if kind == 'maximum' else '<'} {limit}"
    if kind in ("minItems", "maxItems"):
        return f"{'at least' if kind == 'minItems' else 'at most'} {limit} item(s)"
    if kind in ("minLength", "maxLength"):
        return f"{'at least' if kind == 'minLength' else 'at most'} {limit} character(s)"
    description = schema.get("description")
    if isinstance(description, str):
        return description
    if kind == "pattern":
        return f"a string matching {limit}"
    return str(error.message)


def _sensitive(path: Path_) -> bool:
    return any(isinstance(p, str) and p in _SENSITIVE_KEYS for p in path)


def _show(value: Any, path: Path_) -> str:
    if _sensitive(path):
        return "(value hidden)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
