"""Every choice apply will obey is shown to the reviewer (issue 25, point 4), through the
`cargoship` command against lab hosts.

A probe signed plans whose drain options and worker concurrency differed from the defaults:
apply obeyed them (one deleted an unmanaged pod's emptyDir data), while `show`, `--markdown`
and `--full` printed the same as for a default plan. And a secret whose source became
cargoship's own SSH key read `"***" -> "*** (changed)"`. Here: those choices are flagged in
every view, a default plan flags none, and a secret file that is the lab's SSH key is
refused at load unless the config opts in, when the plan shows where it comes from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec, Lab

pytestmark = pytest.mark.reliability("trust: the reviewer sees every choice apply obeys")

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
MIRROR = "https://mirror.lab.internal:5000"
FLAGGED = ("drain.force: true", "drain.deleteEmptyDirData: true",
           "drain.gracePeriodSeconds: 5", "concurrency.workers: 4")
REGISTRY = "reg.lab.internal"
PASSWORD = f'configs."{REGISTRY}".auth.password'


def views(plan: Path) -> dict[str, str]:
    shown = {}
    for name, flags in (("show", []), ("show --markdown", ["--markdown"]),
                        ("show --full", ["--full"]),
                        ("show --markdown --full", ["--markdown", "--full"])):
        result = cargoship("show", plan, *flags)
        assert result.returncode == 0, result.stderr
        shown[name] = result.stdout
    return shown


def line_with(text: str, needle: str) -> str:
    return next((line for line in text.splitlines() if needle in line), "")


def test_drain_and_concurrency_choices_are_flagged_in_every_view(
        lab_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lab: Lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    # A change that drains a node: the drain options are about to be used.
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")

    def options(value: dict[str, Any]) -> Path:
        path = tmp_path / f"cluster-{len(list(tmp_path.glob('cluster-*')))}.yaml"
        path.write_text((lab.dir / "cluster.yaml").read_text())
        return edit_config(path, lambda d: d["spec"].update(options=value))

    risky = options({"drain": {"force": True, "deleteEmptyDirData": True,
                               "gracePeriodSeconds": 5},
                     "concurrency": {"workers": 4}})
    plan = tmp_path / "risky.json"
    planned = cargoship("plan", "-c", risky, "-out", plan)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "(drain + restart) on wrk-1" in planned.stdout
    for name, text in {"plan": planned.stdout, **views(plan)}.items():
        assert "Apply will, as this plan says (4 options NOT the default)" in text, name
        for setting in FLAGGED:
            line = line_with(text, setting)
            assert "NOT the default" in line, (name, setting, text)
    shown = views(plan)["show"]
    assert ("  ! drain.force: true  (NOT the default, which is false: evicts pods no "
            "controller manages; they are deleted and never recreated)") in shown
    assert "their emptyDir data is deleted" in line_with(shown, "drain.deleteEmptyDirData")
    assert "4 workers are drained and restarted at once" in line_with(shown,
                                                                      "concurrency.workers")
    # Right above the summary, where a terminal leaves it.
    block = shown.split("Apply will, as this plan says", 1)[1]
    assert block.split("\n\n", 1)[1].startswith("Plan: 1 file to change")
    # The defaults in one line, every other option by name (--full: one line each).
    assert "at their defaults: drain.timeoutSeconds: 300" in shown
    assert "    readyTimeoutSeconds: 300  (default: " in views(plan)["show --full"]
    data = json.loads(cargoship("show", plan, "--json").stdout)
    assert {k: data["desired"]["options"][k] for k in (
        "drain_force", "drain_delete_emptydir_data", "drain_grace_period",
        "worker_concurrency")} == {"drain_force": True, "drain_delete_emptydir_data": True,
                                   "drain_grace_period": 5, "worker_concurrency": 4}

    default = tmp_path / "default.json"
    planned = cargoship("plan", "-c", options({}), "-out", default)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    for name, text in {"plan": planned.stdout, **views(default)}.items():
        assert "NOT the default" not in text, (name, text)
        assert "Apply will, as this plan says (every option at its default)" in text, name
        assert "drain.force" in text and "concurrency.workers" in text, name


def test_a_secret_read_from_the_ssh_key_is_refused_unless_allowed(
        lab_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lab: Lab = lab_factory([HostSpec("ctl-1", "controller")])
    key = str(lab.dir / "id_ed25519")
    assert yaml.safe_load((lab.dir / "cluster.yaml").read_text())["spec"]["hosts"][0][
        "ssh"]["keyPath"] == key
    # The registry's password was REG_PASS's until now.
    live = {"mirrors": {"docker.io": {"endpoint": [MIRROR]}},
            "configs": {REGISTRY: {"auth": {"username": "robot", "password": "old-pass"}}}}
    lab.exec("ctl-1", f"cat > {REGISTRIES} && chmod 600 {REGISTRIES}",
             input=yaml.safe_dump(live))
    config = lab.dir / "cluster-secret.yaml"  # beside the key: only the key rule applies

    def password(value: dict[str, Any]) -> Path:
        config.write_text((lab.dir / "cluster.yaml").read_text())
        return edit_config(config, lambda d: d["spec"]["engineConfig"]["registries"].update(
            configs={REGISTRY: {"auth": {"username": "robot", "password": value}}}))

    rotated = cargoship("plan", "-c", password({"fromEnv": "REG_PASS"}),
                        env={"REG_PASS": "new-pass"})
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    assert f'~ {PASSWORD}: "***" -> "*** (changed)"  (from env REG_PASS)' in rotated.stdout
    assert f"    registries.{PASSWORD}: env REG_PASS" in rotated.stdout

    password({"fromFile": key})
    for command in ("plan", "validate"):
        refused = cargoship(command, "-c", config)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        lines = refused.stderr.splitlines()
        assert len(lines) == 1, refused.stderr
        assert lines[0].startswith(f"error: {config}:") and "auth.password" in lines[0]
        assert f"secret file {key} is the SSH key of spec.hosts[0].ssh.keyPath" in lines[0]
        assert "allowAnyPath: true" in lines[0]

    plan = tmp_path / "plan.json"
    allowed = cargoship("plan", "-c", password({"fromFile": key, "allowAnyPath": True}),
                        "-out", plan)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    secret_line = ("allowAnyPath: true, NOT the default: apply reads this file although it "
                   "is an SSH key this plan connects with")
    for name, text in {"plan": allowed.stdout, **views(plan)}.items():
        assert f'"***" -> "*** (changed)"  (from file {key})' in text, (name, text)
        assert secret_line in line_with(text, f"registries.{PASSWORD}"), (name, text)
    carried = json.loads(plan.read_text())["desired"]["engineConfig"]["registries"][
        "configs"][REGISTRY]["auth"]["password"]
    assert carried["secret"] == f"file:{key}" and carried["allow_any_path"] is True
    private = Path(key).read_text().strip().splitlines()[1]  # a line of the key itself
    for text in (plan.read_text(), allowed.stdout, *views(plan).values()):
        assert private not in text
