"""Bounded work on any host output (issue 25, point 5).

Every parser of host output is fed long and adversarial text: a megabyte of blanks, a
hundred thousand alternating tokens, control characters, invalid UTF-8 (as the reader
decodes it: errors="replace"), deep nesting, digits no int() wants. Each parse must end
quickly and either return a value or raise its fact's parse error: anything else (a hang
in a backtracking regular expression, a RecursionError, a bare ValueError) would stop a
whole plan on one host's word.

The guard is a deadline, not a measurement: a parse that has used GUARD seconds of CPU is
interrupted (SIGPROF) and fails the test; the parsers take milliseconds on these inputs.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.facts.applied import APPLIED
from planner.facts.distro import LAYOUTS, engine_fact, parse_service_state
from planner.facts.engine_config import engine_config_fact
from planner.facts.engine_version import EngineVersion, VersionError, parse_version_output
from planner.facts.etcd import etcd_fact
from planner.facts.file_reads import files_fact
from planner.facts.firewall import FIREWALL_SCRIPT, FirewallParseError, engine_ports
from planner.facts.firewall.firewalld import parse_firewalld
from planner.facts.firewall.iptables import parse_iptables_save
from planner.facts.firewall.nft import parse_nft_ruleset
from planner.facts.firewall.parse import parse_firewall
from planner.facts.firewall.ufw import parse_ufw
from planner.facts.interrupted import INTERRUPTED
from planner.facts.lock_holder import LOCK
from planner.facts.manifests import foreign_charts_fact
from planner.facts.network import HOSTNAME, NETWORK
from planner.facts.os_release import INIT_SYSTEM, KERNEL, OS_RELEASE
from planner.facts.system import CLOCK, PRIVILEGE
from planner.history import RECORDS
from planner.hosts.batch import Fact, FactParseError, Output
from tests.cpu_deadline import deadline

GUARD = 2.0  # seconds a single parse may run before it counts as a hang
FIXTURES = Path(__file__).parent / "fixtures"
FIREWALL = FIXTURES / "firewall"
RKE2 = LAYOUTS["rke2"]
ALL_PORTS = engine_ports("rke2", "controller")


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


# --- the parsers, each with a well-formed sample of what its host prints ------------------------


@dataclass(frozen=True)
class Parser:
    name: str
    parse: Callable[[str], Any]
    sample: str
    errors: tuple[type[BaseException], ...] = (FactParseError,)


def of(fact: Fact[Any], exit_code: int = 0) -> Callable[[str], Any]:
    return lambda text: fact.parse(Output(text, exit_code))


def firewall(text: str) -> Any:
    """The whole firewall read: the parse, then the judgement of every engine port (the
    walk over chains is host-driven work too)."""
    state = parse_firewall(text)
    return state.blocked(ALL_PORTS), state.blocked(ALL_PORTS, ip_version=6)


PLAN_ID = "0123456789abcdef0123456789abcdef"
RECORD = {"plan_id": PLAN_ID, "applied_at": "2026-01-01T00:00:00Z", "applied_by": "me",
          "status": "applied", "changes": [{"action": "file", "target": "/etc/x"}]}
CHART = ("apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\nmetadata:\n"
         "  name: rke2-canal\n  namespace: kube-system\nspec:\n  valuesContent: x\n")
CONFIG = "node-name: ctl-1\ntls-san:\n  - api.example.com\nkube-apiserver-arg+: [a=b]\n"
LOCK_HOLDER = {"holder": "alice@laptop", "id": "abc", "plan_id": PLAN_ID, "pid": 7}
FIREWALL_FIXTURES = {
    "ufw": "ufw-deny-incoming.txt",
    "iptables": "iptables-policy-drop.real.txt",
    "nftables": "nft-sets.real.json",
    "firewalld": "firewalld-services.txt",
}


def _firewall_sample(tool: str) -> str:
    text = (FIREWALL / FIREWALL_FIXTURES[tool]).read_text()
    if text.startswith("###"):
        return text
    return f"### {'nft' if tool == 'nftables' else tool}\n{text}"


def _section(tool: str) -> str:
    """One tool's own listing, without the script's section markers."""
    text = _firewall_sample(tool)
    marker = f"### {'nft' if tool == 'nftables' else tool}\n"
    return text.split(marker, 1)[1]


PARSERS = [
    Parser("applied plans", of(APPLIED),
           "".join(f"{i:032x}.json\n" for i in range(3)) + "stray.tmp\n"),
    Parser("rke2 engine", of(engine_fact(RKE2, "controller", "auto")),
           "binary /usr/local/bin/rke2\nversion rke2 version v1.30.4+rke2r1 (6b4e1a7b)\n"
           "other rke2\nstate runit run: /etc/service/rke2-server: (pid 120) 35s\n"),
    Parser("service state", parse_service_state, "openrc  * status: started"),
    Parser("engine version", parse_version_output,
           "rke2 version v1.30.4+rke2r1 (6b4e1a7b)\ngo version go1.22.5\n", (VersionError,)),
    Parser("engine release", EngineVersion.parse, "v1.30.4+rke2r1", (VersionError,)),
    Parser("engine config", of(engine_config_fact(RKE2)),
           f"file {len(CONFIG)} {b64(CONFIG)} /etc/rancher/rke2/config.yaml\n"
           f"file 4 {b64('a: b')} /etc/rancher/rke2/config.yaml.d/my file.yaml\n"),
    Parser("files", of(files_fact(["/etc/rancher/rke2/registries.yaml", "/etc/x"],
                                  ["/var/lib/rancher/rke2/server/manifests"])),
           f"file 644 0 0 3\n{b64('abc')}\nother symbolic-link\ndir a.yaml/.b/c d.yaml/\n"),
    Parser("interrupted", of(INTERRUPTED),
           json.dumps({"plan_id": PLAN_ID, "since": "2026", "step": "rolling back",
                       "backups": f"/var/lib/cargoship/backups/{PLAN_ID}"}) + "\n"),
    Parser("lock", of(LOCK), f"lock 1700000000 1700000010\n{b64(json.dumps(LOCK_HOLDER))}\n"),
    Parser("foreign chart configs",
           of(foreign_charts_fact("/var/lib/rancher/rke2/server/manifests", "cargoship-")),
           f"file {len(CHART)} {b64(CHART)} /var/lib/rancher/rke2/server/manifests/x.yaml\n"),
    Parser("etcd look", of(etcd_fact(RKE2)),
           (FIXTURES / "etcd" / "healthy-ctl-1.txt").read_text()),
    Parser("hostname", of(HOSTNAME), "ctl-1.example.com\n"),
    Parser("network", of(NETWORK), (FIXTURES / "ip" / "multi-nic.txt").read_text()),
    Parser("os-release", of(OS_RELEASE),
           (FIXTURES / "os-release" / "escapes.txt").read_text()),
    Parser("kernel", of(KERNEL), "Linux 6.1.0-18-amd64 x86_64\n"),
    Parser("init system", of(INIT_SYSTEM), "systemd\n"),
    Parser("privilege", of(PRIVILEGE), "uid 1000\nsudo yes\n"),
    Parser("clock", of(CLOCK), "1764559200.123456789\n"),
    Parser("apply records", of(RECORDS),
           f"{b64(json.dumps(RECORD))}\n{b64(json.dumps({**RECORD, 'status': 'failed'}))}\n"),
    *[Parser(f"firewall listing ({tool})", firewall, _firewall_sample(tool),
             (FirewallParseError,)) for tool in FIREWALL_FIXTURES],
    Parser("ufw status", parse_ufw, _section("ufw").split("### ", 1)[0],
           (FirewallParseError,)),
    Parser("iptables-save", parse_iptables_save, _section("iptables"), (FirewallParseError,)),
    Parser("nft -j list ruleset", parse_nft_ruleset, _section("nftables"),
           (FirewallParseError,)),
    Parser("firewalld", parse_firewalld, _section("firewalld"), (FirewallParseError,)),
]
IDS = [p.name for p in PARSERS]


def survives(parser: Parser, text: str, what: str = "") -> None:
    """The parse ends within GUARD seconds, and 2 us a character, with a value or the
    fact's own parse error. (A linear parse of a megabyte of short lines takes about half
    a second here, and twice that under the suite's load; a hang on it, any number of
    times longer.)"""
    with deadline(GUARD + len(text) * 2e-6, f"{parser.name} on {what or 'its input'}"):
        try:
            parser.parse(text)
        except parser.errors:
            pass


def test_every_sample_parses() -> None:
    # The samples are what real hosts print: a parser refusing one would test nothing below.
    for parser in PARSERS:
        with deadline(GUARD, parser.name):
            parser.parse(parser.sample)


# --- adversarial pieces and where they go --------------------------------------------------------

MB = 1_000_000
PIECES = {
    "1 MB of blanks": " " * MB,
    "1 MB of tabs": "\t" * MB,
    "two words 1 MB of blanks apart": "x" + " " * MB + "y",
    "a 1 MB word": "a" * MB,
    "100k alternating tokens": "ALLOW IN " * 50_000,
    "100k alternating options": "-p tcp " * 50_000,
    "100k key-value tokens": "a=b " * 100_000,
    "control characters": "".join(map(chr, range(32))) * 10_000 + "\x7f\x1b[2J\x9b",
    "invalid UTF-8": (bytes(range(0x80, 0x100)) * 4_000).decode("utf-8", "replace"),
    "line separators": "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029" * 20_000,
    "deep brackets": "[" * 100_000,
    "deep objects": '{"a":' * 50_000,
    "deep YAML flow": "{a: " * 50_000,
    "100k digits": "9" * 100_000,
    "digits int() refuses": "²³¹" * 1_000,
    "a digit int() refuses": "²",
    "another script's digit": "\u0663",
    "quotes and backslashes": "\"'\\" * 50_000,
    "blank-separated parentheses": "( " * 100_000,
    "section markers": "### ufw\n### nft error\n" * 5_000,
}


def _mutations(sample: str, piece: str) -> Iterator[tuple[str, str]]:
    """The piece as the whole output, as a line of its own in the middle, and in the
    middle of the first line (where a parser splits its fields); a short piece also at
    the end of each of the first 40 lines in turn (where a line's last field, often a
    number, ends)."""
    lines = sample.splitlines() or [""]
    middle = len(lines) // 2
    yield "alone", piece
    for index in range(min(len(lines), 40) if len(piece) <= 4096 else 0):
        yield f"at the end of line {index + 1}", "\n".join(
            [*lines[:index], lines[index] + piece, *lines[index + 1:]]) + "\n"
    yield "as a line", "\n".join([*lines[:middle], piece, *lines[middle:]]) + "\n"
    first = lines[0]
    cut = first.find(" ") if " " in first else len(first) // 2
    yield "inside the first line", "\n".join([first[:cut] + piece + first[cut:],
                                              *lines[1:]]) + "\n"


@pytest.mark.parametrize("parser", PARSERS, ids=IDS)
def test_every_parser_ends_on_every_piece(parser: Parser) -> None:
    for name, piece in PIECES.items():
        for where, text in _mutations(parser.sample, piece):
            survives(parser, text, f"{name} {where}")


# --- the same, as a property: random pieces in random places -------------------------------------

UNITS = [" ", "\t", "x", "x ", "ALLOW", " IN ", "-p tcp ", "-m ", "--dport ", "!", "[", "]",
         "{", "}", '"', "'", "\\", ":", ",", "/", "=", "#", "(", ")", "9", "²", "\x00", "\x1b",
         "\ufffd", "\u2028", "\r", "\n", "### ufw\n", "a" * 7, "(v6)", " on ", "Anywhere",
         "file ", "lock ", "state ", "version ", "binary ", "inet ", "scope ", "dev ",
         "default ", "\"nftables\": [", '{"rule": {"expr": [', "@s", "*filter\n", "COMMIT\n",
         ":INPUT DROP\n", "-A INPUT ", "-j ", "  services: ", "\trule ", "ID=", "uid ", "sudo "]


@st.composite
def hostile_text(draw: st.DrawFn, sample: str) -> str:
    lines = sample.splitlines() or [""]
    for _ in range(draw(st.integers(1, 3))):
        unit = "".join(draw(st.lists(st.sampled_from(UNITS), min_size=1, max_size=3)))
        piece = unit * draw(st.sampled_from([1, 2, 7, 300, 4_097, 60_000]))
        index = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["line", "append", "prepend", "widen", "token", "whole"]))
        line = lines[index]
        if how == "line":
            lines.insert(index, piece)
        elif how == "append":
            lines[index] = line + piece
        elif how == "prepend":
            lines[index] = piece + line
        elif how == "widen":
            lines[index] = line.replace(" ", piece, 1) if " " in line else line + piece
        elif how == "token":
            words = line.split(" ")
            words[draw(st.integers(0, len(words) - 1))] = piece
            lines[index] = " ".join(words)
        else:
            lines = [piece]
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@pytest.mark.parametrize("parser", PARSERS, ids=IDS)
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_parsers_end_on_random_hostile_text(parser: Parser, data: st.DataObject) -> None:
    survives(parser, data.draw(hostile_text(parser.sample)))


@pytest.mark.parametrize("parser", PARSERS, ids=IDS)
# too_slow: Hypothesis times its own example generation, which a loaded 2-core machine
# slows past its threshold; what this test bounds is the parse (GUARD), not the machine.
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(st.sampled_from(UNITS) | st.characters(), max_size=20).map("".join))
def test_parsers_end_on_short_random_text(parser: Parser, text: str) -> None:
    survives(parser, text)


# --- hostile payloads inside the encodings (base64, JSON) ---------------------------------------

PAYLOADS = {
    "deep brackets": "[" * 60_000,
    "deep YAML": "a:\n" + "".join(" " * i + "- \n" for i in range(1, 400)),
    "YAML flow nesting": "{a: " * 20_000,
    "not UTF-8": "\udcff",
    "a list": "[1, 2]",
    "huge number": "9" * 10_000,
}


def _payload(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _encoded_cases() -> Iterator[tuple[Parser, str, str]]:
    by_name = {p.name: p for p in PARSERS}
    for name, payload in PAYLOADS.items():
        raw = _payload(payload)
        yield by_name["lock"], name, f"lock 1 2\n{b64(raw)}\n"
        yield by_name["apply records"], name, f"{b64(raw)}\n"
        yield by_name["interrupted"], name, payload
        yield by_name["engine config"], name, f"file {len(raw)} {b64(raw)} /x.yaml\n"
        yield by_name["foreign chart configs"], name, (
            f"file {len(raw)} {b64(raw + b' HelmChartConfig')} /m/x.yaml\n")
        yield by_name["files"], name, f"file 644 0 0 {len(raw)}\n{b64(raw)}\nother fifo\ndir\n"
        yield by_name["nft -j list ruleset"], name, payload


@pytest.mark.parametrize(("parser", "payload", "text"),
                         [pytest.param(*case, id=f"{case[0].name}-{case[1]}")
                          for case in _encoded_cases()])
def test_hostile_payloads_inside_encodings(parser: Parser, payload: str, text: str) -> None:
    survives(parser, text, payload)


# --- the exact cases the probe found, and the bugs found on the way -----------------------------

UFW_HEAD = ("Status: active\nLogging: on (low)\n"
            "Default: deny (incoming), allow (outgoing), disabled (routed)\n"
            "New profiles: skip\n\nTo                         Action      From\n"
            "--                         ------      ----\n")


@pytest.mark.parametrize("blanks", [50_000, MB])
def test_ufw_rule_line_of_blanks_is_refused_at_once(blanks: int) -> None:
    # The probe's case: on the old rule pattern (`(?P<to>.+?)\s+(?P<action>...)...`) this
    # line never finished (50,000 blanks: still running after 5 s; it is quadratic and
    # worse in the line's length).
    line = "6443/tcp" + " " * blanks + "ALLOWED IN    Anywhere"
    started = time.process_time()
    with deadline(GUARD, "ufw on a line of blanks"), pytest.raises(
            FirewallParseError, match=r"ufw: line 8 is \d+ characters long"):
        parse_firewall(f"### ufw\n{UFW_HEAD}{line}\n")
    assert time.process_time() - started < GUARD


def test_ufw_rules_still_read_column_by_column() -> None:
    rules = ("6443/tcp                   ALLOW IN    Anywhere                   # api\n"
             "9345/tcp on eth1           ALLOW       10.0.0.0/8 (log)\n"
             "2379:2380/tcp (v6)         DENY IN     Anywhere (v6)\n"
             "Anywhere                   REJECT IN   192.168.0.0/16 (log-all)\n"
             "53                         ALLOW OUT   Anywhere\n"
             "10250/tcp                  LIMIT IN    Anywhere\n")
    state = parse_ufw(UFW_HEAD + rules)
    assert [(r.text.split()[0], r.action) for r in state.rules] == [
        ("6443/tcp", "allow"), ("9345/tcp", "allow"), ("2379:2380/tcp", "deny"),
        ("Anywhere", "reject"), ("10250/tcp", "limit")]
    assert "eth1" in repr(state.rules[1].conditions)
    # "(log)" and "(log-all)" are not part of the source.
    assert "'from 10.0.0.0/8'" in repr(state.rules[1].conditions)
    assert "'from 192.168.0.0/16'" in repr(state.rules[3].conditions)
    assert "Family(versions=frozenset({6})" in repr(state.rules[2].conditions)
    with pytest.raises(FirewallParseError, match="unexpected rule line"):
        parse_ufw(UFW_HEAD + "x" + " " * 3000 + "y\n")
    with pytest.raises(FirewallParseError, match="Default"):  # was a quadratic search
        parse_ufw("Status: active\nDefault: " + "a" * 4000 + "\n")


def test_numbers_are_refused_not_crashed_on() -> None:
    # str.isdigit says yes to "²", int() then raised a bare ValueError; so did 5000 digits.
    for text in ("file 644 0 0 ²\nYWJj\n", f"file 644 0 0 {'1' * 5000}\nYWJj\n"):
        with pytest.raises(FactParseError):
            files_fact(["/x"]).parse(Output(text, 0))
    for size in ("²", "1" * 5000):
        engine_config_fact(RKE2).parse(Output(f"file {size} {b64('a: 1')} /x.yaml\n", 0))
        with pytest.raises(FactParseError):
            foreign_charts_fact("/m", "c-").parse(Output(f"file {size} eA== /m/x.yaml\n", 0))
    with pytest.raises(VersionError):
        EngineVersion.parse("v" + "1" * 5000 + ".1.1+rke2r1")
    with pytest.raises(FirewallParseError):
        parse_iptables_save(f"*filter\n:INPUT DROP [0:0]\n-A INPUT -p {'6' * 5000} "
                            "-j ACCEPT\nCOMMIT\n")
    with pytest.raises(FirewallParseError):
        parse_iptables_save("*filter\n:INPUT DROP [0:0]\n-A INPUT -p ² -j ACCEPT\nCOMMIT\n")


def test_an_iptables_rule_line_no_kernel_could_hold_is_refused_before_it_is_split() -> None:
    # Quoted text sends a line to shlex, a character at a time: a hostile host's rule of
    # megabytes took seconds there (a random-text case overran the guard under tracing).
    line = '-A INPUT -m comment --comment "' + "x" * 4 * MB + '" -j ACCEPT'
    refused = r"rule line of \d+ characters \(more than 65536\)"
    with deadline(0.5, "a long quoted rule"), pytest.raises(FirewallParseError, match=refused):
        parse_iptables_save(f"*filter\n:INPUT DROP [0:0]\n{line}\nCOMMIT\n")
    kept = '-A INPUT -m comment --comment "' + "x" * 256 + '" -j ACCEPT'
    tables = parse_iptables_save(f"*filter\n:INPUT DROP [0:0]\n{kept}\nCOMMIT\n")
    assert tables[0].chains[0].rules[0].text == kept


def test_markers_and_locks_that_are_not_objects() -> None:
    for text in ("[]", "[" * 5000, '"x"', "null", '{"plan_id": ' * 3000):
        marker = INTERRUPTED.parse(Output(text, 0))
        assert marker is not None and marker.plan_id == "unknown"
    corrupt = LOCK.parse(Output(f"lock x y\n{b64('[' * 4096)}\n", 0))
    assert corrupt.holder == {"holder": "unknown (corrupt lock file)"}
    with pytest.raises(FactParseError):
        RECORDS.parse(Output(b64("[" * 60_000) + "\n", 0))


def test_oversized_outputs_are_refused_unread() -> None:
    cases: list[tuple[Fact[Any], str]] = [
        (APPLIED, f"{PLAN_ID}.json\n" * 120_000),
        (engine_config_fact(RKE2), "file 1 eA== /x.yaml\n" * 300_000),
        (foreign_charts_fact("/m", "c-"), "file 1 eA== /m/x.yaml\n" * 300_000),
        (files_fact(["/x"], ["/d"]), "absent\ndir " + "a/" * 4 * MB + "\n"),
        (NETWORK, "2: eth0 inet 10.0.0.1/8 scope global eth0\n" * 100_000),
        (OS_RELEASE, "ID=x\n" * 20_000),
        (RECORDS, f"{b64(json.dumps(RECORD))}\n" * 200_000),
        (LOCK, "lock 1 2\n" + "x" * 20_000 + "\n"),
    ]
    for fact, text in cases:
        with deadline(GUARD, fact.name), pytest.raises(FactParseError,
                                                       match=r"(more|larger) than"):
            fact.parse(Output(text, 0))
    with deadline(GUARD, "firewall"), pytest.raises(FirewallParseError, match="more than"):
        parse_firewall("### ufw\n" + "x\n" * 16 * MB)


def test_a_tool_listing_over_its_limit_is_a_tool_error_not_read() -> None:
    state = parse_firewall("### nft\n{\"nftables\": []}\n### ufw\nStatus: active\n"
                           + "x\n" * MB)
    assert [(e.tool, e.message) for e in state.errors] == [
        ("ufw", "ufw printed more than 1 MiB; not read")]


# --- the firewall walk: chains and sets a host can shape however it likes ----------------------


def test_chains_that_jump_twice_to_the_next_do_not_explode() -> None:
    # 60 chains, each jumping twice to the next: 2**60 walks without memoising a chain's
    # outcome; netfilter takes such a ruleset (no loop), so a host can hold it.
    chains = [f"C{i}" for i in range(60)]
    lines = ["*filter", ":INPUT DROP [0:0]", *(f":{c} - [0:0]" for c in chains),
             "-A INPUT -p tcp -j C0"]
    for here, there in itertools.pairwise(chains):
        lines += [f"-A {here} -p tcp -j {there}", f"-A {here} -p tcp -j {there}",
                  f"-A {here} -s 10.0.0.0/8 -p tcp -j ACCEPT"]
    lines += ["COMMIT", ""]
    with deadline(GUARD, "iptables chain walk"):
        found = parse_firewall("### iptables\n" + "\n".join(lines)).blocked(ALL_PORTS)
    assert found and all("INPUT policy DROP" in b.reason for b in found)
    assert "rules skipped" in found[0].reason and "more" in found[0].reason


def test_a_chain_that_jumps_to_itself_ends() -> None:
    dump = ("*filter\n:INPUT DROP [0:0]\n:LOOP - [0:0]\n-A INPUT -j LOOP\n"
            "-A LOOP -j LOOP\n-A LOOP -j LOOP\n-A LOOP -p tcp --dport 6443 -j ACCEPT\nCOMMIT\n")
    with deadline(GUARD, "a looping chain"):
        found = parse_firewall("### iptables\n" + dump).blocked(ALL_PORTS)
    assert 6443 not in {b.port.number for b in found}


def test_nft_sets_that_name_sets_do_not_explode() -> None:
    # Each set holding the previous one twice: 2**40 elements if expanded. nft itself has
    # no sets of sets; such a set is simply not a port list.
    sets = [{"set": {"family": "inet", "table": "f", "name": "s0", "type": "inet_service",
                     "elem": [6443]}}]
    for i in range(1, 40):
        sets.append({"set": {"family": "inet", "table": "f", "name": f"s{i}",
                             "type": "inet_service", "elem": [f"@s{i - 1}", f"@s{i - 1}"]}})
    rule = {"rule": {"family": "inet", "table": "f", "chain": "in", "expr": [
        {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                   "right": "@s39"}}, {"accept": None}]}}
    ruleset = {"nftables": [
        {"table": {"family": "inet", "name": "f"}}, *sets,
        {"chain": {"family": "inet", "table": "f", "name": "in", "type": "filter",
                   "hook": "input", "prio": 0, "policy": "drop"}}, rule]}
    with deadline(GUARD, "nested nft sets"):
        parse_firewall("### nft\n" + json.dumps(ruleset)).blocked(ALL_PORTS)


def test_many_nft_tables_and_chains_are_grouped_not_crossed() -> None:
    # Each table looked through every chain: 10,000 tables of one chain each (0.7 MB of
    # JSON) were 100 million comparisons.
    items: list[dict[str, Any]] = []
    for i in range(10_000):
        items.append({"table": {"family": "ip", "name": f"t{i}"}})
        items.append({"chain": {"family": "ip", "table": f"t{i}", "name": "c"}})
    with deadline(GUARD, "10000 tables of a chain each"):
        assert len(parse_nft_ruleset(json.dumps({"nftables": items}))) == 10_000


def test_firewalld_services_past_what_the_script_reads_are_refused() -> None:
    zone = "running\npublic (active)\n  target: default\n"
    services = "".join(f"s{i}\n  ports: {i}/tcp\n" for i in range(257))
    with pytest.raises(FirewallParseError, match="more than 256 services listed"):
        parse_firewalld(zone + services)
    assert len(parse_firewalld(zone + services.split("s256\n")[0]).services) == 256


def test_firewalld_continuation_lines_are_joined_once() -> None:
    text = "running\npublic (active)\n  target: default\n  rich rules: \n" + "\tr\n" * 300_000
    with deadline(GUARD, "300k rich rules"):
        state = parse_firewalld(text)
    assert state.zone is not None and state.zone.rich_rules == 300_000


# --- the remote side: every command stops what it prints ----------------------------------------


def test_every_fact_command_caps_what_it_prints() -> None:
    # Cut as it arrives (the Fact's limit: hosts/batch.py Sections), or read so by the
    # command itself.
    for fact in (APPLIED, engine_config_fact(RKE2), files_fact(["/x"], ["/d"]),
                 foreign_charts_fact("/m", "c-"), NETWORK):
        assert fact.limit is not None, fact.name
    for fact in (engine_fact(RKE2, "controller", "auto"), INTERRUPTED, LOCK, HOSTNAME,
                 OS_RELEASE):
        assert "head -c" in fact.command or "%." in fact.command, fact.name
    # Bounded at the source (the kernel's utsname, constants, `id -u`, `date`): the parse
    # still refuses more than a line.
    for fact in (KERNEL, INIT_SYSTEM, PRIVILEGE, CLOCK):
        with pytest.raises(FactParseError):
            fact.parse(Output("9" * 10_000 + "\n", 0))


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX sh")
def test_firewall_script_stops_endless_tools(tmp_path: Path) -> None:
    # A ufw, an iptables-save and an nft that never stop printing, a firewall-cmd whose
    # services' definitions never end: the script still ends, each listing cut at its limit
    # and reported as its tool's error. (Every tool is a stand-in: the machine's own, in
    # the sbin directories the script adds to PATH, must not answer instead.)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        "ufw": "#!/bin/sh\nprintf 'Status: active\\n'\nexec yes ' '\n",
        "nft": "#!/bin/sh\nprintf '{\"nftables\": ['\nexec yes '{},'\n",
        "iptables-legacy-save": "#!/bin/sh\nexit 0\n",
        "iptables-nft-save": "#!/bin/sh\nexit 0\n",
        "iptables-save": "#!/bin/sh\nexec yes ':INPUT ACCEPT [0:0]'\n",
        "firewall-cmd": "#!/bin/sh\ncase \"$1\" in --state) echo running;; "
                        "--list-all) printf 'public\\n  target: default\\n  services: a b\\n';; "
                        "*) exec yes '  ports: 1/tcp';; esac\n",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(stat.S_IRWXU)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C"}
    started = time.monotonic()
    result = subprocess.run(["sh", "-c", FIREWALL_SCRIPT], capture_output=True, timeout=60,
                            env=env, check=False)
    assert time.monotonic() - started < 30
    state = parse_firewall(result.stdout.decode("utf-8", "replace"))
    errors = {e.tool: e.message for e in state.errors}
    assert "printed more than" in errors["ufw"]
    assert "printed more than" in errors["iptables"]
    assert "printed more than" in errors["firewalld"]
    assert errors["nftables"] == "nft printed more than 6 MiB; not read"
    assert state.tools == ()


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX sh")
def test_iptables_variants_run_once_and_legacy_only_with_legacy_tables(tmp_path: Path) -> None:
    # Debian: iptables-save -> /etc/alternatives -> iptables-nft-save -> xtables-nft-multi.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runs = tmp_path / "runs"
    dump = "# Generated by iptables-save v1.8.9 (nf_tables)\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n"
    stubs = {
        "nft": "#!/bin/sh\necho '{\"nftables\": []}'\n",
        "iptables-legacy-save": f"#!/bin/sh\necho legacy >> {runs}\n",
        "iptables-nft-save": f"#!/bin/sh\necho \"${{0##*/}}\" >> {runs}\nprintf '{dump}'\n",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (bin_dir / "iptables-save").symlink_to("iptables-nft-save")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C"}
    names = tmp_path / "ip_tables_names"  # the kernel's legacy tables, one name a line
    names.write_text("filter\n")
    script = FIREWALL_SCRIPT.replace("/proc/net/ip_tables_names", str(names))
    assert script != FIREWALL_SCRIPT

    def listing() -> tuple[list[str], Any]:
        runs.unlink(missing_ok=True)
        done = subprocess.run(["sh", "-c", script], capture_output=True,
                              timeout=60, env=env, check=False)
        return runs.read_text().split(), parse_firewall(done.stdout.decode())

    ran, state = listing()
    assert ran == ["legacy", "iptables-nft-save"]
    # No legacy table in the kernel (an empty list, or none at all): legacy-save would
    # print nothing, and is not run.
    for kernel in ("", None):
        if kernel is None:
            names.unlink()
        else:
            names.write_text(kernel)
        assert listing()[0] == ["iptables-nft-save"]
    names.write_text("filter\n")
    assert [t.backend for t in state.iptables] == ["nf_tables"]
    # A copy, not a link: run as well, as before (and its output printed once).
    (bin_dir / "iptables-save").unlink()
    shutil.copy(bin_dir / "iptables-nft-save", bin_dir / "iptables-save")
    ran, state = listing()
    assert ran == ["legacy", "iptables-nft-save", "iptables-save"]
    assert [t.backend for t in state.iptables] == ["nf_tables"]


def test_an_iptables_chain_line_without_a_name_is_a_parse_error() -> None:
    """Found by the random test above: ':' alone raised a plain ValueError (unpacking)."""
    from planner.facts.firewall.model import FirewallParseError
    from planner.facts.firewall.parse import parse_firewall

    with pytest.raises(FirewallParseError, match="a chain without a name"):
        parse_firewall("### iptables\n*filter\n:\nCOMMIT\n")
