"""How the stand-in engine reads its configuration, the way rke2 and k3s do.

* `config.yaml`, then every `config.yaml.d/*.yaml` in name order: a later value of a key
  replaces the earlier one; a key written with a `+` suffix (`kube-apiserver-arg+:`)
  appends to the value from earlier files instead (a list; a scalar becomes a one-item
  list).
* The node name: the `node-name` setting, else the hostname in lowercase; `with-node-id`
  adds a dash and a random id kept in the data directory (stable across restarts).
* The API server's own config files (audit policy, admission configuration), which the
  real kube-apiserver refuses to start with when they are invalid.

Runs on the lab host's system Python (python3-yaml); imports nothing from the repository.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from pathlib import Path
from typing import Any

import yaml

AUDIT_LEVELS = ("None", "Metadata", "Request", "RequestResponse")


class ConfigError(Exception):
    """A file the engine (or its API server) cannot start with; the message is one line."""


def load_mapping(path: Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping; missing or empty means no settings."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"failed to read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"failed to parse {path}: {detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"failed to parse {path}: expected a mapping, "
                          f"got {type(data).__name__}")
    return data


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def merge(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """Later layers win; `key+` appends to what earlier layers set for `key`."""
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


def config_files(config_path: Path) -> list[Path]:
    return [config_path, *sorted(config_path.parent.glob("config.yaml.d/*.yaml"))]


def load_config(config_path: Path) -> dict[str, Any]:
    return merge([load_mapping(path) for path in config_files(config_path)])


def node_name(config: dict[str, Any], data_dir: Path) -> str:
    # node-name or the hostname, lowercased either way "to comply with kubernetes
    # constraint" (k3s pkg/agent/config/config.go, getHostnameAndIPs; rke2 runs k3s's).
    name = str(config.get("node-name") or socket.gethostname()).lower()
    if config.get("with-node-id"):
        id_file = data_dir / "lab-node-id"
        if not id_file.exists():
            id_file.write_text(secrets.token_hex(4) + "\n")
        name = f"{name}-{id_file.read_text().strip()}"
    return name


def node_addresses(config: dict[str, Any], name: str) -> list[dict[str, str]]:
    """The node's status.addresses as the kubelet posts them: InternalIP is the engine's
    node-ip when set, else the address of the host's first global interface
    (kubernetes pkg/kubelet/nodestatus/setters.go NodeAddress: the --node-ip, else
    ChooseHostInterface in k8s.io/apimachinery/pkg/util/net/interface.go, the interface
    of the default route), then the Hostname."""
    ips = [str(ip).split(",")[0].strip() for ip in _as_list(config.get("node-ip"))]
    if not ips:
        found = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                               capture_output=True, text=True, check=False).stdout.split()
        ips = [found[found.index("inet") + 1].split("/")[0]] if "inet" in found else []
    return [*({"type": "InternalIP", "address": ip} for ip in ips[:1]),
            {"type": "Hostname", "address": name}]


def node_labels(config: dict[str, Any]) -> dict[str, str]:
    labels = {}
    for item in _as_list(config.get("node-label")):
        key, _, value = str(item).partition("=")
        labels[key] = value
    return labels


def apiserver_files(distro: str, config: dict[str, Any]) -> dict[str, str]:
    """The API server's config files named by the engine config: kind -> path."""
    files: dict[str, str] = {}
    if distro == "rke2":
        if config.get("audit-policy-file"):
            files["audit"] = str(config["audit-policy-file"])
        if config.get("pod-security-admission-config-file"):
            files["admission"] = str(config["pod-security-admission-config-file"])
    for arg in _as_list(config.get("kube-apiserver-arg")):
        flag, _, value = str(arg).lstrip("-").partition("=")
        if flag == "audit-policy-file":
            files["audit"] = value
        elif flag == "admission-control-config-file":
            files["admission"] = value
    return files


def check_apiserver_files(files: dict[str, str]) -> None:
    """What kube-apiserver checks at start-up; ConfigError says what it would log."""
    if "audit" in files:
        path = Path(files["audit"])
        policy = load_mapping(path)
        if policy.get("kind") != "Policy":
            raise ConfigError(f"loading audit policy file: {path}: expected kind Policy, "
                              f"got {policy.get('kind')!r}")
        for i, rule in enumerate(_as_list(policy.get("rules"))):
            level = rule.get("level") if isinstance(rule, dict) else None
            if level not in AUDIT_LEVELS:
                raise ConfigError(f"loading audit policy file: {path}: rules[{i}].level: "
                                  f"Unsupported value: {level!r}: supported values: "
                                  + ", ".join(f'"{v}"' for v in AUDIT_LEVELS))
    if "admission" in files:
        path = Path(files["admission"])
        admission = load_mapping(path)
        if admission.get("kind") != "AdmissionConfiguration":
            raise ConfigError(f"failed to read plugin config: {path}: expected kind "
                              f"AdmissionConfiguration, got {admission.get('kind')!r}")


def process_age() -> float:
    """Seconds since this process started (from /proc, 0 if unreadable): the stand-ins
    count their fixed start-up times from there, so their own Python start-up is inside
    them rather than added."""
    try:
        stat = Path("/proc/self/stat").read_text()
        started = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started)
