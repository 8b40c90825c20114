"""The executor's own exceptions that the command line catches by type (a module with no
heavy imports: the CLI loads it for every command)."""

from __future__ import annotations

from planner.errors import CargoshipError


class ApplyInterrupted(CargoshipError):
    """Ctrl-C before the rollout began: nothing was changed, the locks are released."""
