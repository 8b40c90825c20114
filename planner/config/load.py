"""Read, validate and resolve a cluster config file, reporting every problem at once.

Nothing connects to a host before this has passed: a config with any problem raises
ConfigError holding one Problem per mistake (file:line, path inside the file, expectation).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import schemas

from ..errors import ConfigError, Problem
from .model import Bastion, ClusterConfig, Engine, HostConfig, Options, SshConfig
from .quick_schema import surely_valid
from .secret_paths import ALLOW_KEY, advice, refusal
from .secrets import SecretError, resolve, unresolved
from .yamlio import Path_, YamlDoc, YamlSyntaxError, format_path, load_yaml

_MAX_CONFIG_BYTES = 4 << 20
_SECRET_FIELDS = ("username", "password", "auth", "identity_token")


def load_config(path: Path, *, secrets: bool = True, keys: bool = True) -> ClusterConfig:
    """`secrets=False`: leave every secret unresolved (an Unresolved placeholder that can
    never be written anywhere): commands that send no config to a host need no environment
    variable or secret file. `keys=False`: do not look at the SSH key files either (offline
    commands)."""
    raw = _read(path)
    doc = _parse(path, raw)
    problems = _schema_problems(path, doc)
    if problems:
        # Every mistake in one run: the checks a schema can't express too, as far as the
        # file's shape lets them run (they assume it; where it is too broken, they wait).
        try:
            more = _semantic_problems(path, doc, keys)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError):
            more = []
        seen = {(p.where, p.path) for p in problems}
        problems += [p for p in more if (p.where, p.path) not in seen]
        raise ConfigError(sorted(problems, key=_problem_order))
    problems = _semantic_problems(path, doc, keys)
    config, secret_problems = _build(path, doc, hashlib.sha256(raw).hexdigest(), secrets)
    problems += secret_problems
    if problems:
        raise ConfigError(sorted(problems, key=_problem_order))
    return config


def _problem_order(problem: Problem) -> tuple[int, str]:
    match = re.search(r":(\d+)$", problem.where)
    return (int(match.group(1)) if match else 0, problem.path)


def _read(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            raw = fh.read(_MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot read config: {exc.strerror}")]) from None
    if len(raw) > _MAX_CONFIG_BYTES:
        raise ConfigError([Problem(str(path), "config file is larger than 4 MiB")])
    return raw


def _parse(path: Path, raw: bytes) -> YamlDoc:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(str(path), f"not UTF-8 text (byte {exc.start})")]) from None
    try:
        doc = load_yaml(text)
    except YamlSyntaxError as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        raise ConfigError([Problem(where, str(exc))]) from None
    if not isinstance(doc.data, dict):
        raise ConfigError([Problem(str(path), "expected a mapping with apiVersion, kind, "
                                              "metadata and spec at the top level")])
    return doc


def _where(path: Path, doc: YamlDoc, at: Path_) -> str:
    line = doc.line_of(at)
    return f"{path}:{line}" if line else str(path)


def _schema_problems(path: Path, doc: YamlDoc) -> list[Problem]:
    problems = [
        Problem(f"{path}:{line}", "duplicate key", format_path(at)) for at, line in doc.duplicates
    ]
    schema = schemas.load(schemas.CLUSTER_SCHEMA)
    if surely_valid(schema, doc.data):
        return problems
    # jsonschema (~110 ms to import) says what is wrong, and is the judge when the quick
    # check is not sure: the errors reported are always jsonschema's.
    import jsonschema

    from .schema_errors import describe_errors

    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    for at, message in describe_errors(validator, doc.data):
        problems.append(Problem(_where(path, doc, at), message, format_path(at) or "(top)"))
    return problems


def _semantic_problems(path: Path, doc: YamlDoc, keys: bool = True) -> list[Problem]:
    """Checks a schema can't express: uniqueness, references, consistency."""
    spec: dict[str, Any] = doc.data["spec"]
    hosts: list[dict[str, Any]] = spec["hosts"]
    profiles: dict[str, Any] = spec.get("profiles", {})
    problems: list[Problem] = []

    def add(at: Path_, message: str) -> None:
        problems.append(Problem(_where(path, doc, at), message, format_path(at)))

    distro, version = spec["engine"]["distro"], spec["engine"]["version"]
    if f"+{distro}" not in version:
        add(("spec", "engine", "version"), f"version {version!r} is not a {distro} release "
                                           f"(expected a '+{distro}' suffix)")
    if not any(h["role"] == "controller" for h in hosts):
        add(("spec", "hosts"), "expected at least one host with role: controller")

    for key, what in ((("ssh", "address"), "SSH endpoint"), (("hostname",), "hostname"),
                      (("privateAddress",), "private address")):
        seen: dict[str, int] = {}
        for index, host in enumerate(hosts):
            value = _dig(host, key)
            if value is None:
                continue
            if key[-1] == "address":
                value = f"{value}:{host['ssh'].get('port', 22)}"
            ident = str(value).lower()
            if ident in seen:
                add(("spec", "hosts", index, *key),
                    f"duplicate {what} {value} (also spec.hosts[{seen[ident]}])")
            else:
                seen[ident] = index

    for index, host in enumerate(hosts):
        profile = host.get("profile")
        if profile is not None and profile not in profiles:
            defined = ", ".join(sorted(profiles)) or "none"
            add(("spec", "hosts", index, "profile"),
                f"profile {profile!r} is not defined in spec.profiles (defined: {defined})")
        key_path = _dig(host, ("ssh", "keyPath"))
        if keys and key_path is not None and not _readable(path, key_path):
            add(("spec", "hosts", index, "ssh", "keyPath"), f"key file {key_path} is not readable")
    return problems


