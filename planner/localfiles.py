"""Files cargoship writes on this machine (plans, records, the kubeconfig): atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import CargoshipError


class LocalFileError(CargoshipError):
    """A file on this machine could not be written; nothing was left behind."""


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Temp file in the same directory, mode set before any byte lands, fsync, rename:
    a reader sees the old file or the new one, never a part, and a crash leaves no temp."""
    try:
        _write(path, data, mode)
    except OSError as exc:
        # An unwritable or missing directory, a full disk, a directory in the way: the
        # user's to fix, so one line naming the file, not an internal error.
        raise LocalFileError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write(path: Path, data: bytes, mode: int) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
