"""The cluster config loader: every problem at once, located, and secrets kept out of messages."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from planner.config import load_config
from planner.config.secrets import Secret
from planner.errors import ConfigError

GOOD = """\
apiVersion: cargoship/v1
kind: Cluster
metadata: {name: prod-eu}
spec:
  engine: {distro: rke2, version: v1.30.4+rke2r1}
  profiles:
    edge: {ssh: {user: ops, port: 2222}, privateInterface: eth1}
  hosts:
    - role: controller
      ssh: {address: 10.0.0.11}
    - role: worker
      profile: edge
      ssh: {address: 10.0.0.21, user: admin}
  engineConfig:
    registries:
      mirrors:
        docker.io: {endpoint: ["https://mirror.example.com"]}
      configs:
        mirror.example.com:
          auth: {username: robot, password: {fromEnv: CS_TEST_PASSWORD}}
  options:
    concurrency: {workers: 3}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(p) for p in info.value.problems]


def test_good_config_with_profile_defaults_and_env_secret(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CS_TEST_PASSWORD", "hunter2-unique")
    config = load_config(write(tmp_path, GOOD))
    ctl, wrk = config.hosts
    assert (ctl.ssh.user, ctl.ssh.port) == (None, None)  # left to ~/.ssh/config
    # The profile supplies defaults, the host's own user wins.
    assert (wrk.ssh.user, wrk.ssh.port, wrk.private_interface) == ("admin", 2222, "eth1")
    assert config.options.worker_concurrency == 3
    secret = config.engine_config["registries"]["configs"]["mirror.example.com"]["auth"]["password"]
    assert isinstance(secret, Secret) and secret.reveal() == "hunter2-unique"
    assert "hunter2" not in repr(config) and "hunter2" not in str(secret)
    assert len(config.digest) == 64


def test_every_problem_is_reported_at_once_with_line_and_path(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        apiVersion: cargoship/v1
        kind: Cluster
        metadata: {name: prod}
        spec:
          engine: {distro: rke2, version: v1.30.4+rke2r1}
          hosts:
            - role: controller
              ssh: {address: 10.0.0.1}
            - role: boss
              ssh: {address: 10.0.0.2}
            - role: worker
              ssh: {address: 10.0.0.3, port: "22"}
              colour: red
    """)
    found = problems(path)
    assert found == [
        f"{path}:9: spec.hosts[1].role: expected one of 'controller', 'worker', got 'boss'",
        f"{path}:12: spec.hosts[2].ssh.port: expected an integer, got '22'",
        f"{path}:13: spec.hosts[2].colour: unknown key (expected one of: hostname, "
        "privateAddress, privateInterface, profile, role, ssh)",
    ]


def test_semantic_problems_duplicates_profiles_and_secrets(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CS_MISSING", raising=False)
    path = write(tmp_path, """\
        apiVersion: cargoship/v1
        kind: Cluster
        metadata: {name: prod}
        spec:
          engine: {distro: k3s, version: v1.30.4+rke2r1}
          hosts:
            - {role: worker, ssh: {address: 10.0.0.1}, hostname: node-a}
            - {role: worker, ssh: {address: 10.0.0.1}, hostname: node-a, profile: gpu}
          engineConfig:
            registries:
              configs:
                r.example.com: {auth: {password: {fromEnv: CS_MISSING},
                                       token: x}}
    """)
    found = "\n".join(problems(path))
    # The schema error (unknown key) is reported; semantic checks wait for a valid shape.
    assert "auth.token: unknown key" in found
    path.write_text(path.read_text().replace("token: x", "username: x"))
    found = "\n".join(problems(path))
    assert "spec.engine.version: version 'v1.30.4+rke2r1' is not a k3s release" in found
    assert "expected at least one host with role: controller" in found
    assert "spec.hosts[1].ssh.address: duplicate SSH endpoint 10.0.0.1:22 (also spec.hosts[0])" \
        in found
    assert "spec.hosts[1].hostname: duplicate hostname node-a" in found
    assert "spec.hosts[1].profile: profile 'gpu' is not defined" in found
    assert "secret: environment variable CS_MISSING is not set" in found


def test_duplicate_yaml_keys_and_syntax_errors(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("metadata: {name: prod-eu}",
                                        "metadata: {name: prod-eu}\nmetadata: {name: b}"))
    assert any(p.endswith("metadata: duplicate key") and ":4:" in p for p in problems(path))
    path.write_text("spec: [unclosed\n")
    [only] = problems(path)
    assert only.startswith(f"{path}:2: invalid YAML")
    path.write_text("- just\n- a list\n")
    assert "expected a mapping" in problems(path)[0]
    path.write_bytes(b"\xff\xfe")
    assert "not UTF-8" in problems(path)[0]
    assert "cannot read config" in problems(tmp_path / "missing.yaml")[0]


def test_secret_values_never_appear_in_errors(tmp_path: Path) -> None:
    secret = "s3cr3t-value-that-must-not-leak"
    path = write(tmp_path, GOOD.replace("{fromEnv: CS_TEST_PASSWORD}", f"[{secret}]"))
    found = "\n".join(problems(path))
    assert "auth.password" in found and secret not in found


def test_secret_from_file(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("from-a-file\n")
    config = load_config(write(tmp_path, GOOD.replace("{fromEnv: CS_TEST_PASSWORD}",
                                                      "{fromFile: pw}")))
    auth = config.engine_config["registries"]["configs"]["mirror.example.com"]["auth"]
    assert auth["password"].reveal() == "from-a-file"
    assert auth["password"].source == f"file:{tmp_path / 'pw'}"
    path = write(tmp_path, GOOD.replace("{fromEnv: CS_TEST_PASSWORD}", "{fromFile: nope}"))
    assert any("cannot read secret file" in p for p in problems(path))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("address: 10.0.0.11", "address: '10.0.0.11; rm -rf /'", "spec.hosts[0].ssh.address"),
        ("profile: edge", "profile: '../etc'", "spec.hosts[1].profile"),
        ("name: prod-eu", "name: '$(reboot)'", "metadata.name"),
        ("docker.io:", "'docker.io/../x':", "registries.mirrors"),
    ],
)
def test_hostile_values_are_refused_by_the_schema(tmp_path: Path, old: str, new: str,
                                                  message: str) -> None:
    found = "\n".join(problems(write(tmp_path, GOOD.replace(old, new))))
    assert message in found


def test_a_config_nested_too_deeply_is_refused_without_the_slow_scan(tmp_path: Path) -> None:
    # The pure-Python loader (used for its wording after libyaml refuses) scans deep flow
    # nesting in quadratic time: seconds of CPU for this file before it gave the same answer.
    path = write(tmp_path, "a: " + "[" * 3000)
    started = time.process_time()
    [only] = problems(path)
    assert only == f"{path}: invalid YAML: nested too deeply"
    assert time.process_time() - started < 0.5
