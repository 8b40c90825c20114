"""Strict host-key checking, end to end on lab hosts: a host key that changed between plan
and apply, and a man in the middle presenting another host's key at a host's address, are
refused at plan and at apply with one clear line, and nothing is written anywhere.

The man in the middle is a TCP forwarder inside wrk-1 (its own sshd stopped) that sends
every connection to wrk-1's address on to `evil`, a lab host outside the cluster with its
own key. Refused before authenticating means `evil` never logs a session.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship
from tests.lab import HostSpec, Lab
from tests.lab.lab import _listening
from tests.reliability.hostwrites import canaries, outside_writes, sessions, snapshots
from tests.reliability.labs import shared_lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DRIFTED = "mirrors: {}\n"
FORWARDER = """\
import socket, sys, threading, time
listen, target = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 20
while True:  # until the stopped sshd has let go of the port
    try:
        server = socket.create_server((listen, 22))
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    client, _ = server.accept()
    upstream = socket.create_connection((target, 22))
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pipe, args=(a, b), daemon=True).start()
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from shared_lab(tmp_path_factory, HostSpec("evil", "worker", engine_installed=False))


def _wait(what: str, check, timeout: float = 20) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class ManInTheMiddle:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.victim, self.evil = lab.host("wrk-1"), lab.host("evil")

    def __enter__(self) -> ManInTheMiddle:
        Path(self.victim.dir, "bin", "mitm.py").write_text(FORWARDER)
        self.lab.exec("wrk-1", "sv down /etc/service/sshd")
        self.lab.exec("wrk-1", "setsid python3 /usr/local/bin/mitm.py "
                               f"{self.victim.address} {self.evil.address} </dev/null "
                               ">/tmp/mitm.log 2>&1 & echo $! > /tmp/mitm.pid")
        _wait("the forwarder", lambda: _listening(self.victim.address))
        return self

    def __exit__(self, *exc: object) -> None:
        self.lab.exec("wrk-1", "kill $(cat /tmp/mitm.pid)")
        # kill returns before the forwarder lets go of the port: until then it would
        # answer for wrk-1's sshd (with evil's banner), and keep that sshd from binding.
        _wait("the forwarder to go", lambda: not _listening(self.victim.address))
        self.lab.exec("wrk-1", "sv up /etc/service/sshd")
        _wait("wrk-1's own sshd", lambda: _listening(self.victim.address)
              and self.lab.exec("wrk-1", "sv status /etc/service/sshd").stdout.startswith("run"))


@pytest.fixture
def planned(lab: Lab, tmp_path: Path) -> Path:
    """A plan made against the real hosts, with wrk-1's registries.yaml to fix."""
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    path = tmp_path / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", path)
    assert result.returncode == 0, result.stdout + result.stderr
    return path


def _nothing_happened(lab: Lab, before: dict, evil_logins: int) -> None:  # type: ignore[type-arg]
    assert sessions(lab, "evil") == evil_logins, "the impostor got a login"
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    for host in ("ctl-1", "wrk-1", "evil"):
        assert lab.exec(host, "ls /run/cargoship/lock /var/lib/cargoship 2>/dev/null",
                        check=False).stdout == ""
    assert outside_writes(lab, before) == {} and canaries(lab) == []


def _one_line(result) -> str:  # type: ignore[no-untyped-def]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), \
        result.stdout + result.stderr
    return lines[0]


@pytest.mark.reliability("host keys")
@pytest.mark.parametrize("accept_new", [False, True], ids=["strict", "accept-new"])
def test_a_man_in_the_middle_is_refused_at_plan(lab: Lab, tally, accept_new: bool) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    known = (lab.dir / "known_hosts").read_text()
    before, logins = snapshots(lab, ["ctl-1", "evil"]), sessions(lab, "evil")
    with ManInTheMiddle(lab):
        flags = ["--accept-new-host-keys"] if accept_new else []
        result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose", *flags)
    assert result.returncode == 1, result.stdout
    problems = [line for line in result.stdout.splitlines() if line.startswith("  x ")]
    assert len(problems) == 1, result.stdout
    address = lab.host("wrk-1").address
    assert f"{address}: Connect to hosts: host key of {address}:22 CHANGED" in problems[0]
    assert "possible man-in-the-middle" in problems[0]
    assert f"ctl-1 ({lab.host('ctl-1').address})  rke2 v1.30.4+rke2r1 installed" \
        in result.stdout  # the other host is still assessed
    assert (lab.dir / "known_hosts").read_text() == known  # a changed key is never recorded
    assert sessions(lab, "evil") == logins
    assert outside_writes(lab, before) == {}


