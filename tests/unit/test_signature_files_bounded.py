"""Signature files are read with a cap before anything else (issue 25, point 5): a detached
`*.cargoship-sig` that is a link (to /dev/zero), a FIFO, a device, a directory or larger
than 64 KiB is refused at once with one line naming it; the signer's own `.pub` may be a
link, but only to a regular file of sane size."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from planner.plan import detached, signing
from planner.plan.detached import SUFFIX, DetachedSignatureError, read_small_file
from tests.unit.test_plan_codec import sample_plan

PLAN = sample_plan()


def _refused(directory: Path, said: str) -> str:
    with pytest.raises(DetachedSignatureError) as caught:
        detached.read(PLAN, "digest", directory)
    message = str(caught.value)
    assert "\n" not in message and said in message, message
    return message


def test_a_link_to_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    (tmp_path / f"a{SUFFIX}").symlink_to("/dev/zero")
    assert _refused(tmp_path, "is a symbolic link").startswith(str(tmp_path / f"a{SUFFIX}"))


def test_a_link_to_a_good_file_is_refused_too(tmp_path: Path) -> None:
    # Even a link to a readable file: it could be re-pointed between two reads.
    (tmp_path / "real").write_text("{}")
    (tmp_path / f"a{SUFFIX}").symlink_to(tmp_path / "real")
    _refused(tmp_path, "is a symbolic link")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / f"a{SUFFIX}")
    done = threading.Event()

    def read() -> None:
        _refused(tmp_path, "not a regular file")
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert done.wait(5), "blocked opening a FIFO"


def test_a_directory_and_an_oversized_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / f"a{SUFFIX}").mkdir()
    _refused(tmp_path, "not a regular file")
    (tmp_path / f"a{SUFFIX}").rmdir()
    (tmp_path / f"a{SUFFIX}").write_bytes(b" " * ((64 << 10) + 1))
    _refused(tmp_path, "larger than 64 KiB")
    (tmp_path / f"a{SUFFIX}").write_bytes(b" " * (64 << 10))  # at the limit: read, not JSON
    _refused(tmp_path, "not a cargoship signature file")


def test_a_name_with_a_newline_still_makes_one_line(tmp_path: Path) -> None:
    (tmp_path / f"a\nb{SUFFIX}").symlink_to("/dev/zero")
    assert "a\\nb" in _refused(tmp_path, "is a symbolic link")


def test_read_small_file_reads_what_fits() -> None:
    assert read_small_file(Path(__file__), 1 << 20, DetachedSignatureError, "a test").startswith(
        b'"""Signature files')
    with pytest.raises(DetachedSignatureError, match="not a regular file"):
        read_small_file(Path("/dev/zero"), 10, DetachedSignatureError, "a test", follow=True)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")
def test_signing_reads_the_public_key_capped(tmp_path: Path) -> None:
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@example.com",
                    "-f", str(key)], check=True)
    public = key.with_name("id.pub")
    moved = tmp_path / "keys" / "id.pub"
    moved.parent.mkdir()
    public.rename(moved)
    public.symlink_to(moved)  # a linked key is common, and fine
    assert signing.sign("digest", key).comment == "alice@example.com"
    public.unlink()
    public.symlink_to("/dev/zero")
    with pytest.raises(signing.SigningError, match="not a regular file"):
        signing.sign("digest", key)
