"""Service commands for the init systems the lab can't run (systemd, openrc): never block."""

from __future__ import annotations

import pytest

from executor.service import ServiceError, start_command, stop_command


def test_starts_never_wait_for_the_engine() -> None:
    assert start_command("systemd", "rke2-server") == "systemctl start --no-block rke2-server"
    assert start_command("openrc", "k3s").startswith("setsid rc-service k3s start ")
    assert start_command("openrc", "k3s").endswith("&")
    assert start_command("runit", "rke2-agent").startswith("sv up ")


def test_stops_and_quoting() -> None:
    assert stop_command("systemd", "rke2-agent") == "systemctl stop rke2-agent"
    assert stop_command("openrc", "k3s-agent") == "rc-service k3s-agent stop"
    assert "'x; reboot'" in stop_command("systemd", "x; reboot")


def test_unknown_init_system_is_an_error() -> None:
    with pytest.raises(ServiceError, match="unsupported init system 'upstart'"):
        start_command("upstart", "rke2-server")
