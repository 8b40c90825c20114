"""Atomic file writes on a host, with the previous content kept as a backup.

One round trip per file: the content arrives on stdin (never on the command line), goes to
a temp file in the target's own directory (so the final rename is atomic on the same
filesystem), is flushed to disk, given its mode and owner, and renamed over the target.
The previous content, if any, is first copied to the backup directory. A failure at any
step removes the temp file and leaves the target as it was.

The first backup a plan takes of a path wins: a write run again (after a reconnection, when
the first run's answer was lost) must not back up the content that run just wrote. A path
that did not exist gets an `.absent` marker instead, so the run again still knows that a
restore means removing the file.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from planner.hosts.batch import quote

from .remote import HostWriter

BACKUP_ROOT = "/var/lib/cargoship/backups"


@dataclass(frozen=True)
class Written:
    path: str
    backup: str | None  # where the previous content is; None when there was none


def backup_path(plan_id: str, path: str) -> str:
    """Backups are kept per plan, under the target's own path, so a restore is exact."""
    return f"{BACKUP_ROOT}/{plan_id}{path}"


def write_file(host: HostWriter, path: str, content: bytes, *, mode: int, plan_id: str,
               owner: str = "root:root") -> Written:
    directory = posixpath.dirname(path)
    backup = backup_path(plan_id, path)
    p, d, b = quote(path), quote(directory), quote(backup)
    script = f"""set -eu
umask 077
mkdir -p {d}
tmp=$(mktemp {quote(directory + "/.cargoship.")}XXXXXX)
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
chmod {mode:04o} "$tmp"
mkdir -p "$(dirname {b})"
if [ ! -e {b} ] && [ ! -e {b}.absent ]; then
  if [ -e {p} ]; then cp -p {p} {b}.tmp && mv -f {b}.tmp {b}; else : > {b}.absent; fi
fi
if [ -e {p} ]; then chown --reference={p} "$tmp"; else chown {quote(owner)} "$tmp"; fi
if [ -e {b} ]; then echo backup; fi
sync "$tmp"
mv -f "$tmp" {p}
trap - EXIT
sync {d}
"""
    result = host.run_root(script, stdin=content)
    had_backup = b"backup" in result.stdout
    return Written(path, backup if had_backup else None)


def restore_file(host: HostWriter, written: Written) -> None:
    """Put the previous content back (or remove a file that did not exist before)."""
    p = quote(written.path)
    if written.backup is None:
        host.run_root(f"rm -f {p}; sync {quote(posixpath.dirname(written.path))}")
        return
    b = quote(written.backup)
    directory = posixpath.dirname(written.path)
    host.run_root(f"""set -eu
tmp=$(mktemp {quote(directory + "/.cargoship.")}XXXXXX)
trap 'rm -f "$tmp"' EXIT
cp -p {b} "$tmp"
sync "$tmp"
mv -f "$tmp" {p}
trap - EXIT
sync {quote(directory)}
""")


def remove_file(host: HostWriter, path: str, *, plan_id: str) -> Written:
    """Delete a file cargoship created, keeping its content as a backup for a restore."""
    p, b = quote(path), quote(backup_path(plan_id, path))
    host.run_root(f"""set -eu
if [ -e {p} ]; then
  mkdir -p "$(dirname {b})"
  if [ ! -e {b} ]; then cp -p {p} {b}.tmp && mv -f {b}.tmp {b}; fi
  rm -f {p}
  sync {quote(posixpath.dirname(path))}
fi
""")
    return Written(path, backup_path(plan_id, path))
