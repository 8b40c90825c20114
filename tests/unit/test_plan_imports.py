"""`cargoship plan` imports what it needs before it reaches a host, and nothing heavier:
no fabric or invoke at all (paramiko imports invoke whenever it is installed), and the
schema validator, the diff library, the Kubernetes client and the firewall parsers only
once they have something to do."""

from __future__ import annotations

import json
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


def test_a_plan_whose_host_refuses_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    # A bound socket that does not listen: the host refuses at once.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "cargoship/v1", "kind": "Cluster", "metadata": {"name": "imports"},
        "spec": {"engine": {"distro": "rke2", "version": "v1.30.4+rke2r1"},
                 "hosts": [{"role": "controller", "ssh": {
                     "address": "127.0.0.1", "port": closed.getsockname()[1], "user": "root",
                     "knownHosts": str(tmp_path / "known_hosts")}}]}}))
    try:
        result = subprocess.run([sys.executable, "-c", PROBE, str(config)], capture_output=True,
                                text=True, timeout=60, cwd=tmp_path)
    finally:
        closed.close()
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
    archive = tmp_path / "bundle.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: distributions may hide
    monkeypatch.setattr(sys, "path", [str(plain), str(archive)])
    assert _may_declare(f"[{GROUP}]")
