"""The desired state a plan carries, so that apply needs the plan and not the config file.

Written into the plan: the engine, every host's connection settings (no secrets in them:
key and known_hosts *paths*), the options, and engineConfig with each secret replaced by
its source and a salted digest. Read back for apply: secrets are resolved again from their
source and must still match the digest the plan was reviewed with.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from ..config.model import Bastion, ClusterConfig, Engine, HostConfig, Options, SshConfig
from ..config.secrets import Secret, SecretError, resolve
from ..errors import CargoshipError


class DesiredStateError(CargoshipError):
    pass


def to_desired(config: ClusterConfig, salt: bytes) -> dict[str, Any]:
    return {
        "cluster": config.name,
        "engine": {"distro": config.engine.distro, "version": config.engine.version},
        "hosts": [_plain(h) for h in config.hosts],
        "engineConfig": _digest_secrets(config.engine_config, salt),
        "options": _plain(config.options),
    }


def inline_secrets(config: ClusterConfig) -> list[str]:
    """Paths of secrets given inline: apply could not get them back from a plan."""
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Secret) and value.source == "inline":
            found.append(path)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))

    walk(config.engine_config, "spec.engineConfig")
    return found


def from_desired(desired: dict[str, Any], salt: bytes, source: str,
                 secrets: bool = True) -> ClusterConfig:
    """The config a plan was made from, secrets resolved again and checked unchanged
    (`secrets=False`: left as digests, for commands that only connect, like force-unlock)."""
    hosts = tuple(_host(h) for h in desired["hosts"])
    options = desired["options"]
    engine_config = _resolve_secrets(desired["engineConfig"], salt) if secrets else \
        copy.deepcopy(desired["engineConfig"])
    return ClusterConfig(
        path=Path(source),
        name=desired["cluster"],
        engine=Engine(desired["engine"]["distro"], desired["engine"]["version"]),
        hosts=hosts,
        engine_config=engine_config,
        options=Options(**{**options, "kubeconfig_path": Path(options["kubeconfig_path"])}),
    )


def _plain(value: Any) -> Any:
    """JSON-ready data: what dataclasses.asdict gives, paths as strings, tuples as lists
    (without asdict's deep copy of every leaf: a plan of hundreds of hosts felt it)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _host(data: dict[str, Any]) -> HostConfig:
    ssh = dict(data["ssh"])
    bastion = ssh.pop("bastion")
    for key in ("key_path", "known_hosts"):
        ssh[key] = Path(ssh[key]) if ssh[key] else None
    if bastion:
        bastion = Bastion(**{**bastion, "key_path": Path(bastion["key_path"])
                             if bastion["key_path"] else None})
    return HostConfig(**{**data, "ssh": SshConfig(**ssh, bastion=bastion)})


def _digest_secrets(value: Any, salt: bytes) -> Any:
    if isinstance(value, Secret):
        return {"secret": value.source, "digest": value.salted_digest(salt)}
    if isinstance(value, dict):
        return {k: _digest_secrets(v, salt) for k, v in value.items()}
    if isinstance(value, list):
        return [_digest_secrets(v, salt) for v in value]
    return value


def _secret_slots(engine_config: dict[str, Any]) -> list[tuple[dict[str, Any], str, str]]:
    """(mapping, key, config path) of every place a secret may sit: registry auth fields,
    exactly as the config loader picks them. A secret-shaped value anywhere else is data."""
    slots: list[tuple[dict[str, Any], str, str]] = []
    registries = engine_config.get("registries")
    configs = registries.get("configs") if isinstance(registries, dict) else None
    if not isinstance(configs, dict):
        return slots
    for registry, settings in configs.items():
        auth = settings.get("auth") if isinstance(settings, dict) else None
        if isinstance(auth, dict):
            slots += [(auth, name, f"engineConfig.registries.configs.{registry}.auth.{name}")
                      for name in auth]
    return slots


def _is_digested(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secret", "digest"} and all(
        isinstance(v, str) for v in value.values())


def config_form(engine_config: dict[str, Any]) -> dict[str, Any]:
    """engineConfig as the config file said it, each digested secret back to its source, so
    a plan's engineConfig is checked by the very schema that checked the config."""
    copied: dict[str, Any] = copy.deepcopy(engine_config)
    for parent, key, _ in _secret_slots(copied):
        value = parent[key]
        if _is_digested(value):
            kind, _, name = value["secret"].partition(":")
            sources = {"env": {"fromEnv": name}, "file": {"fromFile": name}, "inline": "x"}
            parent[key] = sources.get(kind, value)  # an unknown source fails the schema
    return copied


def _resolve_secrets(engine_config: dict[str, Any], salt: bytes) -> dict[str, Any]:
    resolved: dict[str, Any] = copy.deepcopy(engine_config)
    for parent, key, path in _secret_slots(resolved):
        if _is_digested(parent[key]):
            parent[key] = _resolve_one(parent[key], salt, path)
    return resolved


def stand_in_secrets(engine_config: dict[str, Any]) -> dict[str, Any]:
    resolved: dict[str, Any] = copy.deepcopy(engine_config)
    for parent, key, _ in _secret_slots(resolved):
        if _is_digested(parent[key]):
            # Its "value" is the digest: never revealed, only masked (planner.desired.compare).
            parent[key] = Secret(parent[key]["secret"], parent[key]["digest"])
    return resolved


def _resolve_one(value: dict[str, str], salt: bytes, path: str) -> Secret:
    source = value["secret"]
    kind, _, name = source.partition(":")
    if kind == "env":
        spec: Any = {"fromEnv": name}
    elif kind == "file":
        spec = {"fromFile": name}
    else:
        raise DesiredStateError(f"{path}: the secret was given inline in the config, so "
                                "the plan cannot carry it; use fromEnv or fromFile")
    try:
        secret = resolve(spec, Path("/"))
    except SecretError as exc:
        raise DesiredStateError(f"{path}: {exc}") from None
    if secret.salted_digest(salt) != value["digest"]:
        raise DesiredStateError(f"{path}: the secret from {source} changed since the plan "
                                "was made; re-plan")
    return secret
