"""executor/quorum.py reads each controller's member with the certificates where that
controller's engine keeps its data: a moved `data-dir` must not read as "no embedded etcd"
(the gate would then pass every stop unread)."""

from __future__ import annotations

from typing import Any

from executor.quorum import Controller, read_controller
from planner.hosts.ssh import CommandResult


class Writer:
    def __init__(self) -> None:
        self.scripts: list[str] = []

    def run_root(self, script: str, **_: Any) -> CommandResult:
        self.scripts.append(script)
        return CommandResult(0, b"state run: (pid 1) 5s\n", b"")


def test_the_look_reads_certificates_under_the_controllers_own_data_dir() -> None:
    moved, default = Writer(), Writer()
    read_controller(Controller("ctl-1", moved, "runit", "/srv/rke2"), "rke2")  # type: ignore[arg-type]
    read_controller(Controller("ctl-2", default, "runit"), "rke2")  # type: ignore[arg-type]
    assert "/srv/rke2/server/tls" in moved.scripts[0]
    assert "/var/lib/rancher/rke2/server/tls" not in moved.scripts[0]
    assert "/var/lib/rancher/rke2/server/tls" in default.scripts[0]
