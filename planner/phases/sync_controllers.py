"""Sync Registry Config Controller: Controllers whose engine config drifted: drain, stop, write,
start, uncordon, one at a time; chart values in place.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from .base import Phase


class SyncControllers(Phase):
    title = "Sync Registry Config Controller"
