"""The engine's own configuration as rke2 and k3s read it: the config file (where
`$<PROGRAM>_CONFIG_FILE` or the unit's `--config` puts it, else config.yaml), then every
`<config>.d/*.yaml` and `*.yml` (any case) in name order; a later value of a key replaces
the earlier one, a key written with a `+` suffix (`kube-apiserver-arg+:`) appends to what
earlier files set (k3s pkg/configfilearg/parser.go, readConfigFile and dotDFiles). Then the
unit's own flags and environment files (facts/engine_sources.py).

cargoship reads it (as root, read-only) for what the engine derives from it: the node's
name, the addresses the API certificate covers, where the engine keeps its files, and
whether a setting overrides what cargoship's drop-in sets. Content never leaves this module
and engine_sources.py: only those derived values (and file names and lines) reach a plan
or a message.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..hosts.batch import Fact, FactParseError, Output
from ..hosts.shell import script
from ..safetext import decimal
from ..safeyaml import YamlTooLarge, safe_load_node
from .bounds import check_size
from .distro import DistroLayout
from .engine_sources import Sourced, command_flags, effective, env_files, parse_env_file

MAX_BYTES = 256 * 1024  # per file; an engine config is a few hundred bytes
# The whole listing: config.yaml and its drop-ins, base64 (4/3 of their bytes). A drop-in
# directory of hundreds of files is no engine config; more is refused unread.
MAX_LISTING = 2 << 20
MAX_EXEC = 4096  # the unit's command line


@dataclass(frozen=True)
class Locations:
    """Where the engine reads what cargoship writes: the config drop-in directory
    (`<config file>.d`), the registries file (`private-registry`) and the chart manifests
    (`<data-dir>/server/manifests`)."""

    dropin_dir: str
    registries: str
    manifests_dir: str

    def encode(self) -> str:
        return f"{self.dropin_dir}\n{self.registries}\n{self.manifests_dir}"

    @classmethod
    def decode(cls, text: str) -> Locations:
        dropin_dir, registries, manifests_dir = text.split("\n")
        return cls(dropin_dir, registries, manifests_dir)


def default_locations(layout: DistroLayout) -> Locations:
    return Locations(f"{layout.config_dir}/config.yaml.d", layout.registries_path,
                     layout.manifests_dir)


@dataclass(frozen=True)
class EngineSettings:
    layers: tuple[tuple[str, dict[str, Any]], ...]  # (path, settings) in the engine's order
    problems: tuple[str, ...] = ()  # "path: what is wrong", never the content
    merged: dict[str, Any] = field(default_factory=dict)
    # setting -> where its value came from ("path:line", the unit's command line, an
    # environment file and its variable)
    sources: dict[str, str] = field(default_factory=dict)
    # Every kube-apiserver-arg item, in the engine's order, with where it came from.
    apiserver_args: tuple[Sourced, ...] = ()
    config_path: str = ""  # the config file the engine reads ("": the default's)
    config_from: str | None = None  # what moved it there; None: the default place
    env: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (value, where)
    occurrences: tuple[tuple[str, Any, str], ...] = ()  # every (key, value, where) given

    def data_dir(self, layout: DistroLayout) -> str:
        """The engine's data directory: its manifests, and on a controller its etcd
        member's certificates (server/tls/etcd) and rke2's static pods (agent/)."""
        data_dir = str(self.merged.get("data-dir") or self.merged.get("d") or layout.data_dir)
        return data_dir.rstrip("/") or "/"

    def locations(self, layout: DistroLayout) -> Locations:
        config = self.config_path or f"{layout.config_dir}/config.yaml"
        registries = str(self.merged.get("private-registry") or layout.registries_path)
        return Locations(f"{config}.d", registries, f"{self.data_dir(layout)}/server/manifests")

    def moved(self, layout: DistroLayout) -> list[str]:
        """What the engine reads from somewhere else than its default, and why: for the
        plan to say."""
        said = []
        if self.config_from:
            said.append(f"config file {self.config_path} ({self.config_from})")
        for key in ("node-name", "data-dir", "private-registry"):
            if key in self.sources and self.merged.get(key) not in (None, ""):
                said.append(f"{key} {self.merged[key]} (from {self.sources[key]})")
        return said

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


# Where a running systemd says so (sd_booted()); the init fact (os_release.py) asks the same.
SYSTEMD_RUNNING = "/run/systemd/system"


def engine_config_fact(layout: DistroLayout, role: str = "controller") -> Fact[EngineSettings]:
    service = layout.service(role)
    command = script("planner.facts", ("engine_config.sh",), {
        "PROGRAM": layout.distro.upper(), "SERVICE": service,
        "DEFAULT_CONFIG": f"{layout.config_dir}/config.yaml",
        "ENV_FILES": " ".join(env_files(layout.distro, service)),
        "MAX_BYTES": MAX_BYTES, "MAX_LINE": MAX_EXEC, "SYSTEMD_RUNNING": SYSTEMD_RUNNING})
    distro = layout.distro
    return Fact("engine config", command, lambda out: parse_engine_config(out, distro),
                MAX_LISTING)


def parse_engine_config(out: Output, distro: str = "rke2") -> EngineSettings:
    layers: list[tuple[str, dict[str, Any], yaml.Node | None]] = []
    problems: list[str] = []
    env: dict[str, tuple[str, str]] = {}
    flags: list[str] = []
    flags_from = ""
    config_path = ""
    for line in check_size(out, MAX_LISTING, "the engine config listing").splitlines():
        if line.startswith("exec "):
            _, encoded, flags_from = [*line.split(" ", 2), "", ""][:3]
            flags_from = "" if flags_from == "-" else flags_from
            try:
                flags = command_flags(base64.b64decode(encoded, validate=True).decode())
            except ValueError:
                problems.append(f"{flags_from}: the engine's command line is not UTF-8 text")
            continue
        if line.startswith("config "):
            config_path = line[len("config "):]
            continue
        parts = line.split(" ", 3)
        if len(parts) != 4 or parts[0] not in ("file", "env"):
            raise FactParseError(f"unexpected engine config line {line[:60]!r}")
        kind, size_text, encoded, path = parts
        text = _file_text(size_text, encoded, path, problems)
        if text is None:
            continue
        if kind == "env":
            env.update(parse_env_file(path, text))
            continue
        layer = _settings_layer(path, text, problems)
        if layer is not None:
            layers.append(layer)
    settings, apiserver, seen = effective(layers, flags, flags_from or "the unit's command line",
                                    env, distro)
    program = distro.upper()
    config_from = None
    if env.get(f"{program}_CONFIG_FILE", ("", ""))[0]:
        config_from = f"{program}_CONFIG_FILE in {env[f'{program}_CONFIG_FILE'][1]}"
    elif any(f == "-c" or f.startswith(("--config", "-c=")) for f in flags):
        config_from = f"--config in {flags_from}"
    return EngineSettings(tuple((p, d) for p, d, _ in layers), tuple(problems),
                          {k: v.value for k, v in settings.items()},
                          {k: v.where for k, v in settings.items()}, tuple(apiserver),
                          config_path, config_from, env, tuple(seen))


def _file_text(size_text: str, encoded: str, path: str, problems: list[str]) -> str | None:
    """A listed file's text; None, with a problem said, when it cannot be had."""
    # "-": the whole file came (under MAX_BYTES); -1: `wc -c` failed
    size = 0 if size_text == "-" else decimal(size_text)
    if size is None:
        problems.append(f"{path}: cannot be read")
        return None
    if size > MAX_BYTES:
        problems.append(f"{path}: {size} bytes, more than an engine config holds ({MAX_BYTES})")
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode("utf-8")
    except ValueError:  # not base64 (binascii.Error, or not even ASCII), not UTF-8
        problems.append(f"{path}: not UTF-8 text")
        return None


def _settings_layer(path: str, text: str, problems: list[str],
                    ) -> tuple[str, dict[str, Any], yaml.Node | None] | None:
    """A config file's settings and their node graph (for line numbers); None, with a
    problem said, when the file is no mapping of settings."""
    try:
        data, node = safe_load_node(text)
    except YamlTooLarge as exc:
        problems.append(f"{path}: {exc}")
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problems.append(f"{path}: not valid YAML{where}")
        return None
    except (ValueError, OverflowError, TypeError):
        # PyYAML builds some values with Python's own constructors, which raise these:
        # `2001-13-45` (a timestamp), an int of more than 4300 digits.
        problems.append(f"{path}: not valid YAML (a value that cannot be read)")
        return None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{path}: not a mapping of settings")
        return None
    return path, data, node
