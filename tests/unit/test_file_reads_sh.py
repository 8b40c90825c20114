"""The files fact's shell (planner/facts/file_reads.py), run for real on real files: what
it reads is exactly each file, up to the limit and refused past it, never through a link,
with GNU dd and with a dd that has no `nofollow` (BusyBox's)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from planner.facts.file_reads import MAX_FILE_BYTES, FileTooLarge, LiveFile, files_fact
from planner.hosts.batch import Output


def read(paths: list[Path], path_env: str | None = None) -> dict[str, LiveFile]:
    fact = files_fact([str(p) for p in paths])
    env = {**os.environ, "PATH": path_env or os.environ["PATH"]}
    done = subprocess.run(["sh", "-c", fact.command], capture_output=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    files, _ = fact.parse(Output(done.stdout.decode(), 0))
    return files


@pytest.fixture(params=["gnu dd", "dd without nofollow"])
def path_env(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "gnu dd":
        return None
    stub = tmp_path / "stub-bin"
    stub.mkdir()
    # BusyBox's dd refuses iflag=nofollow: the read falls back to head, links still refused.
    (stub / "dd").write_text("#!/bin/sh\necho 'dd: invalid iflag' >&2\nexit 1\n")
    (stub / "dd").chmod(0o755)
    return f"{stub}:{os.environ['PATH']}"


def test_each_file_is_read_exactly_up_to_the_limit(tmp_path: Path, path_env: str | None) -> None:
    sizes = {"empty": 0, "small": 7, "block": 65537, "at-limit": MAX_FILE_BYTES}
    paths = []
    for name, size in sizes.items():
        path = tmp_path / name
        path.write_bytes(bytes(i % 251 for i in range(size)))
        paths.append(path)
    files = read(paths, path_env)
    for path in paths:
        assert files[str(path)].content == path.read_bytes(), path.name
        assert files[str(path)].kind == "file"


def test_past_the_limit_is_refused(tmp_path: Path, path_env: str | None) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 5000))
    with pytest.raises(FileTooLarge, match=f"{MAX_FILE_BYTES + 5000} bytes"):
        read([big], path_env)


def test_a_link_is_reported_never_followed(tmp_path: Path, path_env: str | None) -> None:
    target = tmp_path / "target"
    target.write_text("secret\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    files = read([link], path_env)
    assert files[str(link)].kind == "symbolic link"
    assert files[str(link)].content == b""
