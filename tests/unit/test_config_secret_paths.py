"""Where a secret file may be read from (issue 25, point 4): never an SSH key the config
names, nothing in a .ssh directory, nothing outside the config's directory, unless the
secret says `allowAnyPath: true`; refused at load, in one line naming the secret and the
path, before the file is read. A plan carries the opt-in; apply holds an edited plan to
the same rule."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import planner.config.load as load_module
from planner.config import load_config
from planner.errors import ConfigError
from planner.plan import codec
from planner.plan.desired import DesiredStateError, from_desired, to_desired
from tests.unit.test_plan_codec import sample_plan

SALT = b"0123456789abcdef"
CONFIG = """\
apiVersion: cargoship/v1
kind: Cluster
metadata: {name: prod}
spec:
  engine: {distro: rke2, version: v1.30.4+rke2r1}
  profiles: {edge: {ssh: {keyPath: edge_key}}}
  hosts:
    - role: controller
      ssh: {address: 10.0.0.1, keyPath: id_ed25519,
            bastion: {address: jump.example.com, keyPath: jump_key}}
  engineConfig:
    registries:
      configs:
        r.io:
          auth: {username: robot, password: SECRET}
  options:
    kubeconfig: {path: kube/config}
"""
WHERE = "spec.engineConfig.registries.configs['r.io'].auth.password"


def config_with(tmp_path: Path, secret: str) -> Path:
    for name in ("id_ed25519", "jump_key", "edge_key", "pw"):
        (tmp_path / name).write_text(f"{name}-content\n")
    (tmp_path / "kube").mkdir(exist_ok=True)
    (tmp_path / "kube" / "config").write_text("kubeconfig-content\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(CONFIG).replace("SECRET", secret))
    return path


def refused(path: Path, secrets: bool = True) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, secrets=secrets)
    assert len(info.value.problems) == 1, info.value.problems
    return str(info.value.problems[0])


@pytest.mark.parametrize(("secret", "file", "why"), [
    ("{fromFile: id_ed25519}", "id_ed25519", "is the SSH key of spec.hosts[0].ssh.keyPath"),
    ("{fromFile: ./jump_key}", "jump_key",
     "is the SSH key of spec.hosts[0].ssh.bastion.keyPath"),
    ("{fromFile: edge_key}", "edge_key", "is the SSH key of spec.profiles.edge.ssh.keyPath"),
    ("{fromFile: kube/config}", "kube/config", "is the local kubeconfig"),
])
def test_a_file_the_config_names_for_another_use_is_refused(
        tmp_path: Path, secret: str, file: str, why: str) -> None:
    message = refused(config_with(tmp_path, secret))
    assert message.startswith(f"{tmp_path / 'cluster.yaml'}:") and WHERE in message
    assert f"secret file {tmp_path / file} {why}" in message
    assert "allowAnyPath: true" in message and "\n" not in message
    # validate and the offline commands read no secret, and refuse it all the same.
    assert refused(config_with(tmp_path, secret), secrets=False) == message


def test_ssh_directories_and_outside_the_config_directory_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("a key\n")
    monkeypatch.setenv("HOME", str(home))
    configs = tmp_path / "configs"
    configs.mkdir()
    message = refused(config_with(configs, "{fromFile: ~/.ssh/id_rsa}"))
    assert f"secret file {home / '.ssh' / 'id_rsa'} is inside a .ssh directory" in message
    (tmp_path / "elsewhere").write_text("x\n")
    message = refused(config_with(configs, "{fromFile: ../elsewhere}"))
    assert "is outside the directory of the cluster config" in message and WHERE in message
    message = refused(config_with(configs, f"{{fromFile: {tmp_path / 'elsewhere'}}}"))
    assert "is outside the directory of the cluster config" in message
    # A link inside the config's directory is judged by what it points at.
    (configs / "innocent").symlink_to(configs / "id_ed25519")
    assert "is the SSH key of spec.hosts[0].ssh.keyPath" in refused(
        config_with(configs, "{fromFile: innocent}"))


def test_a_refused_file_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[object] = []
    real = load_module.resolve
    monkeypatch.setattr(load_module, "resolve", lambda value, base: read.append(value) or
                        real(value, base))
    refused(config_with(tmp_path, "{fromFile: id_ed25519}"))
    assert read == []


def test_a_file_beside_the_config_is_fine(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "pw").write_text("from-a-file\n")
    config = load_config(config_with(tmp_path, "{fromFile: secrets/pw}"))
    secret = config.engine_config["registries"]["configs"]["r.io"]["auth"]["password"]
    assert secret.reveal() == "from-a-file" and not secret.allow_any_path


def test_allow_any_path_is_the_explicit_opt_in_and_the_plan_carries_it(
        tmp_path: Path) -> None:
    path = config_with(tmp_path, "{fromFile: id_ed25519, allowAnyPath: true}")
    config = load_config(path)
    secret = config.engine_config["registries"]["configs"]["r.io"]["auth"]["password"]
    assert secret.allow_any_path and secret.reveal() == "id_ed25519-content"
    desired = json.loads(json.dumps(to_desired(config, SALT)))
    carried = desired["engineConfig"]["registries"]["configs"]["r.io"]["auth"]["password"]
    assert carried["secret"] == f"file:{tmp_path / 'id_ed25519'}"
    assert carried["allow_any_path"] is True and "content" not in json.dumps(desired)
    again = from_desired(desired, SALT, "plan.json")
    assert again.engine_config["registries"]["configs"]["r.io"]["auth"][
        "password"].reveal() == "id_ed25519-content"
    # Held by the plan file's schema like the config's own (allowAnyPath beside fromFile).
    plan = sample_plan()
    codec.loads(codec.dumps(plan.__class__(**{**plan.__dict__, "desired": {
        **plan.desired, "engineConfig": desired["engineConfig"]}})))
    # A plan without the opt-in is what every plan was before: no new key.
    plain = to_desired(load_config(config_with(tmp_path, "{fromFile: pw}")), SALT)
    assert set(plain["engineConfig"]["registries"]["configs"]["r.io"]["auth"][
        "password"]) == {"secret", "digest"}


def test_allow_any_path_only_beside_from_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"auth\.password"):
        load_config(config_with(tmp_path, "{fromEnv: X, allowAnyPath: true}"))


def test_apply_refuses_an_edited_plan_that_reads_a_host_key(tmp_path: Path) -> None:
    config = load_config(config_with(tmp_path, "{fromFile: pw}"))
    desired = json.loads(json.dumps(to_desired(config, SALT)))
    secret = desired["engineConfig"]["registries"]["configs"]["r.io"]["auth"]["password"]
    secret["secret"] = f"file:{tmp_path / 'id_ed25519'}"
    with pytest.raises(DesiredStateError, match=r"auth\.password: secret file .*id_ed25519 is "
                                                r"the SSH key of host 10\.0\.0\.1:22"):
        from_desired(desired, SALT, "plan.json")
    secret["secret"] = f"file:{tmp_path / '.ssh' / 'x'}"
    with pytest.raises(DesiredStateError, match=r"inside a \.ssh directory"):
        from_desired(desired, SALT, "plan.json")


def test_a_relative_config_gives_absolute_secret_sources(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan carries the source for apply, run from anywhere, and for reviewers: `pw`
    alone would say neither where nor which."""
    config_with(tmp_path, "{fromFile: pw}")
    monkeypatch.chdir(tmp_path)
    config = load_config(Path("cluster.yaml"))
    secret = config.engine_config["registries"]["configs"]["r.io"]["auth"]["password"]
    assert secret.source == f"file:{tmp_path / 'pw'}"
    (tmp_path / "id_ed25519").write_text("k\n")
    message = refused(config_with(tmp_path, "{fromFile: id_ed25519}").relative_to(tmp_path))
    assert f"secret file {tmp_path / 'id_ed25519'} is the SSH key" in message
