"""The gate's etcd look (planner/facts/sh/etcd_look.sh) split into its parts, run by sh
with a stub `curl` on PATH that prints what a real one prints for the member's three
reads in one run: each answer, then the write-out MARK (after a failed read too, curl's
error before it: `--stderr -`), then nothing more once a read failed (`--fail-early`).
The real curl against real etcd members: tests/e2e/test_quorum_gate.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from planner.facts.distro import LAYOUTS
from planner.facts.etcd import PART_BYTES, EtcdLook, etcd_fact
from planner.hosts.batch import Output

MARK = "\n~cs-part~\n"
STATUS = ('{"header":{"member_id":"11"},"leader":"11","raftIndex":"7",'
          '"raftAppliedIndex":"7"}')
MEMBERS = '{"members":[{"ID":"11","name":"ctl-1","peerURLs":["https://10.0.0.1:2380"]}]}'
HEALTH = '{"health":"true","reason":""}'
STUB = """#!/bin/sh
case "$*" in
  *6443*) printf 'readyz check passed\\n'; exit 0 ;;
esac
cat "$STUB_OUT"
exit "$(cat "$STUB_RC")"
"""


def look(tmp_path: Path, member_says: str, rc: int) -> EtcdLook:
    tls = tmp_path / "data" / "server" / "tls" / "etcd"
    tls.mkdir(parents=True)
    for name in ("server-client.crt", "server-client.key", "server-ca.crt"):
        (tls / name).write_text("x")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "curl").write_text(STUB)
    (stubs / "curl").chmod(0o755)
    (tmp_path / "out").write_text(member_says)
    (tmp_path / "rc").write_text(str(rc))
    fact = etcd_fact(LAYOUTS["rke2"], data_dir=str(tmp_path / "data"))
    run = subprocess.run(["sh", "-c", fact.command], capture_output=True, text=True,
                         timeout=10, env={"PATH": f"{stubs}:/usr/bin:/bin",
                                          "STUB_OUT": str(tmp_path / "out"),
                                          "STUB_RC": str(tmp_path / "rc")})
    return fact.parse(Output(run.stdout, run.returncode))


def test_three_answers_in_one_run_are_three_parts(tmp_path: Path) -> None:
    found = look(tmp_path, STATUS + MARK + MEMBERS + MARK + HEALTH + MARK, 0)
    assert found.status is not None and found.status.leader == "11"
    assert found.members is not None and [m.name for m in found.members] == ["ctl-1"]
    assert (found.healthy, found.readyz_ok) == (True, True)
    assert (found.status_error, found.members_error, found.health_error) == ("", "", "")


def test_a_read_that_fails_is_the_last_asked_and_carries_curls_error(
        tmp_path: Path) -> None:
    said = STATUS + MARK + "curl: (28) Operation timed out after 2001 ms\n" + MARK
    found = look(tmp_path, said, 28)
    assert found.status is not None  # the read before it stands
    assert found.members is None and found.members_error == "no answer within 2 s"
    assert found.healthy is None and found.health_error == "not read"


def test_a_member_that_refuses_its_status_is_asked_nothing_else(tmp_path: Path) -> None:
    said = "curl: (7) Failed to connect to 127.0.0.1 port 2379\n" + MARK
    found = look(tmp_path, said, 7)
    assert found.status is None and found.status_error == "connection refused (not running)"
    assert (found.members_error, found.health_error) == ("not read", "not read")
    assert found.readyz_ok is True  # the API server is still asked, apart


def test_an_answer_over_its_bound_is_refused_not_parsed(tmp_path: Path) -> None:
    found = look(tmp_path, "x" * (PART_BYTES + 10) + MARK + MEMBERS + MARK + HEALTH + MARK, 0)
    assert found.status is None and found.status_error == \
        f"answer longer than {PART_BYTES} bytes"
    assert found.members_error == "not read"


@pytest.mark.parametrize("said", ["curl: option --fail-early: is unknown\n", ""])
def test_a_curl_that_reads_nothing_says_why_as_the_status(tmp_path: Path, said: str) -> None:
    """A curl too old for --next/--fail-early (before 7.52) stops before any read: its
    own words stand as the status's error, and the gate refuses."""
    found = look(tmp_path, said, 2)
    assert found.status is None
    assert found.status_error == (said.removeprefix("curl: ").strip() or "curl exited 2")
