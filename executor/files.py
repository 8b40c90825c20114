"""Atomic file writes on a host, with the previous content kept as a backup.

One round trip per file: the content arrives on stdin (never on the command line), goes to
a temp file in the target's own directory (so the final rename is atomic on the same
filesystem), is flushed to disk, given the mode and owner it must have, and renamed over
the target. The previous content, if any, is first copied to the backup directory. A
failure at any step removes the temp file and leaves the target as it was.

Nothing is written, copied or removed through a link: a target (or its directory, or the
backup directories) that is a symbolic link or not a regular file makes the step fail with
nothing changed. Backups are regular-file copies (`cp -P` never copies a link's target, and
the copy is checked), under a root-only (0700) directory.

The first backup a plan takes of a path wins: a write run again (after a reconnection, when
the first run's answer was lost) must not back up the content that run just wrote. A path
that did not exist gets an `.absent` marker instead, so the run again still knows that a
restore means removing the file.

Backup retention: when a plan takes its first backup on a host, the backups of all but the
newest KEEP_BACKUPS plans on that host (that one included) are removed. A plan interrupted
on a host is at most the second newest when the plan that recovers it takes its backups,
so what a recovery may restore is never pruned.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from planner.facts.interrupted import BACKUPS
from planner.hosts.batch import quote

from .remote import HostWriter

BACKUP_ROOT = "/var/lib/cargoship/backups"
RECORD_PREFIX = "/var/lib/cargoship/"  # what a backup holds under here is not engine config
KEEP_BACKUPS = 5
NOT_REGULAR_EXIT = 3


@dataclass(frozen=True)
class Written:
    path: str
    backup: str | None  # where the previous content is; None when there was none


def backup_path(plan_id: str, path: str) -> str:
    """Backups are kept per plan, under the target's own path, so a restore is exact."""
    return f"{BACKUP_ROOT}/{plan_id}{path}"


def _mkdir(quoted_dir: str) -> str:
    # The directory is there on every write but the first: no program then (a wave of
    # restarts runs every host's write at once, and each program slows the others).
    return f"[ -d {quoted_dir} ] || mkdir -p {quoted_dir}"


def _fail(message: str) -> str:
    return f"{{ echo {quote(message)} >&2; exit {NOT_REGULAR_EXIT}; }}"


def _refuse_links(*paths: str) -> str:
    """Shell lines that stop the script when a path is a link or exists as a non-file."""
    return "\n".join(
        f"if [ -L {quote(path)} ] || {{ [ -e {quote(path)} ] && [ ! -f {quote(path)} ]; }}; "
        f"then {_fail(f'{path} is a link or not a regular file: refusing to write through it')}"
        "; fi" for path in paths)


def _refuse_linked_dirs(*dirs: str) -> str:
    return "\n".join(
        f"if [ -L {quote(d)} ]; then "
        f"{_fail(f'{d} is a symbolic link: refusing to write through it')}; fi" for d in dirs)


def _backup_dir_lines(plan_id: str, path: str) -> str:
    """Ready the plan's backup directory for `path` (pruning older plans' on the first)."""
    plan_dir = quote(f"{BACKUP_ROOT}/{plan_id}")
    root = quote(BACKUP_ROOT)
    parent = quote(posixpath.dirname(BACKUP_ROOT))
    return f"""{_refuse_linked_dirs(posixpath.dirname(BACKUP_ROOT), BACKUP_ROOT)}
{_mkdir(root)}
chown 0:0 {parent} {root}
chmod 0700 {root}
if [ ! -d {plan_dir} ]; then
  mkdir -p {plan_dir}
  ls -1t {root} | grep -E '^[0-9a-f]{{32}}$' \\
    | grep -v -x -e {quote(plan_id)} | tail -n +{KEEP_BACKUPS} \\
    | while read -r old; do rm -rf -- {root}/"$old"; done
fi
{_mkdir(quote(posixpath.dirname(backup_path(plan_id, path))))}"""


def _backup_copy_lines(plan_id: str, path: str) -> str:
    """Take the first backup of `path` for this plan (see the module docstring)."""
    p, b = quote(path), quote(backup_path(plan_id, path))
    return f"""if [ ! -e {b} ] && [ ! -e {b}.absent ]; then
  if [ -e {p} ]; then
    cp -P --preserve=mode,ownership,timestamps {p} {b}.tmp
    if [ -L {b}.tmp ] || [ ! -f {b}.tmp ]; then
      rm -f {b}.tmp; {_fail(f"{path} changed into a link while it was backed up")}
    fi
    mv -f {b}.tmp {b}
  else : > {b}.absent; fi
fi"""


def _backup_lines(plan_id: str, path: str) -> str:
    return f"{_backup_dir_lines(plan_id, path)}\n{_backup_copy_lines(plan_id, path)}"


def stage_script(path: str, *, mode: int, plan_id: str, owner: str = "0:0",
                 source: str = "cat") -> str:
    """The first half of a write, which changes nothing a reader of `path` sees: the new
    content (from what `source` prints) in a temp file beside it, with its mode and owner,
    on disk, and the plan's backup directory ready. Prints the temp file's path; on a
    failure, removes it. commit_script finishes the write."""
    directory = posixpath.dirname(path)
    return f"""set -eu
umask 077
{_refuse_links(path)}
{_mkdir(quote(directory))}
{_refuse_linked_dirs(directory)}
tmp=$(mktemp {quote(directory + "/.cargoship.")}XXXXXX)
trap 'rm -f "$tmp"' EXIT
{source} > "$tmp"
chown {quote(owner)} "$tmp"
chmod {mode:04o} "$tmp"
sync "$tmp"
{_backup_dir_lines(plan_id, path)}
trap - EXIT
printf '%s\\n' "$tmp"
"""


