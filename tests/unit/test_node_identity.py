"""A node is touched for a host only when its InternalIP is one of the host's addresses."""

from __future__ import annotations

import pytest

from executor.node_identity import NodeIdentityError, check

NODE = {"status": {"addresses": [{"type": "Hostname", "address": "wrk-1"},
                                 {"type": "InternalIP", "address": "10.0.0.21"}]}}


def test_the_hosts_own_node_passes() -> None:
    check(NODE, "wrk-1", "wrk-1 (10.0.0.21)", frozenset({"10.0.0.21", "192.0.2.1"}))


def test_another_hosts_node_is_refused_naming_both_sides() -> None:
    with pytest.raises(NodeIdentityError, match=r"node ctl-1 is not wrk-1's: its InternalIP "
                                                r"10\.0\.0\.21 is none of the host's "
                                                r"addresses \(10\.0\.0\.9\)"):
        check(NODE, "ctl-1", "wrk-1", frozenset({"10.0.0.9"}))


def test_a_node_without_an_internal_ip_is_never_taken_for_any_host() -> None:
    with pytest.raises(NodeIdentityError, match="has no InternalIP"):
        check({"status": {}}, "wrk-1", "wrk-1", frozenset({"10.0.0.21"}))
