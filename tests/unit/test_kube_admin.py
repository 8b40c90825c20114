"""A host's admin kubeconfig is reduced to what cargoship uses (planner/kube.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from planner.kube import KubeconfigError, named_entries, parse_admin


def admin(**user: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "default",
            "clusters": [{"name": "default", "cluster": {
                "server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E=",
                "proxy-url": "http://evil:3128", "certificate-authority": "/etc/passwd",
                "insecure-skip-tls-verify": True}, "extensions": [{"name": "x"}]}],
            "users": [{"name": "default", "user": {
                "client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ", **user}}],
            "contexts": [{"name": "default", "context": {"cluster": "default",
                                                         "user": "default",
                                                         "namespace": "kube-system"}}]}


def test_only_the_server_ca_and_inline_credentials_are_kept() -> None:
    parsed = parse_admin(json.dumps(admin(
        exec={"command": "/bin/sh", "args": ["-c", "id"]},
        **{"auth-provider": {"name": "oidc"}, "client-key": "/root/.ssh/id_rsa",
           "tokenFile": "/etc/shadow", "as": "system:admin"})))
    assert parsed["clusters"] == [{"name": "default", "cluster": {
        "server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="}}]
    assert parsed["users"] == [{"name": "default", "user": {
        "client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}}]
    assert parsed["contexts"][0]["context"] == {"cluster": "default", "user": "default"}
    # What merge-kubeconfig writes into the operator's kubeconfig comes from this alone.
    entries = named_entries(parsed, "lab")
    assert set(entries["users"]["user"]) == {"client-certificate-data", "client-key-data"}


def test_a_token_alone_is_enough() -> None:
    config = admin(token="abc")
    for key in ("client-certificate-data", "client-key-data"):
        del config["users"][0]["user"][key]
    assert parse_admin(json.dumps(config))["users"][0]["user"] == {"token": "abc"}


@pytest.mark.parametrize(("change", "said"), [
    (lambda c: c["users"][0]["user"].clear() or c["users"][0]["user"].update(
        exec={"command": "x"}), "no inline client certificate and key, nor a token "
                                "(not used: exec)"),
    (lambda c: c["clusters"][0]["cluster"].pop("certificate-authority-data"), "no inline CA"),
    (lambda c: c["clusters"][0]["cluster"].update(server="http://1.2.3.4:6443"),
     "not an https URL"),
    (lambda c: c["users"][0]["user"].update({"client-key-data": "$(id)"}),
     "user.client-key-data is not base64 data"),
    (lambda c: c["users"][0]["user"].update(token=["a"]), "user.token is not a string"),
])
def test_what_cannot_be_used_safely_is_refused(change: Any, said: str) -> None:
    config = admin()
    change(config)
    with pytest.raises(KubeconfigError) as caught:
        parse_admin(json.dumps(config))
    assert said in str(caught.value)