def commit_script(path: str, *, plan_id: str) -> str:
    """The second half of a write, with the staged temp file's path in `$tmp`: back up
    the previous content, then rename the temp file over `path`. Prints `backup` when it
    kept a previous content; on a failure, removes the temp file and leaves `path` as it
    was."""
    p, b = quote(path), quote(backup_path(plan_id, path))
    return f"""set -eu
umask 077
trap 'rm -f "$tmp"' EXIT
{_refuse_links(path)}
{_refuse_linked_dirs(posixpath.dirname(path))}
{_backup_copy_lines(plan_id, path)}
if [ -e {b} ]; then echo backup; fi
{_refuse_links(path)}
mv -f "$tmp" {p}
trap - EXIT
sync {quote(posixpath.dirname(path))}
"""


def write_script(path: str, *, mode: int, plan_id: str, owner: str = "0:0",
                 source: str = "cat") -> str:
    """The script that writes `path` from what `source` prints (the content on stdin, by
    default) and prints `backup` when it kept a previous content: both halves in one."""
    stage = stage_script(path, mode=mode, plan_id=plan_id, owner=owner, source=source)
    return (f"tmp=$( (\n{stage}\n) ) || exit $?\n"
            f"{commit_script(path, plan_id=plan_id)}")


def written(path: str, plan_id: str, stdout: bytes) -> Written:
    """What a write script's output says about the backup it kept."""
    return Written(path, backup_path(plan_id, path) if b"backup" in stdout else None)


def write_file(host: HostWriter, path: str, content: bytes, *, mode: int, plan_id: str,
               owner: str = "0:0") -> Written:
    result = host.run_root(write_script(path, mode=mode, plan_id=plan_id, owner=owner),
                           stdin=content)
    return written(path, plan_id, result.stdout)


def restore_script(item: Written) -> str:
    """Put the previous content back (or remove a file that did not exist before)."""
    p = quote(item.path)
    directory = posixpath.dirname(item.path)
    if item.backup is None:
        return f"set -eu\n{_refuse_links(item.path)}\nrm -f {p}\nsync {quote(directory)}\n"
    b = quote(item.backup)
    return f"""set -eu
umask 077
{_refuse_links(item.backup)}
{_refuse_linked_dirs(directory)}
tmp=$(mktemp {quote(directory + "/.cargoship.")}XXXXXX)
trap 'rm -f "$tmp"' EXIT
cp -P --preserve=mode,ownership,timestamps {b} "$tmp"
sync "$tmp"
mv -f "$tmp" {p}
trap - EXIT
sync {quote(directory)}
"""


def restore_file(host: HostWriter, item: Written) -> None:
    host.run_root(restore_script(item))


def remove_script(path: str, *, plan_id: str) -> str:
    """Delete a file cargoship created, keeping its content as a backup for a restore."""
    p = quote(path)
    return f"""set -eu
umask 077
{_refuse_links(path)}
if [ -e {p} ]; then
{_backup_lines(plan_id, path)}
  rm -f {p}
  sync {quote(posixpath.dirname(path))}
fi
"""


def remove_file(host: HostWriter, path: str, *, plan_id: str) -> Written:
    host.run_root(remove_script(path, plan_id=plan_id))
    return Written(path, backup_path(plan_id, path))


def restore_tree_script(backup_dir: str) -> str:
    """Put back every file a plan backed up on this host (and remove the ones that did not
    exist before it: their `.absent` markers); prints how many paths were restored. For a
    host an apply was killed while rolling back: its backups are the state before that
    apply."""
    if not BACKUPS.fullmatch(backup_dir):
        raise ValueError(f"not a backup directory of cargoship's: {backup_dir!r}")
    b = quote(backup_dir)
    return f"""set -eu
umask 077
{_refuse_linked_dirs(posixpath.dirname(BACKUP_ROOT), BACKUP_ROOT, backup_dir)}
n=0
cd {b}
for saved in $(find . -xdev \\( -type f -o -type l \\) ! -name '*.tmp' | sort); do
  target=${{saved#.}}
  case "$target" in
    {RECORD_PREFIX}*) continue ;;  # apply records are history, not config
    *.absent) rm -f -- "${{target%.absent}}" ;;
    *)
      if [ -L "$saved" ] || [ -L "$target" ] || {{ [ -e "$target" ] && [ ! -f "$target" ]; }}
      then echo "$target: a link or not a regular file: not restored" >&2; exit 3; fi
      dir=$(dirname "$target")
      tmp=$(mktemp "$dir/.cargoship.XXXXXX")
      cp -P --preserve=mode,ownership,timestamps "$saved" "$tmp"
      sync "$tmp"
      mv -f "$tmp" "$target"
      sync "$dir" ;;
  esac
  n=$((n + 1))
done
echo "$n"
"""


def restore_tree(host: HostWriter, backup_dir: str) -> int:
    out = host.run_root(restore_tree_script(backup_dir)).stdout.decode().strip()
    return int(out) if out.isdigit() else 0