@pytest.mark.reliability("host keys")
def test_a_man_in_the_middle_is_refused_at_apply(lab: Lab, planned: Path, tally) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    before, logins = snapshots(lab, ["ctl-1", "evil"]), sessions(lab, "evil")
    with ManInTheMiddle(lab):
        line = _one_line(cargoship("apply", planned, "--confirm"))
    assert "CHANGED" in line and "possible man-in-the-middle" in line, line
    _nothing_happened(lab, before, logins)


@pytest.mark.reliability("host keys")
def test_an_impostor_key_accepted_into_known_hosts_is_refused_at_apply(  # type: ignore[no-untyped-def]
        lab: Lab, planned: Path, tally) -> None:
    """Between plan and apply someone 'fixed' the host-key warning by trusting the new key:
    the plan still holds the key it was reviewed against."""
    tally.case()
    known_hosts = lab.dir / "known_hosts"
    original = known_hosts.read_text()
    address = lab.host("wrk-1").address
    evil_key = lab.exec("evil", "cut -d' ' -f1,2 /etc/ssh/lab_host_ed25519_key.pub").stdout
    before, logins = snapshots(lab, ["ctl-1", "evil"]), sessions(lab, "evil")
    try:
        known_hosts.write_text("".join(line for line in original.splitlines(keepends=True)
                                       if not line.startswith(address + " "))
                               + f"{address} {evil_key}")
        with ManInTheMiddle(lab):
            line = _one_line(cargoship("apply", planned, "--confirm"))
    finally:
        known_hosts.write_text(original)
    assert "matching the one the plan was made against SHA256:" in line, line
    assert "refusing before connecting" in line
    _nothing_happened(lab, before, logins)


@pytest.mark.reliability("host keys")
def test_a_host_rekeyed_between_plan_and_apply_is_refused(lab: Lab, planned: Path,  # type: ignore[no-untyped-def]
                                                         tally) -> None:
    tally.case()
    known_hosts = lab.dir / "known_hosts"
    original = known_hosts.read_text()
    address = lab.host("wrk-1").address
    key = "/etc/ssh/lab_host_ed25519_key"
    lab.exec("wrk-1", f"cp -a {key} /tmp/key.orig && cp -a {key}.pub /tmp/key.pub.orig && "
                      f"rm -f {key} {key}.pub && ssh-keygen -q -t ed25519 -N '' -f {key}")
    lab.restart_sshd("wrk-1")  # else "cannot connect", not CHANGED
    before = snapshots(lab, ["ctl-1"])
    try:
        # Strictly checked, the new key is refused as changed...
        line = _one_line(cargoship("apply", planned, "--confirm"))
        assert "CHANGED" in line, line
        # ...and trusted by someone, it is still not the key the plan was made against.
        new_key = lab.exec("wrk-1", f"cut -d' ' -f1,2 {key}.pub").stdout
        known_hosts.write_text("".join(line for line in original.splitlines(keepends=True)
                                       if not line.startswith(address + " "))
                               + f"{address} {new_key}")
        line = _one_line(cargoship("apply", planned, "--confirm"))
        assert "the plan was made against SHA256:" in line, line
    finally:
        known_hosts.write_text(original)
        lab.exec("wrk-1", f"mv /tmp/key.orig {key} && mv /tmp/key.pub.orig {key}.pub")
        lab.restart_sshd("wrk-1")
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    assert outside_writes(lab, before) == {}
    # With its own key back the plan applies: the refusals above cost nothing.
    done = cargoship("apply", planned, "--confirm", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.reliability("host keys")
def test_an_unknown_host_is_refused_without_opt_in(lab: Lab, tmp_path: Path, tally) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    config = tmp_path / "cluster.yaml"
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config.write_text((lab.dir / "cluster.yaml").read_text().replace(
        str(lab.dir / "known_hosts"), str(empty)))
    logins = {h: sessions(lab, h) for h in ("ctl-1", "wrk-1")}
    result = cargoship("plan", "-c", config)
    assert result.returncode == 1
    assert result.stdout.count("is not in " + shlex.quote(str(empty))) == 2, result.stdout
    assert {h: sessions(lab, h) for h in ("ctl-1", "wrk-1")} == logins
    assert empty.read_text() == ""
