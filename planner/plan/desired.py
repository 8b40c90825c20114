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
from ..config.secret_paths import ALLOW_KEY, advice, refusal
from ..config.secrets import Secret, SecretError, resolve
from ..errors import CargoshipError

# In a digested secret: its config said allowAnyPath (secret_paths), so apply reads the file
# wherever it is. Absent otherwise.
ALLOW = "allow_any_path"


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
    engine_config = _resolve_secrets(desired["engineConfig"], salt, _key_files(hosts)) \
        if secrets else copy.deepcopy(desired["engineConfig"])
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
        digested = {"secret": value.source, "digest": value.salted_digest(salt)}
        # Only when set: every other plan stays as before, readable by any 2.x cargoship.
        return {**digested, ALLOW: True} if value.allow_any_path else digested
    if isinstance(value, dict):
        return {k: _digest_secrets(v, salt) for k, v in value.items()}
    if isinstance(value, list):
        return [_digest_secrets(v, salt) for v in value]
    return value


def secret_slots(engine_config: dict[str, Any]) -> list[tuple[dict[str, Any], str,
                                                               tuple[str, ...]]]:
    """(mapping, key, keys inside engineConfig) of every place a secret may sit: registry
    auth fields, exactly as the config loader picks them. A secret-shaped value anywhere
    else is data."""
    slots: list[tuple[dict[str, Any], str, tuple[str, ...]]] = []
    registries = engine_config.get("registries")
    configs = registries.get("configs") if isinstance(registries, dict) else None
    if not isinstance(configs, dict):
        return slots
    for registry, settings in configs.items():
        auth = settings.get("auth") if isinstance(settings, dict) else None
        if isinstance(auth, dict):
            slots += [(auth, name, ("registries", "configs", registry, "auth", name))
                      for name in auth]
    return slots


def _where(keys: tuple[str, ...]) -> str:
    return ".".join(("engineConfig", *keys))


def is_digested(value: Any) -> bool:
    """A secret as a plan carries it: its source and salted digest (and, only when its
    config allowed any path, `allow_any_path: true`)."""
    if not isinstance(value, dict) or set(value) - {ALLOW} != {"secret", "digest"}:
        return False
    return all(isinstance(value[k], str) for k in ("secret", "digest")) and \
        value.get(ALLOW, True) is True


def config_form(engine_config: dict[str, Any]) -> dict[str, Any]:
    """engineConfig as the config file said it, each digested secret back to its source, so
    a plan's engineConfig is checked by the very schema that checked the config."""
    copied: dict[str, Any] = copy.deepcopy(engine_config)
    for parent, key, _ in secret_slots(copied):
        value = parent[key]
        if is_digested(value):
            parent[key] = _spec(value)
    return copied


def _spec(value: dict[str, Any]) -> Any:
    """A digested secret as the config wrote it. An unknown source, or allow_any_path
    on anything but a file, fails the config's schema, as it should."""
    kind, _, name = value["secret"].partition(":")
    sources: dict[str, Any] = {"env": {"fromEnv": name}, "file": {"fromFile": name},
                               "inline": "x"}
    spec = sources.get(kind, value)
    if value.get(ALLOW) is True and isinstance(spec, dict) and spec is not value:
        spec = {**spec, ALLOW_KEY: True}
    return spec


def _key_files(hosts: tuple[HostConfig, ...]) -> dict[Path, str]:
    """The SSH keys the plan's hosts are reached with: never a secret, unless allowed."""
    named: dict[Path, str] = {}
    for host in hosts:
        bastion = host.ssh.bastion
        for path in (host.ssh.key_path, bastion.key_path if bastion else None):
            if path is not None:
                named.setdefault(path, f"SSH key of host {host.ssh.endpoint}")
    return named


def _resolve_secrets(engine_config: dict[str, Any], salt: bytes,
                     key_files: dict[Path, str]) -> dict[str, Any]:
    resolved: dict[str, Any] = copy.deepcopy(engine_config)
    for parent, key, keys in secret_slots(resolved):
        if is_digested(parent[key]):
            parent[key] = _resolve_one(parent[key], salt, _where(keys), key_files)
    return resolved


def stand_in_secrets(engine_config: dict[str, Any]) -> dict[str, Any]:
    resolved: dict[str, Any] = copy.deepcopy(engine_config)
    for parent, key, _ in secret_slots(resolved):
        if is_digested(parent[key]):
            # Its "value" is the digest: never revealed, only masked (planner.desired.compare).
            parent[key] = Secret(parent[key]["secret"], parent[key]["digest"])
    return resolved


def _resolve_one(value: dict[str, Any], salt: bytes, path: str,
                 key_files: dict[Path, str]) -> Secret:
    source = value["secret"]
    kind, _, name = source.partition(":")
    if kind not in ("env", "file"):
        raise DesiredStateError(f"{path}: the secret was given inline in the config, so "
                                "the plan cannot carry it; use fromEnv or fromFile")
    spec = _spec(value)
    if kind == "file" and value.get(ALLOW) is not True:
        # The config loader refused this already; a plan edited since is held to it too
        # (the config's directory is not known here: that rule stays the loader's).
        why = refusal(Path(name), config_dir=None, named=key_files)
        if why:
            raise DesiredStateError(f"{path}: secret file {name} {why}: {advice()}")
    try:
        secret = resolve(spec, Path("/"))
    except SecretError as exc:
        raise DesiredStateError(f"{path}: {exc}") from None
    if secret.salted_digest(salt) != value["digest"]:
        raise DesiredStateError(f"{path}: the secret from {source} changed since the plan "
                                "was made; re-plan")
    return secret
