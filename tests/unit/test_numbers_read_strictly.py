"""Numbers in what a host prints are read only when they are plain ASCII digits.

str.isdigit() says yes to "²", which int() then refuses with a bare ValueError, and to
other scripts' digits ("٣"), which int() reads as 3. A host (root there may be anyone)
that prints either where a number belongs must get a refusal or be ignored, never stop
a plan or an apply with a ValueError (planner/safetext.py `decimal`).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from executor import policy
from executor.readiness import parse_probe
from executor.swap_output import OutputReader, Stopped
from planner.facts.firewall.nft import parse_nft_ruleset
from planner.hosts.batch import Batch, Fact, FactParseError
from planner.render.groups import host_list
from planner.safetext import decimal, octal, tcp_port

SUPERSCRIPT_TWO = "\u00b2"
ARABIC_INDIC_THREE = "\u0663"
NFT = Path(__file__).parent / "fixtures" / "firewall" / "iptables-nft-as-nft.real.json"


@pytest.mark.parametrize(("text", "number"), [
    ("0", 0), ("6443", 6443), ("9" * 18, int("9" * 18)), ("9" * 19, None), ("", None),
    (SUPERSCRIPT_TWO, None), ("1" + SUPERSCRIPT_TWO, None), (ARABIC_INDIC_THREE, None),
    ("-1", None), (" 1", None), ("1.0", None), ("0x10", None),
])
def test_decimal_takes_ascii_digits_alone(text: str, number: int | None) -> None:
    assert decimal(text) == number


@pytest.mark.parametrize(("text", "mode"), [
    ("644", 0o644), ("1777", 0o1777), ("0", 0), ("8", None), ("77777", None), ("", None),
    (SUPERSCRIPT_TWO, None), ("7" + ARABIC_INDIC_THREE + "5", None), ("-1", None),
])
def test_octal_takes_octal_ascii_digits_alone(text: str, mode: int | None) -> None:
    assert octal(text) == mode


@pytest.mark.parametrize(("value", "number"), [
    (22, 22), ("2200", 2200), (65535, 65535), (0, None), (65536, None), ("0", None),
    (True, None), (None, None), ("22x", None), (SUPERSCRIPT_TWO, None), (2 ** 70, None),
    ("9" * 5000, None), (22.0, None),
])
def test_tcp_port_is_a_number_or_its_digits_in_range(value: object, number: int | None
                                                     ) -> None:
    assert tcp_port(value) == number


def test_a_batch_marker_with_a_digit_int_refuses_ends_the_batch_there() -> None:
    batch = Batch.of([Fact("a", "true", lambda out: out), Fact("b", "true", lambda out: out)])
    good = f"one\n{batch.token} 0 0\ntwo\n{batch.token} 1 0\n"
    assert [o.stdout for o in batch.split(good)] == ["one", "two"]
    for forged in (f"one\n{batch.token} {SUPERSCRIPT_TWO} 0\n",
                   f"one\n{batch.token} 0 {SUPERSCRIPT_TWO}\n",
                   f"one\n{batch.token} {ARABIC_INDIC_THREE} 0\n"):
        with pytest.raises(FactParseError, match="remote script ended early"):
            batch.split(forged)


def test_a_port_of_digits_int_refuses_is_not_a_plain_port_in_nft_rules() -> None:
    text = NFT.read_text()
    assert '"right": 10250' in text
    plain = parse_nft_ruleset(text)
    for odd in (SUPERSCRIPT_TWO, ARABIC_INDIC_THREE):
        tables = parse_nft_ruleset(text.replace('"right": 10250', '"right": ' + json.dumps(odd), 1))
        assert tables != plain  # the rule no longer reads as a match on port 10250


def test_the_restart_scripts_lines_with_odd_digits_are_not_events() -> None:
    reader = OutputReader("tok")
    assert reader.feed(b"tok stopped 1700000000\n") == [Stopped(1700000000)]
    for word in ("stopped", "done", "cleared"):
        for odd in (SUPERSCRIPT_TWO, ARABIC_INDIC_THREE, "9" * 5000):
            assert reader.feed(f"tok {word} {odd}\n".encode()) == []


def test_an_engine_probe_with_odd_numbers_reads_them_as_unknown() -> None:
    state = parse_probe(f"state runit run: /etc/service/rke2-server: (pid 7) 3s\n"
                        f"show MainPID=abc NRestarts={SUPERSCRIPT_TWO}\n"
                        f"apiserver-logs {SUPERSCRIPT_TWO}\n")
    assert (state.restarts, state.apiserver_logs) == (None, 0)
    state = parse_probe("show MainPID=41 NRestarts=2\napiserver-logs 3\n")
    assert (state.pid, state.restarts, state.apiserver_logs) == (41, 2, 3)


@pytest.mark.parametrize("mode", ["zz", SUPERSCRIPT_TWO, "7" + ARABIC_INDIC_THREE + "5",
                                  "9" * 5000, "777"])
def test_a_policy_directory_mode_that_is_not_plainly_safe_refuses_the_policy(mode: str
                                                                             ) -> None:
    out = f"dir 0 {mode} directory\nfile 0 600 regular file\n{{}}"
    writer = SimpleNamespace(label="ctl-1", run_root=lambda script: SimpleNamespace(
        stdout=out.encode()))
    with pytest.raises(policy.PolicyError, match="is not root's alone"):
        policy.read(writer)  # type: ignore[arg-type]


def test_host_names_ending_in_thousands_of_digits_are_still_listed() -> None:
    long = "wrk-" + "9" * 5000
    assert host_list(["wrk-2", long, "wrk-1"]).startswith("wrk-1, wrk-2, wrk-")
