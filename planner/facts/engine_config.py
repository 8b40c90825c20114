"""The engine's own configuration as rke2 and k3s read it: `config.yaml`, then every
`config.yaml.d/*.yaml` in name order. A later value of a key replaces the earlier one; a
key written with a `+` suffix (`kube-apiserver-arg+:`) appends to what earlier files set.

cargoship reads it (as root, read-only) for what the engine derives from it: the node's
name, the addresses the API certificate covers, and whether a later file overrides what
cargoship's drop-in sets. Content never leaves this module: only those derived values
(and file names) reach a plan or a message.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..hosts.batch import Fact, FactParseError, Output, quote
from ..safeyaml import YamlTooLarge, safe_load
from .bounds import capped, check_size, decimal
from .distro import DistroLayout

MAX_BYTES = 256 * 1024  # per file; an engine config is a few hundred bytes
# The whole listing: config.yaml and its drop-ins, base64 (4/3 of their bytes). A drop-in
# directory of hundreds of files is no engine config; more is refused unread.
MAX_LISTING = 2 << 20


@dataclass(frozen=True)
class EngineSettings:
    layers: tuple[tuple[str, dict[str, Any]], ...]  # (path, settings) in the engine's order
    problems: tuple[str, ...] = ()  # "path: what is wrong", never the content
    merged: dict[str, Any] = field(default_factory=dict)

    @property
    def with_node_id(self) -> bool:
        return self.merged.get("with-node-id") in (True, "true")

    def node_name(self, hostname: str) -> str | None:
        """The node's name: `node-name`, else the hostname, lowercased either way as the
        engine does (k3s pkg/agent/config/config.go, getHostnameAndIPs); None under
        `with-node-id` (a random suffix only the host's engine knows)."""
        if self.with_node_id:
            return None
        name = self.merged.get("node-name")
        return (str(name) if name not in (None, "") else hostname).lower()

    def list_of(self, key: str) -> list[str]:
        """A list-valued setting: a YAML list or one comma-separated string."""
        value = self.merged.get(key)
        items = value if isinstance(value, list) else str(value or "").split(",")
        return [str(v).strip() for v in items if str(v).strip()]


def merge_layers(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """The engines' merge: later files win; `key+` appends to the earlier `key`."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            key = str(key)
            if key.endswith("+"):
                base = key[:-1]
                merged[base] = _as_list(merged.get(base)) + _as_list(value)
            else:
                merged[key] = value
    return merged


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def engine_config_fact(layout: DistroLayout) -> Fact[EngineSettings]:
    main = f"{layout.config_dir}/config.yaml"
    # One line per file: its size, its content in base64, its path (last: paths may hold
    # spaces). `-f` follows a link as the engine does, but only to a regular file.
    command = (
        f"for f in {quote(main)} {quote(layout.config_dir)}/config.yaml.d/*.yaml; do "
        "[ -f \"$f\" ] || continue; "
        "s=$(wc -c < \"$f\" 2>/dev/null || echo -1); "
        f"echo \"file $s $(head -c {MAX_BYTES} \"$f\" | base64 -w0) $f\"; done; true"
    )
    return Fact("engine config", capped(f"LC_ALL=C; {command}", MAX_LISTING),
                parse_engine_config)


def parse_engine_config(out: Output) -> EngineSettings:
    layers: list[tuple[str, dict[str, Any]]] = []
    problems: list[str] = []
    for line in check_size(out, MAX_LISTING, "the engine config listing").splitlines():
        parts = line.split(" ", 3)
        if len(parts) != 4 or parts[0] != "file":
            raise FactParseError(f"unexpected engine config line {line[:60]!r}")
        _, size_text, encoded, path = parts
        size = decimal(size_text)  # `wc -c` failed: -1
        if size is None:
            problems.append(f"{path}: cannot be read")
            continue
        if size > MAX_BYTES:
            problems.append(f"{path}: {size} bytes, more than an engine config "
                            f"holds ({MAX_BYTES})")
            continue
        try:
            text = base64.b64decode(encoded, validate=True).decode("utf-8")
        except ValueError:  # not base64 (binascii.Error, or not even ASCII), not UTF-8
            problems.append(f"{path}: not UTF-8 text")
            continue
        try:
            data = safe_load(text)
        except YamlTooLarge as exc:
            problems.append(f"{path}: {exc}")
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            problems.append(f"{path}: not valid YAML{where}")
            continue
        except (ValueError, OverflowError, TypeError):
            # PyYAML builds some values with Python's own constructors, which raise these:
            # `2001-13-45` (a timestamp), an int of more than 4300 digits.
            problems.append(f"{path}: not valid YAML (a value that cannot be read)")
            continue
        if data is None:
            data = {}
        if not isinstance(data, dict):
            problems.append(f"{path}: not a mapping of settings")
            continue
        layers.append((path, data))
    return EngineSettings(tuple(layers), tuple(problems),
                          merge_layers([data for _, data in layers]))
