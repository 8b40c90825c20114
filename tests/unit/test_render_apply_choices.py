"""Every choice apply will obey is shown to the reviewer (issue 25, point 4): the plan's
options in an "Apply will" block of text, markdown and --full, values that are not the
default flagged with what they do; every secret's source, never its value, in the block
and beside a changed secret's key."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from typing import Any

import pytest

from planner.config.model import Options
from planner.plan import codec
from planner.plan.model import KeyChange, Notice, Plan
from planner.render import View, render_markdown, render_text
from planner.render.choices import listed_fields
from tests.unit.test_plan_codec import sample_plan

RISKY = {"drain_force": True, "drain_delete_emptydir_data": True, "drain_grace_period": 5,
         "worker_concurrency": 4}
FLAGGED = ("drain.force: true", "drain.deleteEmptyDirData: true",
           "drain.gracePeriodSeconds: 5", "concurrency.workers: 4")
KEY = "/work/lab/id_ed25519"
PASSWORD = 'configs."r.io".auth.password'


def plan_with(options: dict[str, Any] | None = None, secret: dict[str, Any] | None = None,
              ) -> Plan:
    plan = sample_plan()
    desired = json.loads(json.dumps(plan.desired))
    desired["options"] = {} if options is None else options
    if secret is not None:
        desired["engineConfig"]["registries"]["configs"]["r.io"]["auth"]["password"] = secret
    desired["hosts"] = [{"index": 0, "role": "controller", "profile": None, "hostname": None,
                         "private_interface": None, "private_address": None,
                         "ssh": {"address": "10.0.0.1", "port": 22, "user": "root",
                                 "key_path": KEY, "known_hosts": None, "bastion": None}}]
    change = replace(plan.changes[0], key_changes=(
        KeyChange("change", PASSWORD, '"***"', '"*** (changed)"'),))
    return replace(plan, desired=desired, changes=(change,), warnings=())


def every_view(plan: Plan) -> dict[str, str]:
    return {"text": render_text(plan), "full": render_text(plan, View(full=True)),
            "markdown": render_markdown(plan),
            "markdown full": render_markdown(plan, View(full=True))}


def test_every_option_of_the_model_is_accounted_for() -> None:
    """An option added to the model without a line here would be obeyed unseen."""
    assert listed_fields() == {f.name for f in fields(Options)}


def test_options_that_are_not_the_default_are_flagged_in_every_view() -> None:
    for view, text in every_view(plan_with(RISKY)).items():
        for setting in FLAGGED:
            line = next((x for x in text.splitlines() if setting in x), "")
            assert "NOT the default" in line, (view, setting, text)
        # Each once, and the heading counts them.
        assert text.count("NOT the default") == len(FLAGGED) + 1, view
        assert "4 options NOT the default" in text, view
    text = render_text(plan_with(RISKY))
    assert ("  ! drain.force: true  (NOT the default, which is false: evicts pods no "
            "controller manages; they are deleted and never recreated)") in text
    assert "emptyDir data is deleted" in text and "5 s to stop" in text
    assert "up to 4 workers are drained and restarted at once" in text
    # The defaults in one line (wrapped), each name with its value, never split apart.
    assert "at their defaults: drain.timeoutSeconds: 300, readyTimeoutSeconds: 300," in text
    assert "ssh.connectTimeoutSeconds: 10" in text


def test_a_default_plan_flags_nothing_and_still_lists_every_option() -> None:
    for view, text in every_view(plan_with({})).items():
        assert "NOT the default" not in text, view
        assert "every option at its default" in text, view
        for name in ("drain.force", "drain.deleteEmptyDirData", "drain.gracePeriodSeconds",
                     "drain.timeoutSeconds", "concurrency.workers", "concurrency.hosts",
                     "readyTimeoutSeconds", "ssh.connectTimeoutSeconds",
                     "ssh.commandTimeoutSeconds", "validation.maxClockSkewSeconds",
                     "validation.checkFirewall", "kubeconfig.enabled", "kubeconfig.server",
                     "labelProfiles"):
            assert name in text, (view, name)
    full = render_text(plan_with({}), View(full=True))
    assert ("    drain.gracePeriodSeconds: each pod's own  (default: each evicted pod gets its "
            "own terminationGracePeriodSeconds)") in full
    assert "--lock-timeout" in full  # what is not in the plan, said so
    assert "the one whose etcd member leads when apply starts goes last" in full


def test_an_option_the_plan_states_at_its_default_is_not_flagged() -> None:
    stated = {f.name: f.default for f in fields(Options)}
    stated["kubeconfig_path"] = "/root/.kube/config"  # as the loader expands it
    assert "NOT the default" not in render_text(plan_with(json.loads(json.dumps(
        stated, default=str))))


@pytest.mark.parametrize(("option", "value", "says"), [
    ("ready_timeout", 20, "not freshly Ready within 20 s is rolled back"),
    ("drain_timeout", 30, "a drain not done in 30 s"),
    ("drain_grace_period", 0, "killed at once"),
    ("connect_timeout", 2.5, "2.5 s to connect to a host"),
    ("command_timeout", 5, "5 s for each remote command"),
    ("host_concurrency", 8, "up to 8 hosts"),
    ("max_clock_skew", 300, "more than 300 s off the median"),
    ("check_firewall", False, "firewall rules are not checked"),
    ("kubeconfig_server", "https://api.example.com:6443", "go to https://api.example.com:6443"),
    ("label_profiles", True, "labels each node with its profile"),
])
def test_each_option_says_what_apply_does_with_it(option: str, value: Any, says: str) -> None:
    text = render_text(plan_with({option: value}))
    line = next(x for x in text.splitlines() if says in x)
    assert line.startswith("  ! ") and "NOT the default" in line


def test_kubeconfig_merge_names_the_file_and_context() -> None:
    text = render_text(plan_with({"kubeconfig_enabled": True,
                                  "kubeconfig_path": "/home/ci/.kube/config",
                                  "kubeconfig_context": "prod"}))
    assert ("! kubeconfig.enabled: true  (NOT the default, which is false: merges the "
            "cluster's admin credentials into /home/ci/.kube/config as context prod)") in text


def test_secret_sources_are_listed_and_shown_beside_a_changed_secret() -> None:
    plan = plan_with(secret={"secret": "env:REG_PASS", "digest": "hmac-sha256:ab"})
    text = render_text(plan)
    assert f'~ {PASSWORD}: "***" -> "*** (changed)"  (from env REG_PASS)' in text
    assert '    registries.configs."r.io".auth.password: env REG_PASS' in text
    assert "NOT the default" not in text
    markdown = render_markdown(plan)
    assert f'! {PASSWORD}: "***" -> "*** (changed)"  (from env REG_PASS)' in markdown
    assert '- `registries.configs."r.io".auth.password`: env `REG_PASS`' in markdown


def test_a_secret_read_from_an_ssh_key_is_flagged() -> None:
    allowed = plan_with(secret={"secret": f"file:{KEY}", "digest": "hmac-sha256:ab",
                                "allow_any_path": True})
    for view, text in every_view(allowed).items():
        assert f"(from file {KEY})" in text, view
        line = next(x for x in text.splitlines() if "registries.configs" in x)
        assert ("allowAnyPath: true, NOT the default: apply reads this file although it is "
                "an SSH key this plan connects with") in line, (view, line)
    # Without the opt-in (a plan edited by hand): said, and said that apply refuses it.
    edited = plan_with(secret={"secret": "file:/root/.ssh/id_rsa", "digest": "x"})
    assert ("it is inside a .ssh directory: apply refuses it without allowAnyPath"
            in render_text(edited))


def test_the_block_survives_the_plan_file_and_hostile_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = plan_with({**RISKY, "kubeconfig_enabled": True,
                      "kubeconfig_path": "/tmp/k`x<b>\u202e/config"},
                     secret={"secret": f"file:{KEY}", "digest": "hmac-sha256:ab",
                             "allow_any_path": True})
    path = tmp_path / "plan.json"
    codec.write(plan, path)
    again = codec.read(path)
    assert again.desired["engineConfig"]["registries"]["configs"]["r.io"]["auth"][
        "password"]["allow_any_path"] is True
    assert render_text(again) == render_text(plan)
    text, markdown = render_text(again), render_markdown(again)
    assert "\u202e" not in text and "\u202e" not in markdown
    assert "<b>" not in markdown and "&lt;b&gt;" in markdown


def test_no_block_for_a_plan_apply_refuses() -> None:
    plan = replace(plan_with(RISKY), applyable=False,
                   problems=(Notice(None, None, "broken"),))
    assert "Apply will" not in render_text(plan) and "Apply will" not in render_markdown(plan)


def test_the_plan_schema_documents_every_option_and_the_secret_source() -> None:
    import schemas

    plan_schema = schemas.load("plan.schema.json")
    options = plan_schema["$defs"]["desiredOptions"]
    assert set(options["properties"]) == {f.name for f in fields(Options)}
    for name, prop in options["properties"].items():
        assert prop.get("description", "").startswith("options."), name
        assert "default" in prop["description"], name
    engine_config = plan_schema["properties"]["desired"]["properties"]["engineConfig"]
    assert "allow_any_path" in engine_config["description"]
    assert '"file:PATH"' in engine_config["description"]
