"""A quick "valid" for a config that obeys its schema, without importing jsonschema.

jsonschema costs ~110-190 ms to import, more than everything else a plan imports before it
reaches a host but paramiko. Most configs a plan reads are valid, so this checks the
keywords the cluster schema uses and answers True only when the document surely passes;
on False (invalid, or anything it does not know well enough to be sure of) the caller runs
jsonschema, whose errors are the ones reported. The errors are therefore jsonschema's,
always; only the "no errors" answer can come from here, and it errs towards "not sure".
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

# Keywords that only annotate: they never make a document invalid.
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description",
                          "default", "examples"})
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "null": (type(None),), "integer": (int,), "number": (int, float),
}
_JSON_TYPES = (dict, list, str, bool, int, float, type(None))


class _Unsure(Exception):
    """A keyword, value or type this check does not know well enough to answer for."""


def surely_valid(schema: dict[str, Any], instance: Any) -> bool:
    try:
        return _valid(schema, instance, schema)
    except (_Unsure, RecursionError):
        return False


def _valid(schema: Any, x: Any, root: dict[str, Any]) -> bool:
    if isinstance(schema, bool):  # true: anything; false: nothing
        return schema
    if not isinstance(schema, dict):
        raise _Unsure
    if not isinstance(x, _JSON_TYPES):
        raise _Unsure  # a YAML timestamp, say: leave it to jsonschema
    for key, value in schema.items():
        if key not in _ANNOTATIONS and not _keyword(key, value, schema, x, root):
            return False
    return True


def _is(kind: str, x: Any) -> bool:
    if kind not in _TYPES:
        raise _Unsure
    # bool is an int to Python, never a number to JSON Schema.
    return isinstance(x, _TYPES[kind]) and not (isinstance(x, bool) and kind != "boolean")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _keyword(key: str, value: Any, schema: dict[str, Any], x: Any,
             root: dict[str, Any]) -> bool:
    if key == "type":
        return any(_is(t, x) for t in (value if isinstance(value, list) else [value]))
    if key == "$ref":
        if not isinstance(value, str) or not value.startswith("#/$defs/"):
            raise _Unsure
        return _valid(root["$defs"][value.removeprefix("#/$defs/")], x, root)
    if key == "properties":
        return not isinstance(x, dict) or all(
            _valid(sub, x[name], root) for name, sub in value.items() if name in x)
    if key == "additionalProperties":
        known = schema.get("properties", {})
        if "patternProperties" in schema:
            raise _Unsure
        return not isinstance(x, dict) or all(
            _valid(value, x[name], root) for name in x if name not in known)
    if key == "propertyNames":
        return not isinstance(x, dict) or all(_valid(value, name, root) for name in x)
    if key == "required":
        return not isinstance(x, dict) or all(name in x for name in value)
    if key == "items":
        return not isinstance(x, list) or all(_valid(value, item, root) for item in x)
    if key in ("minItems", "maxItems"):
        return not isinstance(x, list) or (len(x) >= value if key == "minItems"
                                           else len(x) <= value)
    if key in ("minLength", "maxLength"):
        return not isinstance(x, str) or (len(x) >= value if key == "minLength"
                                          else len(x) <= value)
    if key == "pattern":
        return not isinstance(x, str) or re.search(value, x) is not None
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if not _number(x):
            return True
        return bool({"minimum": x >= value, "maximum": x <= value,
                     "exclusiveMinimum": x > value, "exclusiveMaximum": x < value}[key])
    if key == "const":
        return _equal(x, value)
    if key == "enum":
        return any(_equal(x, option) for option in value)
    if key == "anyOf":
        return any(_valid(sub, x, root) for sub in value)
    if key == "allOf":
        return all(_valid(sub, x, root) for sub in value)
    if key == "oneOf":
        return sum(_valid(sub, x, root) for sub in value) == 1
    if key == "format":
        return _format(value, x)
    if key == "if":
        return True  # judged with its then / else
    if key in ("then", "else"):
        if "if" not in schema:
            return True  # without an `if`, JSON Schema ignores them
        return _valid(value, x, root) if _valid(schema["if"], x, root) == (key == "then") \
            else True
    raise _Unsure


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        raise _Unsure
    if type(a) is type(b):
        return bool(a == b)
    if _number(a) and _number(b):
        raise _Unsure  # 1 and 1.0: JSON Schema's equality, not Python's
    return False


def _format(name: str, x: Any) -> bool:
    if not isinstance(x, str):
        return True
    try:
        if name == "ipv4":
            ipaddress.IPv4Address(x)
            return True
        if name == "ipv6":
            return not ipaddress.IPv6Address(x).scope_id
    except ValueError:
        return False
    raise _Unsure
