"""A write never goes through a link (executor/sh/files.sh): the guard every write, restore
and removal script starts with, run by a real sh against real links. The drift check
already refuses a link that was there when the plan was made; this guard is what stops
one planted between the drift check and the write."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from executor import file_writes as files
from planner.hosts.batch import quote
from planner.hosts.shell import load, variables

FUNCTIONS = variables(files.values()) + load("executor", "files.sh")


def guard(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", f"{FUNCTIONS}set -eu\ncs_refuse_links {quote(str(path))}\necho passed"],
        capture_output=True, text=True, check=False)


def body(function: str) -> str:
    """The text of one function of files.sh, as shipped."""
    text = load("executor", "files.sh")
    start = text.index(f"\n{function}() (")
    return text[start:text.index("\n)\n", start)]


@pytest.mark.parametrize("kind", ["link to a file", "dangling link", "link to a dir",
                                  "directory", "fifo"])
def test_anything_but_a_regular_file_is_refused(kind: str, tmp_path: Path) -> None:
    target, path = tmp_path / "target", tmp_path / "registries.yaml"
    target.write_text("secret: kept\n")
    if kind == "link to a file":
        path.symlink_to(target)
    elif kind == "dangling link":
        path.symlink_to(tmp_path / "nowhere")
    elif kind == "link to a dir":
        path.symlink_to(tmp_path)
    elif kind == "directory":
        path.mkdir()
    else:
        subprocess.run(["mkfifo", str(path)], check=True)
    ran = guard(path)
    assert ran.returncode != 0 and "passed" not in ran.stdout
    assert "is a link or not a regular file: refusing to write through it" in ran.stderr
    assert target.read_text() == "secret: kept\n"


@pytest.mark.parametrize("exists", [True, False])
def test_a_regular_file_or_a_new_one_passes(exists: bool, tmp_path: Path) -> None:
    path = tmp_path / "registries.yaml"
    if exists:
        path.write_text("x")
    assert guard(path).stdout == "passed\n"


def test_the_guard_comes_before_anything_is_made_or_moved() -> None:
    stage, commit = body("cs_stage"), body("cs_commit")
    check = 'cs_refuse_links "$1"'
    assert stage.index(check) < stage.index("cs_mkdir") < stage.index("mktemp")
    # Checked again right before the rename: the backup copy takes a moment.
    assert commit.index(check) < commit.index("cs_backup_copy") and \
        commit.rindex(check) < commit.index("mv -f \"$tmp\" \"$1\"")
