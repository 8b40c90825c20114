"""What a restart's loop (restart_follow.py) reads from its one queue: the script's events
(swap_output.py), the script's end or failure (its runner, swap_runner.py), and the node
as the API's watch tells it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import CargoshipError

from .swap_output import Event


@dataclass(frozen=True)
class ScriptEnded:
    exit_code: int
    stderr: str  # its first line


@dataclass(frozen=True)
class ScriptFailed:
    error: CargoshipError


@dataclass(frozen=True)
class Rerun:
    """The runner dialled the host again and runs the script again from its start."""


@dataclass(frozen=True)
class NodeVersion:
    node: dict[str, Any]


@dataclass(frozen=True)
class NodeUnreadable:
    why: str


Message = Event | ScriptEnded | ScriptFailed | Rerun | NodeVersion | NodeUnreadable
