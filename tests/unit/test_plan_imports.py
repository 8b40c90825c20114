"""`cargoship plan` imports what it needs before it reaches a host, and nothing heavier:
no fabric or invoke at all (paramiko imports invoke whenever it is installed), no
paramiko or cryptography where no ssh_config file sets what a connection reads (host keys
are compared as blobs), and the schema validator, the diff library, the Kubernetes client
and the firewall parsers only once they have something to do."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

NEVER = ("fabric", "invoke")
NOT_BEFORE_A_HOST_IS_READ = ("jsonschema", "deepdiff", "kubernetes",
                             "planner.facts.firewall.parse", "statistics")
# Not at all when nothing asks for them: importlib.metadata unless a distribution on the path
# declares a phase plugin, uuid (and its platform) for a plan id.
NOT_WITHOUT_A_REASON = ("importlib.metadata", "uuid", "platform")

PROBE = """\
import json, sys
from cargoship.cli import main
code = main(["plan", "-c", sys.argv[1]])
print(json.dumps([code, sorted(sys.modules)]))
"""

# The modules loaded when the first host is dialled (the handshakes begin), and at the end.
DIAL_PROBE = """\
import json, sys
import planner.startup
at_dial = []
measure = planner.startup.since_process_start
def noted():
    at_dial.extend(sorted(sys.modules))
    return measure()
planner.startup.since_process_start = noted
from cargoship.cli import main
code = main(["plan", "-c", sys.argv[1]])
print(json.dumps([code, at_dial, sorted(sys.modules)]))
"""
# What a plan needs only once it has hosts to read: loaded while the handshakes run.
NOT_BEFORE_THE_FIRST_DIAL = ("planner.dryrun", "planner.phases", "planner.plan.model",
                             "planner.plan.codec", "planner.render.text", "planner.hosts.reader")


def _refusing_config(tmp_path: Path, closed: socket.socket) -> Path:
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "cargoship/v1", "kind": "Cluster", "metadata": {"name": "imports"},
        "spec": {"engine": {"distro": "rke2", "version": "v1.30.4+rke2r1"},
                 "hosts": [{"role": "controller", "ssh": {
                     "address": "127.0.0.1", "port": closed.getsockname()[1], "user": "root",
                     "knownHosts": str(tmp_path / "known_hosts")}}]}}))
    return config


def _probe(tmp_path: Path, probe: str) -> subprocess.CompletedProcess[str]:
    # A bound socket that does not listen: the host refuses at once.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        config = _refusing_config(tmp_path, closed)
        # HOME: no ~/.ssh/config but the test's (none); /etc/ssh/ssh_config is the machine's.
        return subprocess.run([sys.executable, "-c", probe, str(config)], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path,
                              env={**os.environ, "HOME": str(tmp_path)})


def test_the_handshakes_begin_before_the_phases_code_is_loaded(tmp_path: Path) -> None:
    result = _probe(tmp_path, DIAL_PROBE)
    assert result.returncode == 0, result.stderr
    code, at_dial, at_end = json.loads(result.stdout.splitlines()[-1])
    assert code == 1 and "connection refused" in result.stdout
    assert at_dial, "the plan never dialled"
    roots = {m.split(".")[0] for m in at_end}
    assert not roots & {"paramiko", "cryptography"}, (
        "a key library imported (~80 ms of start-up): host keys are compared as blobs, and "
        "ssh_config goes to paramiko only where a file sets what a connection reads")
    early = set(at_dial) & set(NOT_BEFORE_THE_FIRST_DIAL)
    assert not early, f"{sorted(early)} loaded before the first dial: they could load " \
                      "while the handshakes run"
    assert set(NOT_BEFORE_THE_FIRST_DIAL) <= set(at_end)  # and the plan did run its phases


def test_a_plan_whose_host_refuses_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    result = _probe(tmp_path, PROBE)
    assert result.returncode == 0, result.stderr
    code, modules = json.loads(result.stdout.splitlines()[-1])
    assert code == 1 and "connection refused" in result.stdout
    roots = {m.split(".")[0] for m in modules}
    assert not roots & set(NEVER), (
        f"{sorted(roots & set(NEVER))} imported: fabric is not a dependency any more, and "
        "paramiko imports invoke whenever it is installed (~150 ms): uninstall it")
    assert not set(modules) & set(NOT_BEFORE_A_HOST_IS_READ), \
        sorted(set(modules) & set(NOT_BEFORE_A_HOST_IS_READ))
    assert not set(modules) & set(NOT_WITHOUT_A_REASON), \
        sorted(set(modules) & set(NOT_WITHOUT_A_REASON))


def test_the_plugin_look_finds_a_declaring_distribution_and_passes_a_zip_on(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from planner.phases.plugins import GROUP, _may_declare

    plain = tmp_path / "plain"
    (plain / "other-1.0.dist-info").mkdir(parents=True)
    (plain / "other-1.0.dist-info" / "entry_points.txt").write_text(
        "[console_scripts]\nother = other:main\n")
    (plain / "bare-1.0.dist-info").mkdir()  # no entry_points.txt at all
    monkeypatch.setattr(sys, "path", [str(plain), str(tmp_path / "missing")])
    assert not _may_declare(f"[{GROUP}]")
    egg = tmp_path / "egg"
    (egg / "site.egg-info").mkdir(parents=True)
    (egg / "site.egg-info" / "entry_points.txt").write_text(f"[{GROUP}]\nsite = site:phases\n")
    monkeypatch.setattr(sys, "path", [str(plain), str(egg)])
    assert _may_declare(f"[{GROUP}]")
    egg = tmp_path / "site_phases-1.0.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "entry_points.txt").write_text(f"[{GROUP}]\nsite = site:phases\n")
    monkeypatch.setattr(sys, "path", [str(plain), str(egg)])
    assert _may_declare(f"[{GROUP}]")
    archive = tmp_path / "bundle.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: distributions may hide
    monkeypatch.setattr(sys, "path", [str(plain), str(archive)])
    assert _may_declare(f"[{GROUP}]")
