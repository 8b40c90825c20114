"""Phases from installed plugins: the opt-in hook for site-specific checks and steps.

A distribution declares, in the entry point group `cargoship.phases`, a callable returning
Phase instances; they run after the engine-config phases and before the lock is released,
in the order of their entry point names. They follow the same protocol (base.py) and the
same dry-run rules: a plugin phase that declares nothing is only reported, and one that
reads what an earlier phase would write is unassessed, transitively. Plugins are code in
cargoship's own environment: trusted as cargoship itself is.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from ..errors import CargoshipError
from .base import Phase

GROUP = "cargoship.phases"


class PluginError(CargoshipError):
    pass


def plugin_phases() -> list[Phase]:
    phases: list[Phase] = []
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        try:
            made = point.load()()
        except Exception as exc:  # noqa: BLE001 - a broken plugin: one line naming it
            raise PluginError(f"phase plugin {point.name} ({point.value}): "
                              f"{type(exc).__name__}: {exc}") from None
        if not isinstance(made, list | tuple) or not all(isinstance(p, Phase) for p in made):
            raise PluginError(f"phase plugin {point.name} ({point.value}) did not return a "
                              "list of Phase objects")
        phases.extend(made)
    return phases
