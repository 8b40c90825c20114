"""Phases from installed plugins: the opt-in hook for site-specific checks and steps.

A distribution declares, in the entry point group `cargoship.phases`, a callable returning
Phase instances; they run after the engine-config phases and before the lock is released,
in the order of their entry point names. They follow the same protocol (base.py) and the
same dry-run rules: a plugin phase that declares nothing is only reported, and one that
reads what an earlier phase would write is unassessed, transitively. Plugins are code in
cargoship's own environment: trusted as cargoship itself is.
"""

from __future__ import annotations

import os
import sys

from ..errors import CargoshipError
from .base import Phase

GROUP = "cargoship.phases"


class PluginError(CargoshipError):
    pass


def plugin_phases() -> list[Phase]:
    if not _may_declare(f"[{GROUP}]"):
        return []
    from importlib.metadata import entry_points  # only when a plugin may exist

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


def _may_declare(section: str) -> bool:
    """False only when no distribution importlib.metadata could find declares the section:
    no *.dist-info, *.egg-info or egg's EGG-INFO folder on sys.path has an entry_points.txt
    naming it.
    A plan runs this on every start, and importing importlib.metadata to learn that no
    plugin is installed cost more than all of this (it pulls in the email package). Anything
    this look cannot see through (a zip on the path, a finder of distributions other than
    the path's own) answers True, and importlib.metadata decides."""
    for finder in sys.meta_path:
        if hasattr(finder, "find_distributions") and \
                getattr(finder, "__name__", "") != "PathFinder":
            return True
    for entry in sys.path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except NotADirectoryError:
            return True  # a zip archive: it may hold distributions
        except OSError:
            continue  # missing, as python311.zip usually is: nothing to find there
        for name in names:
            # As importlib.metadata looks: *.dist-info and *.egg-info, and an egg's EGG-INFO.
            if not (name.lower().endswith((".dist-info", ".egg-info")) or
                    (folder.endswith(".egg") and name.lower() == "egg-info")):
                continue
            try:
                with open(os.path.join(folder, name, "entry_points.txt"), "rb") as fh:
                    if section.encode() in fh.read():
                        return True
            except OSError:
                continue
    return False
