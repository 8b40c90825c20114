"""SIGTERM and SIGHUP end any command as Ctrl-C does: its message, 128 + the signal.

Before, only SIGINT was handled: SIGTERM (a CI job cancelled, `timeout`) and SIGHUP (the
terminal closed) killed cargoship with no word. A plan waiting on a host that never
answers is stopped here; apply's own handling is tests/reliability/test_fault_term_hup.py.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli import cargoship_argv
from tests.stalling_listener import StallingListener


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                              (signal.SIGINT, 130)])
def test_a_plan_stopped_by_a_signal_says_so_and_exits_128_plus_it(
        tmp_path: Path, signum: int, code: int) -> None:
    listener = StallingListener("silent")
    try:
        config = silent_host_config(tmp_path, listener.port)
        run = subprocess.Popen([*cargoship_argv(), "plan", "-c", str(config)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
        listener.wait_accepted(1, timeout=30)  # it waits on the host now
        run.send_signal(signum)
        out, err = run.communicate(timeout=30)
    finally:
        listener.close()
    assert run.returncode == code, out + err
    assert "interrupted; nothing was changed on any host" in err, err
    assert "Traceback" not in out + err


def test_nohup_keeps_a_command_through_the_terminal_closing(tmp_path: Path) -> None:
    """A signal the command was started ignoring stays ignored (cargoship/cli.py): under
    `nohup` a SIGHUP ends nothing, and the command still stops for SIGTERM. Before, its
    own handler replaced nohup's, and the closed terminal ended a `nohup cargoship apply`."""
    listener = StallingListener("silent")
    try:
        config = silent_host_config(tmp_path, listener.port)
        run = subprocess.Popen(["nohup", *cargoship_argv(), "plan", "-c", str(config)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
        watchdog = threading.Timer(60, run.kill)  # a read below never waits for ever
        watchdog.start()
        try:
            listener.wait_accepted(1, timeout=30)  # it waits on the host now
            run.send_signal(signal.SIGHUP)
            assert run.stderr is not None
            # The heartbeat (every 5 s) comes after the SIGHUP: still running.
            line = run.stderr.readline()
            assert "phase 1/12: Connect to hosts" in line, line
            assert run.poll() is None
            run.send_signal(signal.SIGTERM)
            out, err = run.communicate(timeout=30)
        finally:
            watchdog.cancel()
    finally:
        listener.close()
    assert run.returncode == 143, out + line + err
    assert "interrupted; nothing was changed on any host" in err, err


def silent_host_config(tmp_path: Path, port: int) -> Path:
    """A cluster of one controller at 127.0.0.1:`port`, a host that never says a word: a
    plan waits on it (60 s to connect) until a signal comes."""
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                   check=True)
    (tmp_path / "known_hosts").touch()
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "cargoship/v1", "kind": "Cluster", "metadata": {"name": "sig"},
        "spec": {"engine": {"distro": "rke2", "version": "v1.30.4+rke2r1"},
                 "engineConfig": {}, "options": {"ssh": {"connectTimeoutSeconds": 60}},
                 "hosts": [{"role": "controller", "ssh": {
                     "address": "127.0.0.1", "port": port, "user": "root",
                     "keyPath": str(key), "knownHosts": str(tmp_path / "known_hosts")}}]}}))
    return config
