"""Trust chain, host side: what a host holds never leaks into a plan or a backup, files end
root-owned with their mode, and hostile content stays bounded. End to end through
`cargoship plan`, `show` and `apply` on lab hosts.

wrk-1 is the hostile host; ctl-1 tells the truth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship
from tests.lab import Lab
from tests.reliability.labs import shared_lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
BACKUPS = "/var/lib/cargoship/backups"
MARKER = "TOPSECRET-7f3a9c"  # the content of a file a link points at: must never show up
TARGET = "/root/target-of-link"
BOMB = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
    for i in range(8))  # 10^9 nodes once expanded, in about 500 bytes


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from shared_lab(tmp_path_factory)


@pytest.fixture
def in_sync(lab: Lab) -> Iterator[None]:
    """Each test starts and ends with wrk-1's registries.yaml as ctl-1's (in sync)."""
    good = lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    yield
    lab.exec("wrk-1", f"rm -rf {REGISTRIES} && cat > {REGISTRIES} && chmod 600 {REGISTRIES}",
             input=good)


def plan(lab: Lab, out: Path | None = None) -> tuple[int, str]:
    extra = ["-out", str(out)] if out else []
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", *extra)
    return result.returncode, result.stdout + result.stderr


def everything_on(lab: Lab, host: str) -> str:
    """Every byte cargoship keeps on a host: backups and records."""
    return lab.exec(host, "find /var/lib/cargoship -type f -exec cat {} + 2>/dev/null",
                    check=False).stdout


@pytest.mark.reliability("trust: host files never through links")
def test_a_link_target_never_enters_a_plan_an_output_or_a_backup(  # type: ignore[no-untyped-def]
        lab: Lab, in_sync: None, tmp_path: Path, tally) -> None:
    tally.case(2)
    lab.exec("wrk-1", f"printf 'mirrors: {{{MARKER}: {{}}}}\\n' > {TARGET} && chmod 600 {TARGET}")
    # Made while registries.yaml was a plain drifted file: a good plan.
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    good = tmp_path / "good.json"
    code, out = plan(lab, good)
    assert code == 0, out
    # A link to a file with YAML in it: the old read followed it and diffed its content.
    lab.exec("wrk-1", f"rm {REGISTRIES} && ln -s {TARGET} {REGISTRIES}")
    linked = tmp_path / "linked.json"
    code, out = plan(lab, linked)
    assert code == 1, out
    assert "is a symbolic link, not a regular file" in out and MARKER not in out
    assert not linked.exists()  # a plan with problems is never written
    shown = cargoship("show", good, "--json")
    assert MARKER not in shown.stdout
    # The good plan, applied now that the file is a link: refused, the target untouched.
    applied = cargoship("apply", good, "--confirm", timeout=300)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert MARKER not in applied.stdout + applied.stderr
    assert lab.exec("wrk-1", f"stat -c '%a %u' {TARGET} && readlink {REGISTRIES}").stdout == \
        f"600 0\n{TARGET}\n"
    assert MARKER in lab.exec("wrk-1", f"cat {TARGET}").stdout
    assert MARKER not in everything_on(lab, "wrk-1")


@pytest.mark.reliability("trust: host files never through links")
def test_files_end_root_owned_with_their_mode_and_backups_are_root_only(  # type: ignore[no-untyped-def]
        lab: Lab, in_sync: None, tmp_path: Path, tally) -> None:
    tally.case(3)
    # Right content, wrong owner and group: drift, shown like a mode change.
    lab.exec("wrk-1", f"chown 1000:1000 {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    code, out = plan(lab, plan_file)
    assert code == 0, out
    assert "owner 1000:1000 -> 0:0 (uid:gid)" in out and "ctl-1" not in out.split("Plan:")[0] \
        .split("Sync Registry Config Worker")[-1], out
    # Old backups of other plans on the host: all but the newest 5 plans' must go.
    old = [f"{n:032x}" for n in range(1, 8)]
    for age, plan_id in enumerate(reversed(old), 1):  # old[0] is the oldest
        lab.exec("wrk-1", f"mkdir -p {BACKUPS}/{plan_id}/etc && "
                          f"touch -d '-{age} hour' {BACKUPS}/{plan_id}")
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    plan_id = json.loads(plan_file.read_text())["plan_id"]
    stat = lab.exec("wrk-1", f"stat -c '%a %u %g %F' {REGISTRIES} {BACKUPS} "
                             f"{BACKUPS}/{plan_id} {BACKUPS}/{plan_id}{REGISTRIES}").stdout
    assert stat.splitlines() == ["600 0 0 regular file", "700 0 0 directory",
                                 "700 0 0 directory", "600 1000 1000 regular file"]
    kept = set(lab.exec("wrk-1", f"ls {BACKUPS}").stdout.split())
    assert kept == {plan_id, *old[-4:]}, kept


@pytest.mark.reliability("trust: host files never through links")
def test_a_file_swapped_for_a_link_after_the_plan_is_not_written_through(  # type: ignore[no-untyped-def]
        lab: Lab, in_sync: None, tmp_path: Path, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    code, out = plan(lab, plan_file)
    assert code == 0, out
    lab.exec("wrk-1", f"cp {REGISTRIES} {TARGET} && rm {REGISTRIES} && "
                      f"ln -s {TARGET} {REGISTRIES}")
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "symbolic link" in applied.stderr
    assert lab.exec("wrk-1", f"cat {TARGET}").stdout == "mirrors: {}\n"
    assert lab.exec("wrk-1", f"readlink {REGISTRIES}").stdout == f"{TARGET}\n"


@pytest.mark.reliability("trust: hostile content bounded")
def test_an_alias_bomb_on_a_host_costs_nothing(  # type: ignore[no-untyped-def]
        lab: Lab, in_sync: None, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"cat > {REGISTRIES}", input=BOMB)
    started = time.monotonic()
    code, out = plan(lab)
    took = time.monotonic() - started
    assert code == 0, out
    assert "# current content refused: aliases expand the document" in out
    assert "x, x" not in out and "[x" not in out
    # Not a timing assertion on cargoship's speed: an expanded bomb takes minutes, a plan
    # of two lab hosts seconds; the bound only tells the two apart.
    assert took < 60, took


@pytest.mark.reliability("trust: hostile content bounded")
def test_an_alias_bomb_in_the_cluster_config_is_one_line(tmp_path: Path, tally) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    config = tmp_path / "cluster.yaml"
    config.write_text(BOMB)
    result = cargoship("validate", "-c", config, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "aliases expand the document" in result.stderr


@pytest.mark.reliability("trust: hostile content bounded")
def test_control_and_bidi_characters_from_a_host_are_escaped_in_json(  # type: ignore[no-untyped-def]
        lab: Lab, in_sync: None, tmp_path: Path, tally) -> None:
    tally.case(2)
    # YAML itself refuses these characters, so a host's os-release carries them instead:
    # its PRETTY_NAME is shown in the plan's findings.
    hostile = "Ubuntu\u202eexe.\x9b31m\x7f\x1b]0;owned\x07"
    lab.exec("wrk-1", "cp -a /etc/os-release /tmp/os-release.saved && cat > /etc/os-release",
             input=f'ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="{hostile}"\n')
    try:
        lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
        plan_file = tmp_path / "plan.json"
        code, out = plan(lab, plan_file)
        shown = cargoship("show", plan_file, "--json")
    finally:
        lab.exec("wrk-1", "mv /tmp/os-release.saved /etc/os-release")
    assert code == 0, out
    assert shown.returncode == 0, shown.stderr
    for text in (plan_file.read_text(), shown.stdout):
        for raw in ("\u202e", "\x9b", "\x7f", "\x1b", "\x07"):
            assert raw not in text, repr(raw)
        assert "\\u202e" in text and "\\u009b" in text
    findings = [n["text"] for p in json.loads(shown.stdout)["phases"] for n in p["findings"]]
    assert any(hostile in text for text in findings)  # escaped in JSON, the same string
