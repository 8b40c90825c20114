"""The executor's own exceptions that the command line catches by type (a module with no
heavy imports: the CLI loads it for every command)."""

from __future__ import annotations

from planner.errors import CargoshipError


class ApplyInterrupted(CargoshipError):
    """Ctrl-C (or SIGTERM, SIGHUP) before the rollout began: nothing was changed, the locks
    are released. `signum`: the signal that interrupted it."""

    def __init__(self, message: str, signum: int = 2) -> None:
        super().__init__(message)
        self.signum = signum


class SignalInterrupt(KeyboardInterrupt):
    """SIGTERM or SIGHUP taken as Ctrl-C is: raised where Ctrl-C would raise
    KeyboardInterrupt, carrying the signal so the exit code can say which (128 + it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
