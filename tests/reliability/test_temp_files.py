"""Temp files: created root-only, removed after a write that succeeded and after one that
failed, on the hosts and on this machine.

On a host, every write goes through a `.cargoship.*` temp file beside its target. Two
watchers put earlier in PATH (/usr/local/bin) see each temp while it exists: `cat`, as the
content lands in it (its stdout is the temp), and `sync`, just before the rename. Failures
are real: a `mv` that can't replace registries.yaml, an engine directory made read-only and
one made immutable.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, cargoship_argv
from tests.lab import Lab
from tests.reliability.hostwrites import outside_writes, snapshots
from tests.reliability.labs import shared_lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DRIFTED = "mirrors: {}\n"
WATCH_LOG = "/run/tempwatch.log"
LEFTOVERS = "find /etc/rancher /var/lib/rancher /var/lib/cargoship -name '.cargoship.*'"
# Log the temp's mode, owner and path, then do the real thing.
CAT = f"""#!/bin/sh
out=$(readlink /proc/$$/fd/1)
case "$out" in */.cargoship.*) stat -c 'cat %a %u %n' "$out" >> {WATCH_LOG};; esac
exec /bin/cat "$@"
"""
# A restart's writes get their content from base64 (it travels inside the restart script).
BASE64 = f"""#!/bin/sh
out=$(readlink /proc/$$/fd/1)
case "$out" in */.cargoship.*) stat -c 'base64 %a %u %n' "$out" >> {WATCH_LOG};; esac
exec /usr/bin/base64 "$@"
"""
SYNC = f"""#!/bin/sh
for f; do case "$f" in */.cargoship.*) stat -c 'sync %a %u %n' "$f" >> {WATCH_LOG};; esac; done
exec /bin/sync "$@"
"""
FAILING_MV = f"""#!/bin/sh
for last; do :; done
if [ "$last" = {REGISTRIES} ]; then echo "mv: cannot move to $last: Operation not permitted" >&2
  exit 1; fi
exec /bin/mv "$@"
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    for lab in shared_lab(tmp_path_factory):
        for host in ("ctl-1", "wrk-1"):
            bin_dir = Path(lab.host(host).dir, "bin")
            for name, script in (("cat", CAT), ("base64", BASE64), ("sync", SYNC)):
                (bin_dir / name).write_text(script)
                (bin_dir / name).chmod(0o755)
        yield lab


def _drift_and_plan(lab: Lab, path: Path) -> None:
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}; : > {WATCH_LOG}")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", path)
    assert result.returncode == 0, result.stdout + result.stderr


def _watched(lab: Lab) -> list[tuple[str, str, str, str]]:
    lines = lab.exec("wrk-1", f"cat {WATCH_LOG} 2>/dev/null", check=False).stdout
    return [tuple(line.split(" ", 3)) for line in lines.splitlines()]  # type: ignore[misc]


def _no_temp_left(lab: Lab, seen: list[tuple[str, str, str, str]]) -> None:
    for host in ("ctl-1", "wrk-1"):
        assert lab.exec(host, LEFTOVERS).stdout == "", host
    for *_, path in seen:
        assert lab.exec("wrk-1", f"test -e {shlex.quote(path)}", check=False).returncode == 1


