"""How cargoship reads the engine's own config, chart manifests and admin kubeconfig the way
rke2 and k3s do: pure parse and merge functions over data fixtures."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.config.model import ClusterConfig, Engine
from planner.desired.engine_files import desired_files, placement_of
from planner.desired.engine_merge import apiserver_overrides, overridden
from planner.facts.distro import LAYOUTS
from planner.facts.engine_config import Locations, merge_layers, parse_engine_config
from planner.facts.manifests import parse_foreign_charts
from planner.hosts.batch import FactParseError, Output
from planner.kube import api_server, own_address

MAIN = "/etc/rancher/k3s/config.yaml"
D = "/etc/rancher/k3s/config.yaml.d"
DROPIN = f"{D}/50-cargoship.yaml"


def listing(*files: tuple[str, str]) -> Output:
    lines = [f"file {len(text.encode())} {base64.b64encode(text.encode()).decode()} {path}"
             for path, text in files]
    return Output("\n".join(lines) + "\n", 0)


def test_later_files_win_and_plus_appends() -> None:
    merged = merge_layers([{"kube-apiserver-arg": ["v=2"], "node-name": "a"},
                           {"kube-apiserver-arg+": ["audit-log-maxage=3"]},
                           {"node-name": "b", "kube-apiserver-arg+": "x=1"}])
    assert merged == {"kube-apiserver-arg": ["v=2", "audit-log-maxage=3", "x=1"],
                      "node-name": "b"}


def test_node_name_from_setting_else_lowercased_hostname() -> None:
    named = parse_engine_config(listing((MAIN, "node-name: special-1\n")))
    assert named.node_name("Wrk-1") == "special-1"
    plain = parse_engine_config(listing((MAIN, "write-kubeconfig-mode: '0600'\n")))
    assert plain.node_name("Wrk-1") == "wrk-1"
    later = parse_engine_config(listing((MAIN, "node-name: a\n"), (f"{D}/9.yaml",
                                                                   "node-name: b\n")))
    assert later.node_name("x") == "b"
    assert parse_engine_config(listing((MAIN, "with-node-id: true\n"))).node_name("x") is None


def test_tls_san_as_list_or_comma_string() -> None:
    listed = parse_engine_config(listing((MAIN, "tls-san: [api.example.com, 10.0.0.5]\n")))
    assert listed.list_of("tls-san") == ["api.example.com", "10.0.0.5"]
    comma = parse_engine_config(listing((MAIN, "tls-san: 'a.example.com, b.example.com'\n")))
    assert comma.list_of("tls-san") == ["a.example.com", "b.example.com"]


def test_unreadable_config_is_a_problem_naming_the_file_not_its_content() -> None:
    broken = parse_engine_config(listing((MAIN, "token: hunter2\n  bad: [\n")))
    assert broken.problems and broken.problems[0].startswith(f"{MAIN}: not valid YAML")
    assert "hunter2" not in " ".join(broken.problems)
    assert parse_engine_config(listing((MAIN, "- a\n"))).problems == (
        f"{MAIN}: not a mapping of settings",)
    with pytest.raises(FactParseError):
        parse_engine_config(Output("garbage\n", 0))
    huge = parse_engine_config(Output(f"file 999999999 AAAA {MAIN}\n", 0))
    assert "more than an engine config holds" in huge.problems[0]


def test_a_plain_list_key_in_a_later_file_overrides_the_dropin() -> None:
    ours = {"kube-apiserver-arg+": ["audit-policy-file=/p"]}
    user = [(MAIN, {"kube-apiserver-arg": ["v=2"]})]
    assert overridden(user, DROPIN, ours) == []
    later = [*user, (f"{D}/90-user.yaml", {"kube-apiserver-arg": ["v=4"]})]
    [message] = overridden(later, DROPIN, ours)
    assert message.startswith(f"{D}/90-user.yaml sets kube-apiserver-arg after cargoship's")
    earlier = [*user, (f"{D}/10-user.yaml", {"kube-apiserver-arg": ["v=4"]})]
    assert overridden(earlier, DROPIN, ours) == []
    # rke2's scalar keys: the last one wins.
    rke2 = {"audit-policy-file": "/ours"}
    assert overridden([("/etc/rancher/rke2/config.yaml", {"audit-policy-file": "/x"})],
                      "/etc/rancher/rke2/config.yaml.d/50-cargoship.yaml", rke2) == []
    assert overridden([("/etc/rancher/rke2/config.yaml.d/99-x.yaml", {"audit-policy-file": "/x"})],
                      "/etc/rancher/rke2/config.yaml.d/50-cargoship.yaml", rke2)


def test_foreign_helm_chart_configs_are_found_by_name_and_namespace() -> None:
    manifests = "/var/lib/rancher/rke2/server/manifests"
    text = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n"
            "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\n"
            "metadata: {name: rke2-ingress-nginx, namespace: kube-system}\n"
            "spec: {valuesContent: 'secret: 1'}\n---\n"
            "kind: HelmChartConfig\nmetadata: {name: other}\n")
    found = parse_foreign_charts(listing((f"{manifests}/mine.yaml", text),
                                         (f"{manifests}/bad.yaml", "kind: HelmChartConfig\n[")))
    assert found.defining("kube-system", "rke2-ingress-nginx") == [f"{manifests}/mine.yaml"]
    assert found.defining("kube-system", "other") == [f"{manifests}/mine.yaml"]  # default ns
    assert found.defining("kube-system", "x") == []
    assert found.unreadable == (f"{manifests}/bad.yaml",)


ADMIN = {"clusters": [{"cluster": {"server": "https://127.0.0.1:6443"}}]}


def test_api_server_is_one_the_certificate_covers() -> None:
    assert api_server(ADMIN, "https://api.example.com:443", ["san"], "10.0.0.1") == (
        "https://api.example.com:443", "options.kubeconfig.server")
    assert api_server(ADMIN, None, ["api.example.com", "10.9.9.9"], "10.0.0.1") == (
        "https://api.example.com:6443", "the engine's tls-san")
    assert api_server(ADMIN, None, [], "10.0.0.1") == (
        "https://10.0.0.1:6443", "the controller's own address")
    assert api_server(ADMIN, None, [], "fd00::1")[0] == "https://[fd00::1]:6443"
    lb = {"clusters": [{"cluster": {"server": "https://lb.example.com:6443"}}]}
    assert api_server(lb, None, ["san"], "10.0.0.1") == ("https://lb.example.com:6443",
                                                        "the admin kubeconfig")


def test_own_address_never_takes_an_address_the_host_does_not_have() -> None:
    assert own_address("10.0.0.1", ["10.0.0.1"], [], "10.0.0.1") == "10.0.0.1"
    # Reached through a port forward on 127.0.0.1: its own address, not the forward's.
    assert own_address("127.0.0.1", ["127.0.0.1", "10.0.0.1"], [], "10.0.0.1") == "10.0.0.1"
    assert own_address("203.0.113.7", ["10.0.0.1", "10.1.0.1"], ["10.1.0.1"],
                       "10.0.0.1") == "10.1.0.1"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_env_files_command_line_and_files_in_the_engines_precedence() -> None:
    env = "# comment\nK3S_NODE_NAME='From-Env'\nK3S_CONFIG_FILE=\"/etc/alt/c.yaml\"\n"
    out = Output(
        f"env {len(env)} {_b64(env)} /etc/systemd/system/k3s.service.env\n"
        f"exec {_b64('/usr/local/bin/k3s server --data-dir /d --kube-apiserver-arg=v=9')} "
        "ExecStart of k3s.service\n"
        "config /etc/alt/c.yaml\n"
        + listing(("/etc/alt/c.yaml", "kube-apiserver-arg: [v=2]\n"),
                  ("/etc/alt/c.yaml.d/1.YML", "private-registry: /r.yaml\n")).stdout, 0)
    settings = parse_engine_config(out, "k3s")
    assert settings.node_name("host") == "from-env"  # no file or flag set it: the variable
    assert settings.config_from == ("K3S_CONFIG_FILE in "
                                    "/etc/systemd/system/k3s.service.env:3")
    at = settings.locations(LAYOUTS["k3s"])
    assert at == Locations("/etc/alt/c.yaml.d", "/r.yaml", "/d/server/manifests")
    # The files' items, then the command line's (which comes after them).
    assert [(a.value, a.where) for a in settings.apiserver_args] == [
        ("v=2", "/etc/alt/c.yaml:1"), ("v=9", "ExecStart of k3s.service")]
    assert settings.sources["data-dir"] == "ExecStart of k3s.service"
    named = parse_engine_config(Output(out.stdout + listing(
        ("/etc/alt/c.yaml.d/2.yaml", "node-name: File\n")).stdout, 0), "k3s")
    assert named.node_name("host") == "file"  # a file wins over the environment


def test_apiserver_flags_other_than_ours_are_overrides_wherever_they_are() -> None:
    ours = desired_files(_config("k3s"), "controller")
    dropin = next(f for f in ours if f.kind == "config-dropin")
    early = listing((MAIN, "kube-apiserver-arg:\n- v=2\n- audit-policy-file=/theirs.yaml\n"))
    found = apiserver_overrides(parse_engine_config(early, "k3s"), "k3s", dropin.path,
                                dropin.data)
    assert len(found) == 1 and found[0].startswith(
        f"{MAIN}:3: kube-apiserver-arg sets audit-policy-file=/theirs.yaml"), found
    same = listing((MAIN, "kube-apiserver-arg: [audit-policy-file="
                          "/etc/rancher/k3s/cargoship-audit-policy.yaml]\n"))
    assert apiserver_overrides(parse_engine_config(same, "k3s"), "k3s", dropin.path,
                               dropin.data) == []
    # rke2's own key, from its environment file.
    env = "RKE2_AUDIT_POLICY_FILE=/env.yaml\n"
    rke2 = desired_files(_config("rke2"), "controller")
    rke2_dropin = next(f for f in rke2 if f.kind == "config-dropin")
    settings = parse_engine_config(
        Output(f"env {len(env)} {_b64(env)} /etc/default/rke2-server\n", 0), "rke2")
    found = apiserver_overrides(settings, "rke2", rke2_dropin.path, rke2_dropin.data)
    assert found and found[0].startswith("/etc/default/rke2-server:1 (RKE2_AUDIT_POLICY_FILE)")


def test_the_k3s_dropin_keeps_a_users_own_audit_log_path() -> None:
    layout = LAYOUTS["k3s"]
    mine = parse_engine_config(listing((MAIN, "kube-apiserver-arg: [audit-log-path=/l]\n")),
                               "k3s")
    dropin = next(f for f in desired_files(_config("k3s"), "controller",
                                           placement_of(mine, layout))
                  if f.kind == "config-dropin")
    assert not [a for a in dropin.data["kube-apiserver-arg+"] if "audit-log-path" in a]
    plain = next(f for f in desired_files(_config("k3s"), "controller")
                 if f.kind == "config-dropin")
    assert [a for a in plain.data["kube-apiserver-arg+"] if "audit-log-path" in a]


def _config(distro: str) -> ClusterConfig:
    return ClusterConfig(path=Path("<test>"), name="t", hosts=(),
                         engine=Engine(distro, "v1.30.4"),
                         engine_config={"auditPolicy": {"apiVersion": "audit.k8s.io/v1",
                                                        "kind": "Policy", "rules": []}})


def test_each_engine_config_file_is_parsed_once_and_says_where_each_item_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The lines of settings and list items come from the node graph the settings were
    # built from: a second, pure-Python parse per file was most of a plan's engine-config
    # cost on every host.
    import planner.safeyaml as safeyaml

    made: list[object] = []
    real = safeyaml._Loader

    def loader(text: str) -> object:
        made.append(text)
        return real(text)

    def second_parse(*_: object, **__: object) -> None:
        raise AssertionError("an engine config file was parsed twice")

    monkeypatch.setattr(safeyaml, "_Loader", loader)
    monkeypatch.setattr("yaml.compose", second_parse)
    settings = parse_engine_config(listing(
        (MAIN, "node-label:\n- a=1\nkube-apiserver-arg:\n- x=1\n- y=2\n"),
        (f"{D}/10-b.yaml", "\n\nkube-apiserver-arg+:\n  - z=3\n")), "k3s")
    assert len(made) == 2
    assert settings.sources["node-label"] == f"{MAIN}:1"
    assert [(a.value, a.where) for a in settings.apiserver_args] == [
        ("x=1", f"{MAIN}:4"), ("y=2", f"{MAIN}:5"), ("z=3", f"{D}/10-b.yaml:4")]


@given(st.lists(st.text(alphabet="ab=-_/ \t'\"\\x.\u00e9\x0b", max_size=12), max_size=8))
@settings(max_examples=300, deadline=None, database=None)
def test_command_flags_split_a_line_as_shlex_does(words: list[str]) -> None:
    import shlex

    from planner.facts.engine_sources import command_flags

    line = "/usr/local/bin/rke2 server " + " ".join(words)
    try:
        expected = shlex.split(line, comments=False)
    except ValueError:
        expected = line.split()
    expected = [w for w in expected[2:] if not w.startswith(("2>", ">", "<", "&"))]
    assert command_flags(line) == expected
