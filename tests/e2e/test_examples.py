"""The example configs are complete and valid; the schemas are there for editors."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import schemas
from tests.e2e.cli import cargoship, cargoship_argv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_both_examples_validate_in_a_bare_environment(tmp_path: Path) -> None:
    """validate is offline: no environment secret, secret file or SSH key is read, so an
    empty environment (no HOME, no REGISTRY_PASSWORD, no secrets/ directory) is enough."""
    bare = {"PATH": "/usr/bin:/bin"}
    rke2 = subprocess.run([*cargoship_argv(), "validate", "-c",
                           str(EXAMPLES / "rke2-cluster.yaml")],
                          capture_output=True, text=True, env=bare, cwd=tmp_path, timeout=60)
    assert rke2.returncode == 0, rke2.stderr
    assert "valid (6 host(s), rke2 v1.30.4+rke2r1)" in rke2.stdout
    # What plan will need is said, not read.
    assert "environment variable REGISTRY_PASSWORD" in rke2.stdout
    config = tmp_path / "k3s-cluster.yaml"  # its secret file (secrets/mirror-token) is absent
    shutil.copy(EXAMPLES / "k3s-cluster.yaml", config)
    k3s = subprocess.run([*cargoship_argv(), "validate", "-c", str(config)],
                         capture_output=True, text=True, env=bare, cwd=tmp_path, timeout=60)
    assert k3s.returncode == 0, k3s.stderr
    assert "valid (3 host(s), k3s v1.30.4+k3s1)" in k3s.stdout
    assert f"secret file {tmp_path}/secrets/mirror-token" in k3s.stdout


def test_validate_schema_and_show_read_no_secret_and_no_key(tmp_path: Path) -> None:
    """Proved by making every secret source and key a trap: a FIFO blocks whoever opens
    it, so reading one would hang the command into its timeout."""
    config = tmp_path / "cluster.yaml"
    text = (EXAMPLES / "k3s-cluster.yaml").read_text()
    config.write_text(text)
    (tmp_path / "secrets").mkdir()
    os.mkfifo(tmp_path / "secrets" / "mirror-token")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    os.mkfifo(home / ".ssh" / "id_ed25519")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    for args in (["validate", "-c", str(config)], ["schema"], ["schema", "--plan"]):
        result = subprocess.run([*cargoship_argv(), *args], capture_output=True, text=True,
                                env=env, cwd=tmp_path, timeout=30)
        assert result.returncode == 0, (args, result.stderr)


def test_examples_point_editors_at_the_schema() -> None:
    for example in EXAMPLES.glob("*.yaml"):
        first = example.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../schemas/cluster.schema.json"
        assert (example.parent / "../schemas/cluster.schema.json").resolve().exists()


def test_schema_command_prints_the_shipped_schemas() -> None:
    cluster = cargoship("schema")
    assert cluster.returncode == 0
    assert json.loads(cluster.stdout) == schemas.load("cluster.schema.json")
    plan = cargoship("schema", "--plan")
    assert json.loads(plan.stdout) == schemas.load("plan.schema.json")


def test_ci_workflow_is_valid_and_its_cargoship_commands_parse() -> None:
    import shlex

    import yaml

    from cargoship.cli import build_parser

    workflow = yaml.safe_load((EXAMPLES / "ci" / "github-actions.yml").read_text())
    assert set(workflow["jobs"]) >= {"plan", "apply"}
    commands = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            script = re.sub(r"\$\{\{[^}]*\}\}", "X", step.get("run", "")).replace("\\\n", " ")
            for line in script.splitlines():
                line = line.strip().split(" || ")[0]
                if line.startswith("cargoship "):
                    commands.append(shlex.split(line)[1:])
    verbs = [c[0] for c in commands]
    assert verbs == ["plan", "show", "show", "sign", "apply"]
    for argv in commands:
        build_parser().parse_args(argv)  # exits (fails the test) on an unknown flag
    assert "--require-signed-by" in commands[4] and "--split-dir" in commands[1]
    assert "--detached" in commands[3]


def test_every_property_of_the_cluster_schema_has_a_description() -> None:
    """Editors show descriptions on hover: every property, at every depth, has one, as the
    `cargoship schema` command prints it."""
    printed = json.loads(cargoship("schema").stdout)
    missing: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for name, prop in node.get("properties", {}).items():
                if not (isinstance(prop, dict) and str(prop.get("description", "")).strip()):
                    missing.append(f"{where}.{name}")
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}[{index}]")

    walk(printed, "")
    assert missing == []
