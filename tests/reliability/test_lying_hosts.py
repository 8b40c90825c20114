"""Hosts that lie: garbage where facts should be, end to end through `cargoship plan` and
`apply` on lab hosts.

wrk-1 lies (its os-release, uname, date, hostname, ip, engine version or registries.yaml
is garbage, huge or not a file); ctl-1 tells the truth. `plan` must end in one clear
problem naming wrk-1 and what was wrong, never a traceback, with ctl-1 still assessed. An
apply of a plan made before the lie must refuse and change nothing on either host. Two lies
are survivable and must be handled without damage: escape sequences in os-release (shown
escaped, never sent raw to the terminal) and a binary registries.yaml (replaced, the
original kept byte for byte in the backup).
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli import cargoship
from tests.lab import Lab
from tests.reliability.hostwrites import canaries, outside_writes, snapshots
from tests.reliability.labs import shared_lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DRIFTED = "mirrors: {}\n"
SAVE = "/tmp/lie-saved"  # the liar's own /tmp (a tmpfs inside the host)


def fake(command: str, output: str) -> tuple[str, str]:
    """A lying `command` earlier in PATH (/usr/local/bin) that prints `output`."""
    script = f"#!/bin/sh\nprintf '%s' {shlex.quote(output)}\n"
    return (f"printf '%s' {shlex.quote(script)} > /usr/local/bin/{command} && "
            f"chmod 755 /usr/local/bin/{command}", f"rm -f /usr/local/bin/{command}")


def replace_file(path: str, make: str) -> tuple[str, str]:
    """Keep the real file aside, put a lying one (made by shell `make`) in its place."""
    p = shlex.quote(path)
    return (f"cp -a {p} {SAVE} && {{ {make}; }}", f"rm -rf {p} && mv {SAVE} {p}")


def fake_engine(version_output: str) -> tuple[str, str]:
    """An engine whose `--version` lies; anything else goes to the real one."""
    script = ("#!/bin/sh\ncase \"$1\" in --version|-v) printf '%s\\n' "
              f"{shlex.quote(version_output)}; exit 0;; esac\nexec {SAVE} \"$@\"\n")
    return (f"cp -a /usr/local/bin/rke2 {SAVE} && printf '%s' {shlex.quote(script)} > "
            "/usr/local/bin/rke2", f"mv {SAVE} /usr/local/bin/rke2")


# lie -> (set it up, undo it, the phase that notices, what its problem says)
LIES: dict[str, tuple[tuple[str, str], str, str]] = {
    "garbage os-release": (replace_file("/etc/os-release", "printf '\\000\\377\\033[2J junk"
                                                           "\\nID\\n' > /etc/os-release"),
                           "Detect host operating systems", "is not KEY=value"),
    "unknown OS": (replace_file("/etc/os-release", "printf 'ID=plan9\\n' > /etc/os-release"),
                   "Detect host operating systems", "unsupported OS"),
    "50 MB os-release": (replace_file("/etc/os-release", "{ echo ID=ubuntu; head -c 50000000 "
                                      "/dev/zero | tr '\\0' 'x'; } > /etc/os-release"),
                         "Detect host operating systems", "larger than 64 KiB"),
    "garbage uname": (fake("uname", "\x1b[31m Linux"), "Detect host operating systems",
                      "expected 'uname -srm' output"),
    "garbage date": (fake("date", "yesterday"), "Validate hosts", "unexpected clock reading"),
    "hostile hostname": (("echo '$(touch${IFS}/tmp/sec-pwned)' > /proc/sys/kernel/hostname",
                          "echo wrk-1 > /proc/sys/kernel/hostname"),
                         "Gather host facts", "unusable hostname"),
    "no private address": (fake("ip", "1: lo    inet 127.0.0.1/8 scope host lo\n"),
                           "Gather host facts", "no private address found"),
    "garbage ip": (fake("ip", "2: eth0    inet 999.1.2.3/16 scope global eth0\n"),
                   "Gather host facts", "bad address"),
    "unparseable version": (fake_engine("rke2 version v1.30.x+rke2r1 (6b4e1a7b)"),
                            "Gathering facts about the distro installed",
                            "cannot parse engine version"),
    "garbage version": (fake_engine("\x1b]0;owned\x07 segmentation fault"),
                        "Gathering facts about the distro installed",
                        "unexpected version output"),
    "50 MB registries.yaml": (replace_file(REGISTRIES, f"head -c 50000000 /dev/zero > "
                                                       f"{REGISTRIES}"),
                              "Sync Registry Config Worker", "larger than 1 MiB"),
    "registries.yaml is a directory": (replace_file(REGISTRIES, f"rm {REGISTRIES} && mkdir "
                                                                f"{REGISTRIES}"),
                                       "Sync Registry Config Worker",
                                       "is a directory, not a regular file"),
    "registries.yaml is a symlink": (replace_file(REGISTRIES, f"rm {REGISTRIES} && ln -s "
                                                              f"/etc/hostname {REGISTRIES}"),
                                     "Sync Registry Config Worker",
                                     "is a symbolic link, not a regular file"),
    "registries.yaml is a FIFO": (replace_file(REGISTRIES, f"rm {REGISTRIES} && mkfifo "
                                                           f"{REGISTRIES}"),
                                  "Sync Registry Config Worker", "is a FIFO, not a regular file"),
    "registries.yaml is a device": (replace_file(REGISTRIES, f"rm {REGISTRIES} && mknod "
                                                             f"{REGISTRIES} c 1 3"),
                                    "Sync Registry Config Worker",
                                    "is a character device, not a regular file"),
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from shared_lab(tmp_path_factory)


@pytest.fixture(scope="module")
def good_plan(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plan made while every host told the truth: wrk-1's registries.yaml to be fixed."""
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", path)
    assert result.returncode == 0, result.stdout + result.stderr
    return path


