"""Changes by key path: what a YAML file change adds, removes and changes, secrets masked."""

from __future__ import annotations

import yaml

from planner.config.secrets import Secret
from planner.desired.compare import LiveFile, compare
from planner.desired.engine_files import desired_files
from planner.desired.keys import format_path, key_changes
from planner.plan.model import KeyChange
from tests.unit.test_desired import REGISTRIES, SALT, config


def test_changed_added_and_removed_leaves_by_path() -> None:
    before = {"mirrors": {"docker.io": {"endpoint": ["https://a", "https://x"]}}, "n": 1}
    after = {"mirrors": {"docker.io": {"endpoint": ["https://b"]},
                         "quay.io": {"endpoint": ["https://q"], "rewrite": {}}}, "n": "1"}
    assert key_changes(before, after) == (
        KeyChange("change", 'mirrors."docker.io".endpoint[0]', '"https://a"', '"https://b"'),
        KeyChange("remove", 'mirrors."docker.io".endpoint[1]', '"https://x"', None),
        KeyChange("add", 'mirrors."quay.io".endpoint[0]', None, '"https://q"'),
        KeyChange("add", 'mirrors."quay.io".rewrite', None, "{}"),
        KeyChange("change", "n", "1", '"1"'),
    )


def test_key_order_and_formatting_never_count() -> None:
    assert key_changes(yaml.safe_load("{b: 1, a: [x, y]}"),
                       yaml.safe_load("a:\n- x\n- 'y'\nb: 1\n")) == ()


def test_a_scalar_that_became_a_mapping_and_a_new_document() -> None:
    assert key_changes({"a": 1}, {"a": {"b": 2}}) == (
        KeyChange("remove", "a", "1", None), KeyChange("add", "a.b", None, "2"))
    assert key_changes(None, {"k": [1]}) == (KeyChange("add", "k[0]", None, "1"),)


def test_paths_quote_what_would_read_ambiguously() -> None:
    assert format_path(("configs", "r.example.com", "auth", "password")) == \
        'configs."r.example.com".auth.password'
    assert format_path(("a b", 3, 1, "x\"y")) == '"a b"[3][1]."x\\"y"'
    assert format_path(()) == "(document)"


def test_a_changed_secret_is_masked_as_in_the_diff() -> None:
    registries = {**REGISTRIES, "configs": {"m.example.com": {"auth": {
        "username": Secret("env:U", "robot-2"), "password": Secret("env:P", "pw-1")}}}}
    [wanted] = desired_files(config(registries=registries), "worker")
    live = yaml.safe_dump({**REGISTRIES, "configs": {"m.example.com": {"auth": {
        "username": "robot-1", "password": "old-secret-value"}}}})
    change = compare(wanted, LiveFile(wanted.path, True, live.encode(), 0o600, "root"), SALT)
    assert change is not None
    assert change.keys == (
        KeyChange("change", 'configs."m.example.com".auth.password', '"***"',
                  '"*** (changed)"'),
        KeyChange("change", 'configs."m.example.com".auth.username', '"***"',
                  '"*** (changed)"'))
    text = repr(change.keys)
    for secret in ("robot-1", "robot-2", "pw-1", "old-secret-value"):
        assert secret not in text


def test_chart_values_by_key_inside_values_content() -> None:
    cfg = config(charts={"traefik": {"values": {"a": 1, "b": [1, 2]}}})
    [wanted] = desired_files(cfg, "controller")
    live = {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
            "metadata": {"namespace": "kube-system", "name": "traefik"},
            "spec": {"valuesContent": "a: 2\nb: [1, 2, 3]\n"}}
    change = compare(wanted, LiveFile(wanted.path, True, yaml.safe_dump(live).encode(),
                                      0o600, "root"), SALT)
    assert change is not None and change.keys == (
        KeyChange("change", "spec.valuesContent.a", "2", "1"),
        KeyChange("remove", "spec.valuesContent.b[2]", "3", None))
    # The diff compares values with values too, not a text block with a mapping.
    assert "-    a: 2\n+    a: 1\n" in change.diff and "valuesContent: |" not in change.diff


def test_created_and_unreadable_files_list_what_they_will_hold() -> None:
    [wanted] = desired_files(config(registries=REGISTRIES), "worker")
    created = compare(wanted, LiveFile(wanted.path, False), SALT)
    assert created is not None
    assert KeyChange("add", 'configs."m.example.com".auth.password', None, '"***"') in \
        created.keys
    junk = compare(wanted, LiveFile(wanted.path, True, b"{{{ password: leaked", 0o600, "root"),
                   SALT)
    assert junk is not None and all(k.op == "add" for k in junk.keys)
    assert "leaked" not in repr(junk.keys)
