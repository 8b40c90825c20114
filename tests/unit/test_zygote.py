"""The tests' forked `cargoship` (tests/e2e/zygote.py) answers as the installed script does:
the same exit status, stdout and stderr for the same argv, environment and directory, and
a command out of time is killed as subprocess.run kills one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli import ZYGOTE, cargoship
from tests.stalling_listener import StallingListener


@pytest.mark.parametrize("args", [
    ("--version",),
    ("--help",),
    ("plan", "--no-such-flag"),
    ("plan", "-c", "missing.yaml"),
    ("show", "plan.json"),
])
def test_a_forked_command_answers_as_the_script_does(args: tuple[str, ...], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths are the command's working directory's
    (tmp_path / "plan.json").write_text("{not a plan")
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "NO_COLOR": "1"}
    forked = cargoship(*args, env=env)
    script = cargoship(*args, env=env, exec_=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == \
        (script.returncode, script.stdout, script.stderr)


def test_the_environment_is_the_commands_own(tmp_path: Path) -> None:
    # Not the zygote's: a variable set for one command only is seen by that command.
    path = tmp_path / "cluster.yaml"
    path.write_text("hosts: [")
    result = cargoship("plan", env={"CARGOSHIP_CONFIG": str(path)})
    script = cargoship("plan", env={"CARGOSHIP_CONFIG": str(path)}, exec_=True)
    assert (result.returncode, result.stderr) == (script.returncode, script.stderr)


def test_a_command_out_of_time_is_killed(tmp_path: Path) -> None:
    listener = StallingListener("silent")  # the plan's host never says a word
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER.format(port=listener.port, key=tmp_path / "key"))
    (tmp_path / "key").write_text("")
    try:
        with pytest.raises(subprocess.TimeoutExpired) as caught:
            result = ZYGOTE.run(["cargoship", "plan", "-c", str(config)], {**os.environ},
                                timeout=1)
            pytest.fail(f"ended in time: {result}")
        listener.wait_accepted(1)
        # Where it hung, asked of it before the kill (SIGUSR1: every thread's stack).
        stacks = str(caught.value.stderr)
        assert "most recent call first" in stacks and "cargoship" in stacks, stacks
        # ... and, last, a line per thread in cargoship's code: the end of a long report
        # (all CI keeps) still says where it hung.
        summary = stacks.rsplit("---- the hung command, in short ----", 1)[1]
        assert re.search(r"threads in cargoship's code, innermost first:\n  .*"
                         r"\((planner|cargoship)/[a-z_/]+\.py:\d+\)", summary), summary
    finally:
        listener.close()


CLUSTER = """\
apiVersion: cargoship/v1
kind: Cluster
metadata: {{name: stalls}}
spec:
  engine: {{distro: k3s, version: v1.30.4+k3s1}}
  hosts:
    - role: controller
      ssh: {{address: 127.0.0.1, port: {port}, user: root, keyPath: {key}}}
  options: {{ssh: {{connectTimeoutSeconds: 60}}}}
"""
