"""The cluster config: loading, validation and the typed model."""

from .load import load_config
from .model import Bastion, ClusterConfig, Engine, HostConfig, Options, SshConfig

__all__ = [
    "Bastion",
    "ClusterConfig",
    "Engine",
    "HostConfig",
    "Options",
    "SshConfig",
    "load_config",
]
