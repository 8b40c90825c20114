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
                             "planner.facts.firewall.parse")

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
