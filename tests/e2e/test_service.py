"""Stopping and starting the engine under a real supervisor (runit) on a lab host."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.service import ServiceError, start, state, stop
from planner.errors import CommandError
from tests.e2e.test_files import writer
from tests.lab import HostSpec


def test_stop_then_start_the_engine(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker", user="alice")])
    marker = Path(lab.host("wrk-1").dir) / "rancher-var" / "rke2" / "lab-engine.json"
    host = writer(lab, "wrk-1")
    assert state(host, "runit", "rke2-agent") == "running"
    stop(host, "runit", "rke2-agent", timeout=15)
    assert state(host, "runit", "rke2-agent") == "stopped" and not marker.exists()
    start(host, "runit", "rke2-agent", timeout=15)
    assert state(host, "runit", "rke2-agent") == "running"
    host.close()


def test_missing_service_is_an_error(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker", engine_installed=False)])
    host = writer(lab, "wrk-1")
    assert state(host, "runit", "rke2-agent") == "absent"
    with pytest.raises(CommandError, match="remote command failed"):
        start(host, "runit", "rke2-agent", timeout=2)
    host.close()


def test_start_times_out_with_the_state_seen(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = writer(lab, "wrk-1")
    stop(host, "runit", "rke2-agent", timeout=15)
    # Make the service unable to run at all: its run script is gone.
    lab.exec("wrk-1", "chmod -x /etc/service/rke2-agent/run")
    with pytest.raises(ServiceError, match=r"rke2-agent is \w+, not running, after 1s"):
        start(host, "runit", "rke2-agent", timeout=1)
    host.close()
