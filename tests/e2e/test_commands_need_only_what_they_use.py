"""Commands read only what they use, through the command on lab hosts: `show` a plan in an
empty environment; `history` lists the records without the config's secrets (and says the
match was not checked); `force-unlock` needs no secret at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.lab import HostSpec

REGISTRIES = "/etc/rancher/rke2/registries.yaml"


def test_commands_need_only_what_they_use(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    config = tmp_path / "cluster.yaml"
    shutil.copy(lab.dir / "cluster.yaml", config)

    def with_secret(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["engineConfig"]["registries"]["configs"] = {
            "mirror.lab.internal:5000": {"auth": {"username": "robot",
                                                   "password": {"fromEnv": "MIRROR_PW"}}}}
        data["spec"]["options"].update(readyTimeoutSeconds=20, drain={"timeoutSeconds": 10})

    edit_config(config, with_secret)
    secret = {"MIRROR_PW": "pw-for-the-mirror"}
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", config, "-out", plan_file, env=secret)
    assert made.returncode == 0, made.stdout + made.stderr
    applied = cargoship("apply", plan_file, "--confirm", env=secret, timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr

    # show: offline, a plan file is all it reads; an empty environment is enough.
    shown = subprocess.run([*cargoship_argv(), "show", str(plan_file)], capture_output=True,
                           text=True, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "pw-for-the-mirror" not in shown.stdout

    no_secret = {k: v for k, v in os.environ.items() if k != "MIRROR_PW"}
    history = subprocess.run([*cargoship_argv(), "history", "-c", str(config)],
                             capture_output=True, text=True, env=no_secret, timeout=120)
    assert history.returncode == 0, history.stdout + history.stderr
    plan_id = json.loads(plan_file.read_text())["plan_id"]
    assert f"plan {plan_id}" in history.stdout
    assert ("Whether the hosts still match the desired config was not checked: "
            in history.stdout) and "environment variable MIRROR_PW is not set" in history.stdout
    full = cargoship("history", "-c", config, env=secret)
    assert "The hosts match the desired config now." in full.stdout, full.stdout

    lab.exec("wrk-1", "mkdir -p /run/cargoship && echo '{\"id\": \"dead02\", \"holder\": "
                      "\"x@y\"}' > /run/cargoship/lock")
    unlocked = subprocess.run([*cargoship_argv(), "force-unlock", "-c", str(config), "dead02",
                               "--confirm"], capture_output=True, text=True, env=no_secret,
                              timeout=120)
    assert unlocked.returncode == 0, unlocked.stdout + unlocked.stderr
    assert "Removed lock dead02 from 1 host(s)" in unlocked.stdout
    # Planning does need the secret, and says which.
    plan = subprocess.run([*cargoship_argv(), "plan", "-c", str(config)], capture_output=True,
                          text=True, env=no_secret, timeout=120)
    assert plan.returncode == 1 and "environment variable MIRROR_PW is not set" in plan.stderr
