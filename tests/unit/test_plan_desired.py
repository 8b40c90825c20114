"""A plan carries the desired state; apply gets the config back from it, secrets checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.config import load_config
from planner.config.model import ClusterConfig, Engine, HostConfig, SshConfig
from planner.config.secrets import Secret
from planner.desired.engine_files import desired_files
from planner.plan.desired import DesiredStateError, from_desired, inline_secrets, to_desired

CONFIG = """\
apiVersion: cargoship/v1
kind: Cluster
metadata: {name: prod}
spec:
  engine: {distro: rke2, version: v1.30.4+rke2r1}
  profiles: {edge: {ssh: {user: ops}, privateInterface: eth1}}
  hosts:
    - role: controller
      ssh: {address: 10.0.0.1, keyPath: key, knownHosts: kh,
            bastion: {address: jump.example.com, keyPath: key}}
    - {role: worker, profile: edge, ssh: {address: 10.0.0.2, port: 2222}, privateAddress: 10.1.0.2}
  engineConfig:
    registries:
      configs:
        r.io: {auth: {username: robot, password: {fromEnv: CS_PW}, auth: {fromFile: tok}}}
  options: {concurrency: {workers: 3}, drain: {timeoutSeconds: 60}, labelProfiles: true}
"""
SALT = b"0123456789abcdef"


def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str = CONFIG):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CS_PW", "pw-1")
    (tmp_path / "key").write_text("k")
    (tmp_path / "tok").write_text("token-1\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return load_config(path)


def test_round_trip_through_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load(tmp_path, monkeypatch)
    desired = json.loads(json.dumps(to_desired(config, SALT)))
    assert "pw-1" not in json.dumps(desired) and "token-1" not in json.dumps(desired)
    again = from_desired(desired, SALT, "plan.json")
    assert again.hosts == config.hosts
    assert again.options == config.options
    assert again.engine == config.engine and again.name == config.name
    auth = again.engine_config["registries"]["configs"]["r.io"]["auth"]
    assert auth["password"].reveal() == "pw-1" and auth["auth"].reveal() == "token-1"


def test_changed_or_missing_secret_is_refused(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config = load(tmp_path, monkeypatch)
    desired = to_desired(config, SALT)
    monkeypatch.setenv("CS_PW", "pw-2")
    with pytest.raises(DesiredStateError, match=r"password: the secret from env:CS_PW changed"):
        from_desired(desired, SALT, "plan.json")
    monkeypatch.delenv("CS_PW")
    with pytest.raises(DesiredStateError, match="environment variable CS_PW is not set"):
        from_desired(desired, SALT, "plan.json")


def test_inline_secrets_make_a_plan_unapplyable(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = load(tmp_path, monkeypatch, CONFIG.replace("{fromEnv: CS_PW}", "hunter2"))
    assert inline_secrets(config) == [
        "spec.engineConfig.registries.configs.r.io.auth.password"]
    desired = to_desired(config, SALT)
    assert "hunter2" not in json.dumps(desired)
    with pytest.raises(DesiredStateError, match="given inline"):
        from_desired(desired, SALT, "plan.json")



def test_rendered_files_do_not_depend_on_key_order_through_a_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The README's own example writes username before password; a plan file carries the
    # desired state with sorted keys. Both must render the very same bytes.
    monkeypatch.setenv("U", "robot")
    monkeypatch.setenv("P", "pw")
    engine = {"registries": {"mirrors": {"docker.io": {"endpoint": ["https://m.example"]}},
                             "configs": {"m.example": {"auth": {
                                 "username": Secret("env:U", "robot"),
                                 "password": Secret("env:P", "pw")}}}}}
    config = ClusterConfig(Path("c.yaml"), "t", Engine("rke2", "v1.30.4+rke2r1"),
                           (HostConfig(0, "controller", SshConfig("10.0.0.1")),),
                           engine_config=engine)
    carried = json.loads(json.dumps(to_desired(config, SALT), sort_keys=True))
    again = from_desired(carried, SALT, "plan.json")
    before = [f.content() for f in desired_files(config, "controller")]
    assert [f.content() for f in desired_files(again, "controller")] == before
