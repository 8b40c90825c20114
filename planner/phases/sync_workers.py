"""Sync Registry Config Worker: Workers whose engine config drifted: drain, stop, write, start,
uncordon, up to the worker concurrency.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from .base import Phase


class SyncWorkers(Phase):
    title = "Sync Registry Config Worker"
