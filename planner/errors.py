"""The planner's exceptions.

    CargoshipError              anything cargoship reports as a one-line error
    ├── ConfigError             the cluster config is invalid; holds every Problem found
    └── HostError               something went wrong with one host (carries its label)
        ├── ConnectError        TCP/SSH connection or authentication failed
        │   └── HostKeyError    the host key is unknown or does not match known_hosts
        └── CommandError        a remote command failed, timed out or produced unusable output
            ├── ConnectionLost  the SSH connection dropped; the command may or may not have run
            └── CommandTimeout  no answer within the command timeout (the link may be dead)

Messages never contain secret values: config secrets are resolved into `Secret` objects
whose str/repr are masked, and remote output is never echoed into a message in full.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong, located: `where` is a file:line or a host, `path` a place inside it."""

    where: str
    message: str
    path: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.path}: {self.message}" if self.path else (
            f"{self.where}: {self.message}"
        )


class CargoshipError(Exception):
    """Base class: str(error) is a complete one-line message for the user."""


class ConfigError(CargoshipError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class HostError(CargoshipError):
    def __init__(self, host: str, message: str) -> None:
        self.host = host
        self.message = message
        super().__init__(f"{host}: {message}")


class ConnectError(HostError):
    pass


class HostKeyError(ConnectError):
    pass


class CommandError(HostError):
    pass


class ConnectionLost(CommandError):
    pass


class CommandTimeout(CommandError):
    pass
