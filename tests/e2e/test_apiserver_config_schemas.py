"""Audit policy and Pod Security admission content are held to their real schemas (issue
28): audit.k8s.io/v1 Policy and apiserver.config.k8s.io/v1 AdmissionConfiguration with a
PodSecurityConfiguration (kubernetes apiserver/pkg/apis/audit/v1/types.go,
pod-security-admission/admission/api/v1/types.go). A level the API server does not know
used to pass `validate` and `plan` and crash-loop the engine at apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import cargoship

EXAMPLE = Path(__file__).parents[2] / "examples" / "rke2-cluster.yaml"


@pytest.mark.parametrize(("old", "new", "said"), [
    ("        - level: Metadata", "        - level: Verbose",
     ":58: spec.engineConfig.auditPolicy.rules[1].level: expected one of 'None', 'Metadata', "
     "'Request', 'RequestResponse', got 'Verbose'"),
    ("          verbs: [create", "          verb: [create",
     ":61: spec.engineConfig.auditPolicy.rules[2].verb: unknown key"),
    ("defaults: {enforce: baseline,", "defaults: {enforce: strict,",
     ":70: spec.engineConfig.podSecurity.plugins[0].configuration.defaults.enforce: expected "
     "one of 'privileged', 'baseline', 'restricted', got 'strict'"),
    ("enforce-version: latest", "enforce-version: '1.30'",
     ":70: spec.engineConfig.podSecurity.plugins[0].configuration.defaults.enforce-version: "
     "expected a Pod Security version: latest or v1.<minor>"),
    ("exemptions: {namespaces:", "exemptions: {namespace:",
     ":72: spec.engineConfig.podSecurity.plugins[0].configuration.exemptions.namespace: "
     "unknown key"),
])
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_apiserver_config_content_is_checked_with_file_and_line(
        tmp_path: Path, command: str, old: str, new: str, said: str) -> None:
    text = EXAMPLE.read_text()
    assert old in text
    config = tmp_path / "cluster.yaml"
    config.write_text(text.replace(old, new, 1))
    result = cargoship(command, "-c", config, env={"REGISTRY_PASSWORD": "x"})
    assert result.returncode != 0
    assert f"error: {config}{said}" in result.stderr, result.stderr
    # The example itself is valid: only the edit is refused.
    example = cargoship("validate", "-c", EXAMPLE, env={"REGISTRY_PASSWORD": "x"})
    assert example.returncode == 0, example.stderr
