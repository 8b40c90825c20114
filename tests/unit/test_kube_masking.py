"""The kubeconfig diff in a plan shows structure, never a credential of any user entry."""

from __future__ import annotations

import yaml

from planner.kube import masked


def test_every_credential_of_every_user_entry_is_masked() -> None:
    local = {"users": [
        {"name": "oidc", "user": {"auth-provider": {"name": "oidc", "config": {
            "id-token": "sec-id", "refresh-token": "sec-refresh", "client-secret": "sec-cs"}}}},
        {"name": "aws", "user": {"exec": {"command": "aws", "apiVersion": "v1",
                                          "args": ["--token", "sec-arg"],
                                          "env": [{"name": "AWS_SECRET", "value": "sec-env"}]}}},
        {"name": "basic", "user": {"username": "bob", "password": "sec-pw",
                                   "client-key-data": "sec-key", "token": "sec-token"}},
    ], "clusters": [{"name": "c", "cluster": {"server": "https://c:6443"}}]}
    shown = yaml.safe_dump(masked(local))
    assert "sec-" not in shown
    # What isn't a credential stays readable: the diff is still useful.
    for plain in ("bob", "aws", "AWS_SECRET", "oidc", "https://c:6443"):
        assert plain in shown


def test_credential_like_keys_outside_user_entries_are_masked_too() -> None:
    # A kubeconfig-style file where credentials sit where no user entry is: a cluster's
    # bootstrap token, a proxy password, an extension's secret.
    local = {"clusters": [{"name": "c", "cluster": {
        "server": "https://c:6443", "bootstrap-token": "sec-boot", "proxy-password": "sec-px",
        "extensions": [{"name": "x", "extension": {"clientSecret": "sec-ext",
                                                   "apiToken": "sec-api"}}]}}],
        "preferences": {"token": "sec-pref"}}
    shown = yaml.safe_dump(masked(local))
    assert "sec-" not in shown
    assert "https://c:6443" in shown and "bootstrap-token" in shown
