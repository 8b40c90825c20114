"""Acquire exclusive host lock: Runs a background task that touches a lock file on each host every
30 seconds; other runs may take it over only after a minute untouched.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from .base import Phase


class AcquireLock(Phase):
    title = "Acquire exclusive host lock"
