"""Where each of the engine's settings comes from, the way rke2 and k3s decide it.

k3s turns its config files into command-line flags placed *before* the unit's own flags
(k3s pkg/configfilearg/parser.go, Parser.Parse), so a flag in the unit's ExecStart wins
over the files for a single-valued setting and adds to them for a list one; a flag with an
environment variable (K3S_NODE_NAME, RKE2_NODE_NAME, rke2's RKE2_AUDIT_POLICY_FILE: k3s
pkg/cli/cmds, rke2 pkg/cli/cmds/root.go) takes it only when no flag set it (urfave/cli).
rke2 runs the same parser over its copy of k3s's flags.

This module holds that precedence and where each value came from (file:line, the unit's
command line, an environment file), for messages; values never leave it but for the
settings cargoship derives something from.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from .bounds import plain_words

# String-slice flags (every value kept); the rest are single-valued (the last one wins).
SLICE_FLAGS = frozenset({
    "kube-apiserver-arg", "kube-controller-manager-arg", "kube-scheduler-arg", "kubelet-arg",
    "kube-proxy-arg", "etcd-arg", "node-label", "node-taint", "tls-san", "node-ip",
    "node-external-ip", "disable"})
APISERVER_ARG = "kube-apiserver-arg"


def env_flags(distro: str) -> dict[str, str]:
    """flag -> the environment variable the engine falls back to for it."""
    program = distro.upper()
    flags = {"node-name": f"{program}_NODE_NAME"}
    if distro == "rke2":
        flags["audit-policy-file"] = "RKE2_AUDIT_POLICY_FILE"
        flags["pod-security-admission-config-file"] = "RKE2_POD_SECURITY_ADMISSION_CONFIG_FILE"
    return flags


def env_files(distro: str, service: str) -> tuple[str, ...]:
    """The unit's EnvironmentFile= paths, in order: k3s's install.sh writes /etc/default/%N,
    /etc/sysconfig/%N and /etc/systemd/system/<unit>.env; rke2's units (bundle/lib/systemd/
    system/rke2-server.service) /etc/default/%N, /etc/sysconfig/%N and
    /usr/local/lib/systemd/system/%N.env."""
    last = (f"/etc/systemd/system/{service}.service.env" if distro == "k3s"
            else f"/usr/local/lib/systemd/system/{service}.env")
    return (f"/etc/default/{service}", f"/etc/sysconfig/{service}", last)


def parse_env_file(path: str, text: str) -> dict[str, tuple[str, str]]:
    """systemd's EnvironmentFile= syntax (systemd.exec(5)): KEY=VALUE lines, `#` and `;`
    comments, a value in single or double quotes. name -> (value, "path:line")."""
    found: dict[str, tuple[str, str]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        name, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        found[name.strip()] = (value, f"{path}:{number}")
    return found


def command_flags(line: str) -> list[str]:
    """The flags after the subcommand (`server`, `agent`) on the unit's command line."""
    words = plain_words(line)
    if words is None:
        try:
            words = shlex.split(line, comments=False)
        except ValueError:
            words = line.split()
    for i, word in enumerate(words):
        if word in ("server", "agent"):
            return [w for w in words[i + 1:] if not w.startswith(("2>", ">", "<", "&"))]
    return []


def parse_flags(flags: list[str]) -> list[tuple[str, str]]:
    """(name, value) of each `--name=value`, `--name value` or bare `--name` (true)."""
    parsed = []
    skip = False
    for i, arg in enumerate(flags):
        if skip:
            skip = False
            continue
        if not arg.startswith("-"):
            continue
        name, has_value, value = arg.lstrip("-").partition("=")
        if not has_value:
            following = flags[i + 1] if i + 1 < len(flags) else ""
            if following and not following.startswith("-"):
                value, skip = following, True
            else:
                value = "true"
        parsed.append((name, value))
    return parsed


def item_lines(node: yaml.Node | None) -> dict[str, tuple[int, list[int]]]:
    """Top-level key -> (its line, the line of each item of its list value), 1-based, from
    the node graph the file's settings were built from."""
    lines: dict[str, tuple[int, list[int]]] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            items = [v.start_mark.line + 1 for v in value.value] \
                if isinstance(value, yaml.SequenceNode) else [value.start_mark.line + 1]
            lines[str(key.value)] = (key.start_mark.line + 1, items)
    return lines


@dataclass(frozen=True)
class Sourced:
    """A setting's effective value with where it came from."""

    value: Any
    where: str


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def effective(layers: list[tuple[str, dict[str, Any], yaml.Node | None]], flags: list[str],
              flags_from: str,
              env: dict[str, tuple[str, str]], distro: str
              ) -> tuple[dict[str, Sourced], list[Sourced], list[tuple[str, Any, str]]]:
    """Every setting as the engine ends up with it, each kube-apiserver-arg item in the
    engine's order, and every place a setting is given at all (key, value, where): files,
    the command line, the environment. `layers`: (path, settings, its YAML node graph)."""
    settings: dict[str, Sourced] = {}
    apiserver: list[Sourced] = []
    seen: list[tuple[str, Any, str]] = []
    for path, data, node in layers:
        lines = item_lines(node)
        for raw_key, value in data.items():
            key = str(raw_key)
            base = key.removesuffix("+")
            line, item_at = lines.get(key, (0, []))
            where = f"{path}:{line}" if line else path
            seen.append((key, value, where))
            if key.endswith("+") and base in settings:
                settings[base] = Sourced(_as_list(settings[base].value) + _as_list(value), where)
            else:
                settings[base] = Sourced(value, where)
            if base == APISERVER_ARG:
                items = [Sourced(str(v), f"{path}:{item_at[i]}" if i < len(item_at) else where)
                         for i, v in enumerate(_as_list(value))]
                apiserver = apiserver + items if key.endswith("+") else items
    for name, value in parse_flags(flags):
        seen.append((name, value, flags_from))
        if name in SLICE_FLAGS:
            before = _as_list(settings[name].value) if name in settings else []
            settings[name] = Sourced([*before, value], flags_from)
        else:
            settings[name] = Sourced(value, flags_from)
        if name == APISERVER_ARG:
            apiserver.append(Sourced(value, flags_from))
    for flag, variable in env_flags(distro).items():
        if env.get(variable, ("", ""))[0]:
            value, where = env[variable]
            seen.append((flag, value, f"{where} ({variable})"))
            if flag not in settings:
                settings[flag] = Sourced(value, f"{where} ({variable})")
    return settings, apiserver, seen
