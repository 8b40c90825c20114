"""The example configs are complete and valid; the schemas are there for editors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import schemas
from tests.e2e.cli import cargoship

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_rke2_example_is_valid(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("a key file")  # only its readability counts
    result = cargoship("validate", "-c", EXAMPLES / "rke2-cluster.yaml",
                       env={"HOME": str(home), "REGISTRY_PASSWORD": "example"})
    assert result.returncode == 0, result.stderr
    assert "valid (6 host(s), rke2 v1.30.4+rke2r1)" in result.stdout
    missing = cargoship("validate", "-c", EXAMPLES / "rke2-cluster.yaml",
                        env={"HOME": str(home)})
    assert missing.returncode == 1
    assert "environment variable REGISTRY_PASSWORD is not set" in missing.stderr


def test_k3s_example_is_valid(tmp_path: Path) -> None:
    config = tmp_path / "k3s-cluster.yaml"
    shutil.copy(EXAMPLES / "k3s-cluster.yaml", config)
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "mirror-token").write_text("example\n")
    result = cargoship("validate", "-c", config)
    assert result.returncode == 0, result.stderr
    assert "valid (3 host(s), k3s v1.30.4+k3s1)" in result.stdout


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
            script = step.get("run", "").replace("\\\n", " ")
            for line in script.splitlines():
                line = line.strip().split(" || ")[0]
                if line.startswith("cargoship "):
                    commands.append(shlex.split(line)[1:])
    verbs = [c[0] for c in commands]
    assert verbs == ["plan", "show", "apply"]
    for argv in commands:
        build_parser().parse_args(argv)  # exits (fails the test) on an unknown flag
    assert "--require-signed-by" in commands[2] and "--split-dir" in commands[1]