@pytest.mark.reliability("temp files")
def test_temps_are_root_only_and_gone_after_a_write(lab: Lab, tmp_path: Path, tally) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    plan = tmp_path / "plan.json"
    _drift_and_plan(lab, plan)
    before = snapshots(lab, ["ctl-1", "wrk-1"])
    applied = cargoship("apply", plan, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    seen = _watched(lab)
    # registries.yaml and the apply record, each seen as content lands and before rename.
    assert {(step, Path(path).parent.as_posix()) for step, _, _, path in seen} >= {
        ("base64", "/etc/rancher/rke2"), ("sync", "/etc/rancher/rke2"),
        ("cat", "/var/lib/cargoship/applied"), ("sync", "/var/lib/cargoship/applied")}
    for step, mode, uid, path in seen:
        assert uid == "0", (step, path)
        if step in ("cat", "base64") or path.startswith("/etc/rancher/"):
            assert mode == "600", (step, mode, path)  # no one else can read it, ever
    _no_temp_left(lab, seen)
    written = {host: [p for p in paths if p != WATCH_LOG]  # (the watchers' own log)
               for host, paths in outside_writes(lab, before).items()}
    assert all(not paths for paths in written.values()), written


def _failed_apply(lab: Lab, plan: Path, *, stopped: bool = True) -> str:
    """Apply fails on wrk-1, which is rolled back (or, when it failed before its engine
    was `stopped`, left untouched): the previous file, the engine running, the node
    schedulable."""
    events = len(lab.events("wrk-1"))
    result = cargoship("apply", plan, "--confirm", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    if stopped:
        assert "rolled back" in result.stdout, result.stdout
    else:
        assert "nothing was changed" in result.stdout, result.stdout
        assert lab.events("wrk-1")[events:] == []
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED
    assert lab.exec("wrk-1", "sv status /etc/service/rke2-agent").stdout.startswith("run:")
    assert not lab.api("GET", "/api/v1/nodes/wrk-1")["spec"].get("unschedulable")
    return result.stdout


@pytest.mark.reliability("temp files")
def test_a_failed_rename_removes_its_temp(lab: Lab, tmp_path: Path, tally) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    plan = tmp_path / "plan.json"
    _drift_and_plan(lab, plan)
    mv = Path(lab.host("wrk-1").dir, "bin", "mv")
    mv.write_text(FAILING_MV)
    mv.chmod(0o755)
    try:
        out = _failed_apply(lab, plan)
    finally:
        mv.unlink()
    assert "Operation not permitted" in out
    seen = [s for s in _watched(lab) if s[3].startswith("/etc/rancher/")]
    assert seen and all(mode == "600" and uid == "0" for _, mode, uid, _ in seen), seen
    _no_temp_left(lab, seen)


@pytest.mark.reliability("temp files")
@pytest.mark.parametrize("how", ["read-only mount", "immutable"])
def test_an_unwritable_engine_directory_leaves_no_temp(lab: Lab, tmp_path: Path, tally,  # type: ignore[no-untyped-def]
                                                       how: str) -> None:
    tally.case()
    plan = tmp_path / "plan.json"
    _drift_and_plan(lab, plan)
    # The bind mount is inside the host's own mount namespace; chattr is on its directory.
    lock, unlock = {
        "read-only mount": ("mount --bind -o ro /etc/rancher/rke2 /etc/rancher/rke2",
                            "umount /etc/rancher/rke2"),
        "immutable": ("chattr +i /etc/rancher/rke2", "chattr -i /etc/rancher/rke2"),
    }[how]
    lab.exec("wrk-1", lock)
    try:
        # The staging before the host's turn is what fails: the engine is never stopped.
        _failed_apply(lab, plan, stopped=False)
    finally:
        lab.exec("wrk-1", unlock)
    _no_temp_left(lab, _watched(lab))


@pytest.mark.reliability("temp files")
@pytest.mark.parametrize("where", ["missing directory", "directory in the way",
                                   "read-only directory"])
def test_plan_out_that_cannot_be_written_leaves_no_temp(lab: Lab, tmp_path: Path, tally,  # type: ignore[no-untyped-def]
                                                        where: str) -> None:
    tally.case()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "plan.json"
    argv = [*cargoship_argv(), "plan", "-c", str(lab.dir / "cluster.yaml"), "-out"]
    if where == "missing directory":
        target = out_dir / "missing" / "plan.json"
    elif where == "directory in the way":
        target.mkdir()
    else:
        target.write_text("the previous plan\n")
    if where == "read-only directory":
        # A private mount namespace: the read-only bind mount exists only for this command.
        command = ["unshare", "--mount", "sh", "-c", f"mount --bind -o ro {out_dir} {out_dir} "
                   f"&& exec {shlex.join(argv)} {shlex.quote(str(target))}"]
    else:
        command = [*argv, str(target)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip() == f"error: cannot write {target}: " + {
        "missing directory": "No such file or directory",
        "directory in the way": "Is a directory",
        "read-only directory": "Read-only file system"}[where], result.stderr
    assert [p.name for p in out_dir.rglob(".*")] == []
    if where == "read-only directory":
        assert target.read_text() == "the previous plan\n"
