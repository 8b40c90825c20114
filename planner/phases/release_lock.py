"""Release exclusive host lock: Deletes the lock file from each host.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from .base import Phase


class ReleaseLock(Phase):
    title = "Release exclusive host lock"
