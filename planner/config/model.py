"""The cluster config as typed, immutable values (built only from a schema-valid document)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Role = Literal["controller", "worker"]
Distro = Literal["rke2", "k3s"]


@dataclass(frozen=True)
class Bastion:
    address: str
    port: int = 22
    user: str | None = None
    key_path: Path | None = None


@dataclass(frozen=True)
class SshConfig:
    address: str
    # None: whatever ~/.ssh/config says for the address, else OpenSSH's defaults.
    port: int | None = None
    user: str | None = None
    key_path: Path | None = None
    known_hosts: Path | None = None
    bastion: Bastion | None = None

    @property
    def endpoint(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port or 22}"


@dataclass(frozen=True)
class HostConfig:
    index: int  # position in spec.hosts: the stable order of every report
    role: Role
    ssh: SshConfig
    profile: str | None = None
    hostname: str | None = None
    private_interface: str | None = None
    private_address: str | None = None

    @property
    def label(self) -> str:
        """How the host is named before its hostname is known."""
        return self.hostname or self.ssh.address


@dataclass(frozen=True)
class Engine:
    distro: Distro
    version: str


@dataclass(frozen=True)
class Options:
    # Hosts read at once: enough that 100+ hosts behind WAN latency are read in one wave.
    host_concurrency: int = 128
    worker_concurrency: int = 1
    connect_timeout: float = 10.0
    command_timeout: float = 60.0
    max_clock_skew: float = 30.0
    check_firewall: bool = True
    drain_timeout: int = 300
    drain_grace_period: int = -1
    drain_delete_emptydir_data: bool = False
    drain_force: bool = False
    # options.drain.when, per kind of change: "always" (cordon and drain first) or "never"
    # (restart in place: the engine's restart leaves the containers running).
    drain_registries: str = "always"
    drain_control_plane: str = "always"
    ready_timeout: int = 300
    kubeconfig_enabled: bool = False
    kubeconfig_path: Path = Path("~/.kube/config")
    kubeconfig_context: str | None = None
    kubeconfig_server: str | None = None  # https URL; None: derived (planner/kube.py)
    label_profiles: bool = False


@dataclass(frozen=True)
class ClusterConfig:
    path: Path
    name: str
    engine: Engine
    hosts: tuple[HostConfig, ...]
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    # engineConfig with every secret replaced by a planner.config.secrets.Secret
    engine_config: dict[str, Any] = field(default_factory=dict)
    options: Options = field(default_factory=Options)
    digest: str = ""  # sha256 of the config file's bytes
