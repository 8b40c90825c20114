"""Remove what a killed run left behind: the disconnect step of a real run.

A run killed between creating a temp file and renaming it leaves the temp behind:
`.cargoship.XXXXXX` beside a target or a record, `lock.XXXXXX` beside the lock, the
in-progress marker's `.tmp`, a backup's `.tmp`. They hold no state anyone needs (the rename
is what makes a write count), and some hold credentials, so an apply removes them once it
holds every host's lock (no other run can be writing there) and before it lets go. A plan
never removes anything: it only reads.
"""

from __future__ import annotations

import posixpath

from planner.desired.engine_files import placement_of
from planner.facts.distro import LAYOUTS
from planner.facts.engine_config import EngineSettings, Locations
from planner.facts.interrupted import MARKER
from planner.facts.lock_holder import GUARD
from planner.host_paths import RECORD_DIR
from planner.hosts.batch import quote
from planner.safetext import decimal

from .file_writes import BACKUP_ROOT
from .host_lock import BOUNDED_FLOCK, LOCK_DIR, MUTEX_PATH, MUTEX_WAIT
from .remote import HostWriter


def temp_cleanup_script(distro: str, locations: Locations | None = None) -> str:
    """`locations`: where this host's engine reads cargoship's files when its config
    moves them (data-dir, private-registry, a relocated config file): the writes went
    there, so may their temps."""
    layout = LAYOUTS[distro]
    dirs = [layout.config_dir, f"{layout.config_dir}/config.yaml.d", layout.manifests_dir,
            RECORD_DIR]
    if locations is not None:
        dirs += [locations.dropin_dir, posixpath.dirname(locations.registries),
                 locations.manifests_dir]
    dirs = list(dict.fromkeys(dirs))
    # Only names our writers make: exactly six random characters after the prefix.
    temps = " ".join(f"{quote(d)}/.cargoship.??????" for d in dirs)
    m = quote(MUTEX_PATH)
    # The lock temps: only in a lock directory that is root's alone (checked here, made so
    # by the lock scripts), under the lock's mutex (a run acquiring a lock renames its temp
    # while holding it), opened read-only, its wait bounded: past it they are left for the
    # next apply.
    return f"""set -u
n=0
for f in {temps} {quote(MARKER)}.tmp; do
  if [ -f "$f" ] || [ -L "$f" ]; then rm -f -- "$f" && n=$((n + 1)); fi
done
if [ -d {quote(BACKUP_ROOT)} ] && [ ! -L {quote(BACKUP_ROOT)} ]; then
  n=$((n + $(find {quote(BACKUP_ROOT)} -xdev -name '*.tmp' -type f -print -delete | wc -l)))
fi
{GUARD}{BOUNDED_FLOCK}if cs_dir {quote(LOCK_DIR)} check f && [ -f {m} ]; then
  exec 9<{m}
  if cs_flock -x 9 {MUTEX_WAIT}; then
    for f in {quote(LOCK_DIR)}/lock.??????; do
      if [ -f "$f" ]; then rm -f -- "$f" && n=$((n + 1)); fi
    done
  fi
fi
echo "$n"
"""


def remove_temps(host: HostWriter, distro: str, settings: EngineSettings | None = None) -> int:
    """How many leftover temp files were removed from the host (`settings`: its engine's,
    as the plan read them: where its config puts cargoship's files)."""
    locations = placement_of(settings, LAYOUTS[distro]).locations
    out = host.run_root(temp_cleanup_script(distro, locations)).stdout.decode().strip()
    return decimal(out) or 0
