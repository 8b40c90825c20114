"""Hosts behind one bastion share its connection: one host's end must not stop the others.

libssh2 sends nothing else on a connection while one of its packets is half on the wire,
until the same write finishes it (transport.c, transport_send_existing). The bastion's pump
writes each host's bytes into that host's channel, with the bastion connection's send
buffer shrunk here so most of those writes are half sent for a while. A host whose own
connection ends mid-upload must leave the bastion to the others.

This failed once in a full run (wrk-2's next command timed out): the pump closed the
ended host's channel with one call while the socket was full, and libssh2 had that close
half on the wire with nobody to finish it. A close is now made again until it is out
(Wire.call_soon). What this does not reach every time: the pump ending while a write or a
close is half sent; tests/unit/test_gateway_pump.py holds that moment with a fake session,
and tests/e2e/test_files.py's command timed out mid-packet holds it on a real one.
"""

from __future__ import annotations

import socket

from planner.config.model import Bastion, SshConfig
from planner.errors import HostError
from planner.hosts.ssh import ConnectOptions, SshSession, open_session
from tests.e2e.test_plan_access import behind_bastion
from tests.e2e.uploads import Upload
from tests.lab import HostSpec, Lab


def _session(lab: Lab, name: str, options: ConnectOptions) -> SshSession:
    host = lab.host(name)
    key = lab.dir / "id_ed25519"
    return open_session(name, SshConfig(
        address=host.address, user=host.user, key_path=key, known_hosts=lab.dir / "known_hosts",
        bastion=Bastion(lab.host("bastion").address, key_path=key)), options)


def test_a_host_whose_connection_ends_mid_write_leaves_the_bastion_to_the_others(
        lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker"), HostSpec("wrk-2", "worker"),
                       HostSpec("bastion", "worker", engine_installed=False)])
    behind_bastion(lab)
    options = ConnectOptions()
    ending, other = _session(lab, "wrk-1", options), _session(lab, "wrk-2", options)
    # The bastion's connection with a send buffer of a few kilobytes: the pump's writes
    # are half sent most of the time, so wrk-1's end comes in the middle of one.
    for gateway in options.gateways._gateways.values():
        assert gateway._wire is not None
        gateway._wire.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    upload = Upload(lab, "wrk-1", ending, 50_000_000, 30)
    lab.exec("wrk-1", "pkill -f '[@]notty'")  # wrk-1's SSH connection ends mid-upload
    outcome = upload.outcome(60)
    assert isinstance(outcome, HostError), outcome
    for _ in range(3):  # wrk-2 goes on through the same bastion connection
        assert other.run("echo still here", 10).stdout == b"still here\n"
    assert lab.ssh_logins("bastion") == 1
    other.close()
    ending.close()