def _dig(data: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _local_path(config_path: Path, value: str) -> Path:
    expanded = Path(os.path.expanduser(value))
    return expanded if expanded.is_absolute() else config_path.parent / expanded


def _readable(config_path: Path, value: str) -> bool:
    return os.access(_local_path(config_path, value), os.R_OK)


def _build(path: Path, doc: YamlDoc, digest: str,
           secrets: bool = True) -> tuple[ClusterConfig, list[Problem]]:
    spec: dict[str, Any] = doc.data["spec"]
    profiles: dict[str, dict[str, Any]] = spec.get("profiles", {})
    hosts = tuple(_host(path, i, h, profiles) for i, h in enumerate(spec["hosts"]))
    engine_config, problems = _resolve_secrets(path, doc, spec.get("engineConfig", {}),
                                               secrets, _named_files(path, spec))
    config = ClusterConfig(
        path=path,
        name=doc.data["metadata"]["name"],
        engine=Engine(distro=spec["engine"]["distro"], version=spec["engine"]["version"]),
        hosts=hosts,
        profiles=profiles,
        engine_config=engine_config,
        options=_options(path, spec.get("options", {})),
        digest=digest,
    )
    return config, problems


def _host(path: Path, index: int, raw: dict[str, Any], profiles: dict[str, Any]) -> HostConfig:
    profile = profiles.get(raw.get("profile", ""), {}) if raw.get("profile") else {}
    # A profile's ssh settings are defaults; the host's own settings win.
    ssh = {**profile.get("ssh", {}), **raw["ssh"]}
    bastion = ssh.get("bastion")
    return HostConfig(
        index=index,
        role=raw["role"],
        profile=raw.get("profile"),
        hostname=raw.get("hostname"),
        private_interface=raw.get("privateInterface", profile.get("privateInterface")),
        private_address=raw.get("privateAddress"),
        ssh=SshConfig(
            address=ssh["address"],
            port=ssh.get("port"),
            user=ssh.get("user"),
            key_path=_local_path(path, ssh["keyPath"]) if "keyPath" in ssh else None,
            known_hosts=_local_path(path, ssh["knownHosts"]) if "knownHosts" in ssh else None,
            bastion=Bastion(
                address=bastion["address"],
                port=bastion.get("port", 22),
                user=bastion.get("user"),
                key_path=_local_path(path, bastion["keyPath"]) if "keyPath" in bastion else None,
            ) if bastion else None,
        ),
    )


def _options(path: Path, raw: dict[str, Any]) -> Options:
    conc, ssh = raw.get("concurrency", {}), raw.get("ssh", {})
    val, drain, kube = raw.get("validation", {}), raw.get("drain", {}), raw.get("kubeconfig", {})
    defaults = Options()
    return Options(
        host_concurrency=conc.get("hosts", defaults.host_concurrency),
        worker_concurrency=conc.get("workers", defaults.worker_concurrency),
        connect_timeout=float(ssh.get("connectTimeoutSeconds", defaults.connect_timeout)),
        command_timeout=float(ssh.get("commandTimeoutSeconds", defaults.command_timeout)),
        max_clock_skew=float(val.get("maxClockSkewSeconds", defaults.max_clock_skew)),
        check_firewall=val.get("checkFirewall", defaults.check_firewall),
        drain_timeout=drain.get("timeoutSeconds", defaults.drain_timeout),
        drain_grace_period=drain.get("gracePeriodSeconds", defaults.drain_grace_period),
        drain_delete_emptydir_data=drain.get("deleteEmptyDirData", False),
        drain_force=drain.get("force", False),
        drain_registries=drain.get("when", {}).get("registries", defaults.drain_registries),
        drain_control_plane=drain.get("when", {}).get("controlPlane",
                                                      defaults.drain_control_plane),
        ready_timeout=raw.get("readyTimeoutSeconds", defaults.ready_timeout),
        kubeconfig_enabled=kube.get("enabled", False),
        kubeconfig_path=_local_path(path, kube.get("path", "~/.kube/config")),
        kubeconfig_context=kube.get("context"),
        kubeconfig_server=kube.get("server"),
        label_profiles=raw.get("labelProfiles", False),
    )


def _secret_paths(engine_config: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    configs = engine_config.get("registries", {}).get("configs", {})
    for registry, settings in configs.items():
        for name, value in settings.get("auth", {}).items():
            # A username may come from a secret source, but written inline it is not one:
            # it stays plain text (and so can travel in a plan).
            if name in _SECRET_FIELDS and not (name == "username" and isinstance(value, str)):
                yield ("registries", "configs", registry, "auth", name)


def _named_files(path: Path, spec: dict[str, Any]) -> dict[Path, str]:
    """Every file the config names for another use than a secret, with what it is: the SSH
    keys of hosts, bastions and profiles (used or not), and the local kubeconfig."""
    named: dict[Path, str] = {}
    owners = [(("spec", "hosts", i), h) for i, h in enumerate(spec["hosts"])]
    owners += [(("spec", "profiles", n), p) for n, p in spec.get("profiles", {}).items()]
    for at, owner in owners:
        ssh = owner.get("ssh", {})
        for where, value in (((*at, "ssh", "keyPath"), ssh.get("keyPath")),
                             ((*at, "ssh", "bastion", "keyPath"),
                              _dig(ssh, ("bastion", "keyPath")))):
            if isinstance(value, str):
                named.setdefault(_local_path(path, value), f"SSH key of {format_path(where)}")
    kube = _dig(spec, ("options", "kubeconfig", "path"))
    named.setdefault(_local_path(path, kube if isinstance(kube, str) else "~/.kube/config"),
                     "local kubeconfig (spec.options.kubeconfig.path), which holds "
                     "credentials")
    return named


def _path_problem(path: Path, value: Any, named: dict[Path, str]) -> str | None:
    """Why a fromFile secret may not be read where it points (None: it may, or it is no
    fromFile). Asked before the file is read: a refused file is never opened."""
    if not isinstance(value, dict) or "fromFile" not in value or value.get(ALLOW_KEY) is True:
        return None
    where = _local_path(path.absolute(), str(value["fromFile"]))
    why = refusal(where, config_dir=path.absolute().parent, named=named)
    return f"secret file {where} {why}: {advice()}" if why else None


def _resolve_secrets(
    path: Path, doc: YamlDoc, engine_config: dict[str, Any], secrets: bool = True,
    named: dict[Path, str] | None = None,
) -> tuple[dict[str, Any], list[Problem]]:
    """Copy engineConfig with each secret replaced by a masked Secret."""
    resolved: dict[str, Any] = _deep_copy(engine_config)
    problems: list[Problem] = []
    # Absolute: a secret file's path travels in the plan, for apply (run from anywhere) to
    # read and for reviewers to see; `pw` alone would say neither where nor which.
    base = Path(os.path.abspath(path.parent))
    for keys in _secret_paths(engine_config):
        parent = resolved
        for key in keys[:-1]:
            parent = parent[key]
        at: Path_ = ("spec", "engineConfig", *keys)
        refused = _path_problem(path, parent[keys[-1]], named or {})
        if refused:
            problems.append(Problem(_where(path, doc, at), refused, format_path(at)))
            continue
        if not secrets:
            parent[keys[-1]] = unresolved(parent[keys[-1]], base)
            continue
        try:
            parent[keys[-1]] = resolve(parent[keys[-1]], base)
        except SecretError as exc:
            problems.append(Problem(_where(path, doc, at), f"secret: {exc}", format_path(at)))
    return resolved, problems


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
