"""Terraform's habits and other everyday ones, through the command: global options on
either side of the subcommand, a default config, "did you mean", Terraform's flag names,
a closed pipe, -v for cargoship's lines only, and -out checked before any host."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship_argv, edit_config
from tests.lab import Lab

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(*args: str | Path, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*cargoship_argv(), *map(str, args)], capture_output=True,
                            text=True, cwd=cwd, env={**os.environ, **(env or {})}, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.fixture
def k3s_config(tmp_path: Path) -> Path:
    config = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLES / "k3s-cluster.yaml", config)
    return config


def test_global_options_before_or_after_the_subcommand(k3s_config: Path) -> None:
    before = run("-v", "--no-color", "validate", "-c", k3s_config)
    after = run("validate", "-c", k3s_config, "--no-color", "-v")
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert before.stdout == after.stdout
    log = k3s_config.parent / "debug.log"
    assert run("schema", "--log-file", log).returncode == 0
    assert log.exists()


def test_config_defaults_to_cluster_yaml_then_the_environment(k3s_config: Path,
                                                              tmp_path: Path) -> None:
    here = run("validate", cwd=k3s_config.parent)
    assert here.returncode == 0 and "valid (3 host(s)" in here.stdout, here.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    none = run("validate", cwd=elsewhere, env={"CARGOSHIP_CONFIG": ""})
    assert none.returncode == 1
    assert none.stderr == ("error: no cluster config: ./cluster.yaml (the default) does not "
                           "exist; give one with -c FILE or set CARGOSHIP_CONFIG\n")
    from_env = run("validate", cwd=elsewhere, env={"CARGOSHIP_CONFIG": str(k3s_config)})
    assert from_env.returncode == 0 and "valid (3 host(s)" in from_env.stdout


def test_did_you_mean_and_terraform_spellings() -> None:
    command = run("paln")
    assert command.returncode == 1 and "did you mean 'plan'?" in command.stderr
    assert len(command.stderr.splitlines()) == 1
    flag = run("apply", "plan.json", "--confrim")
    assert flag.returncode == 1 and "did you mean '--confirm' for '--confrim'?" in flag.stderr
    terraform = run("apply", "plan.json", "-auto-approve")
    assert terraform.returncode == 1
    assert terraform.stderr == ("cargoship: error: -auto-approve is Terraform's spelling; "
                                "cargoship's is --confirm\n")


def closed_pipe(*args: str | Path) -> tuple[int, str]:
    """Run with stdout a pipe whose reader is already gone (`| head` that has finished)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([*cargoship_argv(), *map(str, args)], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    return proc.returncode, proc.stderr


def test_a_closed_pipe_ends_quietly() -> None:
    for args in (["schema"], ["completion", "fish"]):
        code, stderr = closed_pipe(*args)
        assert stderr == "" and code == 141, (args, stderr)


def test_against_a_lab_pipe_verbose_and_out(healthy_lab: Lab, tmp_path: Path) -> None:
    config = healthy_lab.dir / "cluster.yaml"
    code, stderr = closed_pipe("plan", "-c", config)
    assert stderr == "" and code == 141, stderr

    verbose = run("plan", "-c", config, "-v")
    assert verbose.returncode == 0, verbose.stderr
    logged = [line for line in verbose.stderr.splitlines()
              if re.match(r"(DEBUG|INFO|WARNING|ERROR) ", line)]
    assert any(line.startswith("DEBUG cargoship.") for line in logged), verbose.stderr
    assert all(line.split()[1].startswith("cargoship.") for line in logged), logged
    for noise in ("paramiko", "urllib3", "kubernetes", "fabric", "invoke"):
        assert noise not in verbose.stderr

    # Bad -out targets are refused with one line, and no plan is made.
    for out, why in ((tmp_path / "missing" / "plan.json", "No such file or directory"),
                     (tmp_path, "Is a directory"),
                     (Path("/proc/plan.json"), "cannot write /proc/plan.json: ")):
        refused = run("plan", "-c", config, "-out", out)
        assert refused.returncode == 1 and why in refused.stderr, refused.stderr
        assert len(refused.stderr.splitlines()) == 1
        assert refused.stdout == ""


def test_unwritable_out_is_refused_before_any_host_is_contacted(healthy_lab: Lab,
                                                                tmp_path: Path) -> None:
    # Every host of this config is one listening socket: any connection attempt shows.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    config = tmp_path / "cluster.yaml"
    shutil.copy(healthy_lab.dir / "cluster.yaml", config)

    def point_at_listener(data: dict) -> None:  # type: ignore[type-arg]
        for host in data["spec"]["hosts"]:
            host["ssh"].update(address="127.0.0.1", port=port)
        data["spec"]["hosts"] = data["spec"]["hosts"][:1]

    edit_config(config, point_at_listener)
    try:
        refused = run("plan", "-c", config, "-out", tmp_path / "no" / "plan.json")
        assert refused.returncode == 1 and "No such file or directory" in refused.stderr
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
