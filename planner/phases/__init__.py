"""The engine-config-sync phases, one small module each, in the order they run."""

from __future__ import annotations

from .acquire_lock import AcquireLock
from .base import DryRun, Phase, PhaseNotRunnable
from .connect import Connect
from .detect_os import DetectOs
from .disconnect import Disconnect
from .distro_facts import GatherDistroFacts
from .host_facts import GatherHostFacts
from .kubeconfig import UpdateKubeconfig
from .label_nodes import LabelNodes
from .plugins import plugin_phases
from .release_lock import ReleaseLock
from .sync_controllers import SyncControllers
from .sync_workers import SyncWorkers
from .validate import ValidateHosts


def engine_config_sync() -> list[Phase]:
    """The twelve phases of engine-config-sync, in order (fresh instances per run), with
    any plugin phases before the lock is released."""
    return [
        Connect(),
        DetectOs(),
        AcquireLock(),
        GatherHostFacts(),
        ValidateHosts(),
        GatherDistroFacts(),
        SyncControllers(),
        SyncWorkers(),
        UpdateKubeconfig(),
        LabelNodes(),
        *plugin_phases(),  # opt-in hooks (plugins.py); none are installed by default
        ReleaseLock(),
        Disconnect(),
    ]


__all__ = ["DryRun", "Phase", "PhaseNotRunnable", "engine_config_sync"]