def plan_while(lab: Lab, lie: tuple[str, str]) -> subprocess.CompletedProcess[str]:
    """`cargoship plan --verbose` while wrk-1 lies (`lie`: its setup and undo)."""
    setup, undo = lie
    lab.exec("wrk-1", setup)
    try:
        return cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    finally:
        lab.exec("wrk-1", undo)


def problems(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.startswith("  x ")]


def cargoship_state(lab: Lab) -> dict[str, str]:
    """Per host: the lock, every record and backup, and ctl-1's registries.yaml."""
    # (/run/cargoship/lock.mutex stays by design: an flock target, never a lock itself.)
    state = {host: lab.exec(host, "ls -R /run/cargoship/lock /var/lib/cargoship 2>/dev/null",
                            check=False).stdout for host in ("ctl-1", "wrk-1")}
    state["ctl-1 registries"] = lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    return state


@pytest.mark.reliability("lying hosts")
@pytest.mark.parametrize("lie", LIES)
def test_a_lying_host_is_a_clear_per_host_error(lab: Lab, good_plan: Path, tally,  # type: ignore[no-untyped-def]
                                                lie: str) -> None:
    tally.case()
    (setup, undo), phase, says = LIES[lie]
    wrk, ctl = lab.host("wrk-1"), lab.host("ctl-1")
    state = cargoship_state(lab)
    before = snapshots(lab, ["ctl-1", "wrk-1"])
    lab.exec("wrk-1", setup)
    try:
        # --verbose: the truthful host's preflight detail too (compact plans show only the
        # liar's).
        result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
        assert result.returncode == 1, result.stdout + result.stderr
        found = problems(result.stdout)
        assert len(found) == 1, result.stdout  # the liar's, and nothing of ctl-1
        assert wrk.address in found[0] and f"{phase}: " in found[0] and says in found[0], found
        # The truthful host was assessed all the way: its engine and its files.
        assert f"ctl-1 ({ctl.address})  rke2 v1.30.4+rke2r1 installed" in result.stdout
        assert "Sync Registry Config Controller  [reported, not run] no changes" in result.stdout
        assert "\x1b" not in result.stdout + result.stderr, "raw escape reached the terminal"
        refused = cargoship("apply", good_plan, "--confirm", timeout=300)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.startswith("error: ") and wrk.address in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert refused.stderr.rstrip().endswith("; nothing was changed on any host"), \
            refused.stderr
        assert cargoship_state(lab) == state  # no lock left, no record, no backup, no change
    finally:
        lab.exec("wrk-1", undo)
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    assert canaries(lab) == []
    assert outside_writes(lab, before) == {}


@pytest.mark.reliability("lying hosts")
def test_an_id_that_lies_is_not_asked(lab: Lab, tally) -> None:  # type: ignore[no-untyped-def]
    # A read's uid is the kernel's (the shell's /proc/self/status): an `id` earlier on the
    # PATH that says garbage, or another user, is not what the plan believes.
    tally.case()
    wrk = lab.host("wrk-1")
    for lie in ("root?", "1000"):
        result = plan_while(lab, fake("id", lie))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"wrk-1 ({wrk.address})  root, arch amd64" in result.stdout, result.stdout


@pytest.mark.reliability("lying hosts")
def test_escape_sequences_in_os_release_are_shown_not_obeyed(lab: Lab, tally) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    result = plan_while(lab, replace_file(
        "/etc/os-release", "printf 'ID=ubuntu\\nPRETTY_NAME=\"\\033]0;owned\\007\\033[2J"
        "\\342\\200\\256Ubuntu\"\\n' > /etc/os-release"))
    assert result.returncode == 0, result.stdout + result.stderr
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in result.stdout + result.stderr
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202eUbuntu (debian family)" in result.stdout


@pytest.mark.reliability("lying hosts")
def test_a_binary_registries_yaml_is_replaced_and_kept_in_the_backup(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case()
    junk = bytes(range(256)) * 4  # not UTF-8, not YAML, every byte value
    Path(lab.host("wrk-1").dir, "rancher-etc", "rke2", "registries.yaml").write_bytes(junk)
    try:
        plan_file = tmp_path / "plan.json"
        planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
        assert planned.returncode == 0, planned.stdout + planned.stderr
        assert "# current content is not valid YAML (1024 bytes, not shown)" in planned.stdout
        applied = cargoship("apply", plan_file, "--confirm", timeout=300)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        plan_id = _plan_id(plan_file)
        backup = f"/var/lib/cargoship/backups/{plan_id}{REGISTRIES}"
        saved = lab.exec("wrk-1", f"sha256sum {backup} && stat -c '%a %u' {backup} "
                                  f"{REGISTRIES}").stdout.split()
        assert saved[0] == hashlib.sha256(junk).hexdigest()
        assert saved[2:] == ["600", "0", "600", "0"]
        assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == \
            lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    finally:
        lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")


def _plan_id(path: Path) -> Any:
    import json

    return json.loads(path.read_text())["plan_id"]
