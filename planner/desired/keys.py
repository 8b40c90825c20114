"""What changed in a YAML file, by key path, the way Terraform lists attributes.

Computed with deepdiff from the two sides *as the diff shows them* (secrets already
masked), so a key summary can never say more about a secret than the diff does: a changed
secret reads `"***" -> "*** (changed)"`. Mappings compare by key, so key order and
formatting never count; lists keep their order, as they do for the engines.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..plan.model import KeyChange

_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_ADDED = ("dictionary_item_added", "iterable_item_added", "attribute_added", "set_item_added")
_REMOVED = ("dictionary_item_removed", "iterable_item_removed", "attribute_removed",
            "set_item_removed")

Path = tuple[Any, ...]


def key_changes(before: Any, after: Any) -> tuple[KeyChange, ...]:
    """Every leaf that differs between `before` and `after` (None: the file is absent or
    was not shown), sorted by path. A subtree added or removed is listed leaf by leaf."""
    found: dict[Path, KeyChange] = {}
    # deepdiff costs ~45 ms to import: only once there are values to compare.
    from deepdiff import DeepDiff

    for kind, nodes in DeepDiff(before, after, view="tree").items():
        for node in nodes:
            path = tuple(node.path(output_format="list"))
            if kind in _ADDED:
                _leaves(found, path, node.t2, "add")
            elif kind in _REMOVED:
                _leaves(found, path, node.t1, "remove")
            elif _is_container(node.t1) or _is_container(node.t2) or not path:
                # A scalar became a mapping (or the other way), or a whole document appeared:
                # what went and what came, leaf by leaf.
                _leaves(found, path, node.t1, "remove", skip_none=not path)
                _leaves(found, path, node.t2, "add", skip_none=not path)
            else:
                found[path] = KeyChange("change", format_path(path), _value(node.t1),
                                        _value(node.t2))
    return tuple(found[p] for p in sorted(found, key=_sort_key))


def leaves(data: Any) -> dict[str, str]:
    """Every leaf of `data` by its formatted path, with its value as key changes show it."""
    found: dict[Path, KeyChange] = {}
    _leaves(found, (), data, "add")
    return {change.path: change.after or "" for change in found.values()}


def format_path(path: Path) -> str:
    """`mirrors."docker.io".endpoint[0]`: bare names where they read unambiguously."""
    text = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif isinstance(part, str) and _BARE_KEY.fullmatch(part):
            text += f".{part}" if text else part
        elif isinstance(part, str):
            quoted = json.dumps(part, ensure_ascii=False)
            text += f".{quoted}" if text else quoted
        else:  # a YAML mapping key that is not a string (1, true, null)
            text += f"[{_value(part)}]"
    return text or "(document)"


def _leaves(found: dict[Path, KeyChange], path: Path, value: Any, op: str,
            skip_none: bool = False) -> None:
    if skip_none and value is None:
        return
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _leaves(found, (*path, key), item, op)
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            _leaves(found, (*path, index), item, op)
    elif op == "add":
        earlier = found.get(path)
        if earlier is not None and earlier.op == "remove":  # same leaf, both sides
            found[path] = KeyChange("change", earlier.path, earlier.before, _value(value))
        else:
            found[path] = KeyChange("add", format_path(path), None, _value(value))
    else:
        found[path] = KeyChange("remove", format_path(path), _value(value), None)


def _is_container(value: Any) -> bool:
    return isinstance(value, dict | list)


def _value(value: Any) -> str:
    # JSON text; YAML can also hold dates and the like, shown as their string.
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _sort_key(path: Path) -> tuple[tuple[int, Any], ...]:
    return tuple((0, p) if isinstance(p, int) and not isinstance(p, bool) else (1, str(p))
                 for p in path)
