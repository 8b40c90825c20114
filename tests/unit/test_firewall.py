"""Firewall fact: FIREWALL_SCRIPT's listing -> which engine ports each tool blocks, and why.

Fixtures named *.real.* were captured from real nft/iptables in throwaway network namespaces
(fixtures/firewall/capture.sh); the firewalld and ufw ones are written after those tools'
output, as neither runs in a namespace.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from planner.facts.firewall import (
    FIREWALL_SCRIPT,
    BlockedPort,
    FirewallParseError,
    FirewallState,
    Port,
    ToolError,
    engine_ports,
    parse_firewall,
)

FIXTURES = Path(__file__).parent / "fixtures" / "firewall"
RKE2_CONTROLLER = engine_ports("rke2", "controller")


def listing(name: str) -> str:
    """A fixture as FIREWALL_SCRIPT prints it: raw captures get their section marker."""
    text = (FIXTURES / name).read_text()
    if text.startswith("###"):
        return text
    return f"### nft\n{text}" if name.endswith(".json") else f"### iptables\n{text}"


def state(name: str) -> FirewallState:
    return parse_firewall(listing(name))


def tcp(number: int) -> Port:
    return Port("tcp", number, f"port {number}")


def udp(number: int) -> Port:
    return Port("udp", number, f"port {number}")


def blocked_numbers(found: list[BlockedPort]) -> set[tuple[str, int]]:
    return {(b.port.proto, b.port.number) for b in found}


def reasons(found: list[BlockedPort]) -> dict[tuple[str, int], str]:
    return {(b.port.proto, b.port.number): b.reason for b in found}


# --- nftables -----------------------------------------------------------------------------------


def test_nft_single_port_drop_is_reported_with_the_rule() -> None:
    found = state("nft-port-drop.real.json").blocked([tcp(6443), tcp(9345)])
    assert found == [
        BlockedPort(tcp(9345), "nftables",
                    "nftables table inet filter chain input: rule 'tcp dport 9345 drop'")
    ]


def test_nft_policy_drop_reports_only_the_ports_not_accepted() -> None:
    found = state("nft-policy-drop.real.json").blocked(RKE2_CONTROLLER)
    assert blocked_numbers(found) == {("tcp", 9345), ("tcp", 10250), ("tcp", 2379), ("tcp", 2380)}
    assert reasons(found)[("tcp", 10250)] == "nftables table inet filter chain input: policy drop"
    assert {b.tool for b in found} == {"nftables"}


def test_nft_new_state_opens_but_established_related_does_not() -> None:
    # `tcp dport 6443 ct state new accept` opens 6443; `ct state established,related accept`
    # comes first and must not open 10250 for a new connection.
    found = state("nft-policy-drop.real.json").blocked([tcp(6443), tcp(10250)])
    assert blocked_numbers(found) == {("tcp", 10250)}


def test_nft_loopback_rule_does_not_open_and_is_not_a_caveat() -> None:
    # `iifname "lo" tcp dport 2379 accept`: certainly not the network's traffic.
    found = state("nft-policy-drop.real.json").blocked([tcp(2379)])
    assert found[0].reason == "nftables table inet filter chain input: policy drop"


def test_nft_source_restricted_accept_is_skipped_and_named() -> None:
    found = state("nft-policy-drop.real.json").blocked([tcp(9345)])
    assert found[0].reason.startswith("nftables table inet filter chain input: policy drop (")
    assert "'ip saddr 10.0.0.0/8 tcp dport 9345 accept'" in found[0].reason


def test_nft_named_interval_set_anonymous_set_and_range_open_ports() -> None:
    ports = [tcp(2379), tcp(2380), tcp(6443), tcp(10250), udp(31000), tcp(32767)]
    assert state("nft-sets.real.json").blocked(ports) == []


def test_nft_verdict_map_accepts_and_drops_by_port() -> None:
    found = state("nft-sets.real.json").blocked([udp(8472), udp(4789), tcp(9345)])
    assert reasons(found) == {
        ("udp", 4789): "nftables table inet filter chain input: "
                       "rule 'udp dport vmap { 4789 : drop, 8472 : accept }'",
        ("tcp", 9345): "nftables table inet filter chain input: policy drop",
    }


def test_nft_jump_decides_in_the_user_chain_and_return_continues() -> None:
    found = state("nft-jump.real.json").blocked([tcp(9345), tcp(6443), tcp(10250), udp(8472)])
    assert reasons(found) == {
        ("tcp", 9345): "nftables table inet filter chain input > blocklist: "
                       "rule 'tcp dport 9345 reject with tcp reset'",
    }


def test_nft_goto_never_comes_back() -> None:
    # `tcp dport 2380 accept` follows `goto k8s`: k8s ends without a verdict, so does input.
    found = state("nft-jump.real.json").blocked([tcp(2380)])
    assert found[0].reason == "nftables table inet filter chain input: policy drop"


def test_nft_every_input_base_chain_must_accept() -> None:
    # inet filter accepts 2379, but table ip guard (priority -10) drops it first.
    found = state("nft-jump.real.json").blocked([tcp(2379)])
    assert found[0].reason == "nftables table ip guard chain input: rule 'tcp dport 2379 drop'"


def test_nft_ip_family_table_does_not_see_ipv6() -> None:
    assert state("nft-jump.real.json").blocked([tcp(2379)], ip_version=6) == []


def test_nft_firewalld_tables_reject_what_no_zone_rule_accepts() -> None:
    found = state("nft-firewalld.real.json").blocked([tcp(22), tcp(6443), tcp(10250), tcp(9345)])
    assert blocked_numbers(found) == {("tcp", 10250), ("tcp", 9345)}
    assert reasons(found)[("tcp", 10250)] == (
        "nftables table inet firewalld chain filter_INPUT: "
        "rule 'reject with icmpx admin-prohibited'"
    )
    # Only the rule naming the port is worth a mention, not `ct status dnat accept`.
    assert "ct status" not in reasons(found)[("tcp", 9345)]
    assert "ip saddr 10.0.0.0/8 tcp dport 9345" in reasons(found)[("tcp", 9345)]


def test_nft_unknown_expression_makes_the_rule_skip() -> None:
    ruleset = (
        '{"nftables": [{"table": {"family": "inet", "name": "t"}}, {"chain": {"family": "inet",'
        ' "table": "t", "name": "in", "type": "filter", "hook": "input", "prio": 0,'
        ' "policy": "accept"}}, {"rule": {"family": "inet", "table": "t", "chain": "in", "expr":'
        ' [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},'
        ' "right": 6443}}, {"limit": {"rate": 10, "per": "second"}}, {"drop": null}]}}]}'
    )
    assert parse_firewall(f"### nft\n{ruleset}").blocked([tcp(6443)]) == []


def test_garbage_nft_json_raises() -> None:
    with pytest.raises(FirewallParseError, match="invalid JSON"):
        parse_firewall('### nft\n{"nftables": [{"table": ')
    with pytest.raises(FirewallParseError, match="nftables"):
        parse_firewall('### nft\n{"rules": []}')


# --- iptables -----------------------------------------------------------------------------------


def test_iptables_policy_drop_with_multiport_conntrack_lo_source_and_jump() -> None:
    found = state("iptables-policy-drop.real.txt").blocked([*RKE2_CONTROLLER, tcp(31000)])
    assert reasons(found) == {
        # -s 10.0.0.0/8 only: skipped, and named.
        ("tcp", 9345): "iptables INPUT policy DROP (rules skipped as they depend on the peer or "
                       "on unsupported matches: "
                       "'-A INPUT -s 10.0.0.0/8 -p tcp -m tcp --dport 9345 -j ACCEPT')",
        # Rejected in the user chain before the accept that follows the jump.
        ("tcp", 10250): "iptables chain INPUT > KUBE-GUARD: rule "
                        "'-A KUBE-GUARD -p tcp -m tcp --dport 10250 -j REJECT "
                        "--reject-with tcp-reset'",
        # Only accepted on loopback.
        ("tcp", 2380): "iptables INPUT policy DROP",
    }


def test_iptables_established_rule_does_not_open() -> None:
    dump = (
        "### iptables\n*filter\n:INPUT DROP [0:0]\n"
        "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n"
        "-A INPUT -p tcp -m conntrack --ctstate NEW -m tcp --dport 6443 -j ACCEPT\nCOMMIT\n"
    )
    assert blocked_numbers(parse_firewall(dump).blocked([tcp(6443), tcp(10250)])) == {
        ("tcp", 10250)
    }


def test_iptables_range_reject_rule_and_negated_source() -> None:
    found = state("iptables-centos7.txt").blocked([tcp(6444), tcp(9345), udp(8472)])
    reject = "iptables chain INPUT: rule '-A INPUT -j REJECT --reject-with icmp-host-prohibited'"
    # `! -s 10.0.0.0/8 ... DROP` is skipped (a drop is never named); LOG does not decide.
    assert reasons(found) == {("tcp", 9345): reject, ("udp", 8472): reject}


def test_iptables_nft_is_judged_once_from_iptables_save() -> None:
    # nft -j shows iptables-nft's multiport/conntrack as opaque xt matches: judged from the
    # iptables-save text, so 6443/2379 (multiport) are open and nothing is counted twice.
    parsed = state("script-iptables-nft.real.txt")
    assert parsed.tools == ("iptables",)
    found = parsed.blocked(RKE2_CONTROLLER)
    assert blocked_numbers(found) == {("tcp", 9345), ("tcp", 10250), ("tcp", 2380)}
    assert {b.tool for b in found} == {"iptables"}


def test_iptables_nft_seen_only_through_nft_skips_its_xt_matches() -> None:
    # Why the iptables-save text is read too: alone, `-m multiport` is an opaque xt match.
    found = state("iptables-nft-as-nft.real.json").blocked([tcp(6443), udp(8472)])
    assert blocked_numbers(found) == {("tcp", 6443)}


def test_iptables_nft_without_xt_is_judged_once_from_nft() -> None:
    parsed = state("script-iptables-nft-native.real.txt")
    assert parsed.tools == ("nftables",)
    assert parsed.blocked([tcp(9345)]) == [
        BlockedPort(tcp(9345), "nftables",
                    "nftables table ip filter chain INPUT: rule 'tcp dport 9345 drop'")
    ]


def test_iptables_legacy_and_nft_are_both_enforced() -> None:
    parsed = state("script-legacy-and-nft.real.txt")
    assert parsed.tools == ("nftables", "iptables")
    assert reasons(parsed.blocked([tcp(6443), udp(8472), tcp(10250)])) == {
        ("tcp", 6443): "iptables chain INPUT: rule '-A INPUT -p tcp -m tcp --dport 6443 -j DROP'",
        ("udp", 8472): "nftables table inet filter chain input: rule 'udp dport 8472 drop'",
    }


def test_iptables_garbage_raises() -> None:
    with pytest.raises(FirewallParseError, match="COMMIT"):
        parse_firewall("### iptables\n*filter\n:INPUT DROP [0:0]\n")
    with pytest.raises(FirewallParseError, match="unexpected"):
        parse_firewall("### iptables\nhello world\n")


# --- firewalld ----------------------------------------------------------------------------------


def test_firewalld_running_opens_listed_ports_and_ranges_only() -> None:
    parsed = state("firewalld-running.txt")
    assert parsed.tools == ("firewalld",)
    assert parsed.blocked(RKE2_CONTROLLER) == [
        BlockedPort(Port("udp", 8472, "canal/flannel VXLAN"), "firewalld",
                    "firewalld zone public does not open 8472/udp")
    ]


def test_firewalld_not_running_blocks_nothing() -> None:
    parsed = state("firewalld-not-running.txt")
    assert parsed.tools == ()
    assert parsed.blocked(RKE2_CONTROLLER) == []


def test_firewalld_services_fallback_table_listed_definitions_and_unknown_ones() -> None:
    found = state("firewalld-services.txt").blocked(RKE2_CONTROLLER)
    # kube-apiserver, kubelet, etcd-client/-server from the table; rke2 from its listing.
    assert [b.reason for b in found] == [
        "firewalld zone public does not open 8472/udp "
        "(services of unknown ports: mystery; 1 rich rule(s) not evaluated)"
    ]


def test_firewalld_services_and_includes_through_the_script() -> None:
    parsed = state("script-stubbed-firewalld-ufw.txt")
    assert parsed.tools == ("firewalld", "ufw")
    firewalld = [b for b in parsed.blocked(RKE2_CONTROLLER) if b.tool == "firewalld"]
    assert firewalld == []  # 2379/2380/6443/10250 come from kube-control-plane's includes


def test_firewalld_zone_target_accept_opens_everything() -> None:
    assert state("firewalld-trusted.txt").blocked(RKE2_CONTROLLER) == []


# --- ufw ----------------------------------------------------------------------------------------


def test_ufw_default_deny_incoming_with_allow_rules() -> None:
    found = state("ufw-deny-incoming.txt").blocked(RKE2_CONTROLLER)
    assert blocked_numbers(found) == {("tcp", 9345), ("tcp", 10250), ("udp", 8472)}
    assert reasons(found)[("tcp", 10250)] == (
        "ufw default incoming policy deny (rules skipped as they depend on the peer or on "
        "unsupported matches: 'Anywhere                   ALLOW IN    192.168.10.0/24')"
    )


def test_ufw_source_and_interface_restricted_rules_are_skipped_and_named() -> None:
    found = reasons(state("ufw-deny-incoming.txt").blocked([tcp(9345), udp(8472)]))
    assert "9345/tcp                   ALLOW IN    10.0.0.0/8" in found[("tcp", 9345)]
    assert "8472/udp on eth1" in found[("udp", 8472)]


def test_ufw_v6_rules_only_apply_to_ipv6() -> None:
    parsed = state("ufw-deny-incoming.txt")
    assert blocked_numbers(parsed.blocked([tcp(10250)], ip_version=6)) == set()
    assert blocked_numbers(parsed.blocked([tcp(10250)], ip_version=4)) == {("tcp", 10250)}


def test_ufw_deny_and_reject_rules_first_match_wins() -> None:
    found = state("ufw-allow-incoming.txt").blocked([tcp(9345), tcp(2380), udp(8472), tcp(6443)])
    assert reasons(found) == {
        ("tcp", 9345): "ufw rule '9345/tcp                   DENY IN     Anywhere'",
        ("tcp", 2380): "ufw rule '2379,2380/tcp              REJECT IN   Anywhere'",
    }


def test_ufw_inactive_blocks_nothing() -> None:
    parsed = state("ufw-inactive.txt")
    assert parsed.tools == ()
    assert parsed.blocked(RKE2_CONTROLLER) == []


# --- the listing as a whole ---------------------------------------------------------------------


def test_no_firewall_output_blocks_nothing() -> None:
    assert parse_firewall("").blocked(RKE2_CONTROLLER) == []
    empty = state("script-empty.real.txt")
    assert empty.tools == ()
    assert empty.blocked(RKE2_CONTROLLER) == []


def test_tool_errors_are_kept_and_block_nothing() -> None:
    parsed = parse_firewall(
        "### nft error\nError: Could not process rule: Operation not permitted\n"
        "### ufw error\nERROR: You need to be root to run this script\n"
    )
    assert parsed.errors == (
        ToolError("nftables", "Error: Could not process rule: Operation not permitted"),
        ToolError("ufw", "ERROR: You need to be root to run this script"),
    )
    assert parsed.blocked(RKE2_CONTROLLER) == []


def test_unexpected_listing_raises() -> None:
    with pytest.raises(FirewallParseError, match="unknown section"):
        parse_firewall("### pf\nblock all\n")
    with pytest.raises(FirewallParseError, match="starts with"):
        parse_firewall("sudo: a password is required\n### nft\n{}\n")


def test_blocked_rejects_an_unknown_ip_version() -> None:
    with pytest.raises(ValueError, match="ip_version"):
        parse_firewall("").blocked([], ip_version=5)


# --- the script and the port tables -------------------------------------------------------------


def test_script_is_a_quiet_read_only_subshell() -> None:
    script = FIREWALL_SCRIPT.strip()
    assert script.startswith("(") and script.endswith(") 2>/dev/null")
    assert not re.search(r"\bexit\b", script)
    writes = r"nft (add|delete|flush|insert|replace|create|-f)|iptables -[AIDFPNXZ]|--add-|" \
             r"--remove-|--permanent|--reload|ufw (allow|deny|enable|disable|reset|delete)"
    assert not re.search(writes, script)


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX sh")
def test_script_is_valid_posix_sh() -> None:
    subprocess.run(["sh", "-n", "-c", FIREWALL_SCRIPT], check=True)


def test_engine_ports_per_distro_and_role() -> None:
    def numbers(distro: str, role: str) -> set[tuple[str, int]]:
        return {(p.proto, p.number) for p in engine_ports(distro, role)}

    assert numbers("rke2", "controller") == {
        ("tcp", 6443), ("tcp", 9345), ("tcp", 10250), ("tcp", 2379), ("tcp", 2380), ("udp", 8472)
    }
    assert numbers("rke2", "worker") == {("tcp", 10250), ("udp", 8472)}
    assert numbers("k3s", "controller") == {
        ("tcp", 6443), ("tcp", 10250), ("tcp", 2379), ("tcp", 2380), ("udp", 8472)
    }
    assert numbers("k3s", "worker") == {("tcp", 10250), ("udp", 8472)}
    with pytest.raises(ValueError, match="nomad"):
        engine_ports("nomad", "worker")
