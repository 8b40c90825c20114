# The common head of every lock script (executor/host_lock.py): the directories checked
# (created and made root's alone if need be), the mutex, `ours`. After guard.sh and
# flock.sh; the generated block on top sets LOCK_PATH, MUTEX, MUTEX_WAIT, WANT (how a lock
# file written with this run's id begins: lock.id_prefix), UNSAFE and WAIT_TIMEOUT.
# shellcheck disable=SC2154  # the generated block's variables
set -eu
# sbin directories are missing from a non-root user's PATH on several distros, and sudo
# may keep that PATH.
export LC_ALL=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Root's umask may be anything: whatever is created here is root's alone.
umask 077
if ! cs_guard fix; then echo "$why; nothing was changed" >&2; exit "$UNSAFE"; fi
# The mutex, on fd 9 (held until the script exits): opened read-only (an flock needs no
# more), its wait bounded.
[ -e "$MUTEX" ] || : >>"$MUTEX"
exec 9<"$MUTEX"
if ! cs_flock -x 9 "$MUTEX_WAIT"; then
  echo "timed out after $MUTEX_WAIT s waiting for $MUTEX; nothing was changed" >&2
  exit "$WAIT_TIMEOUT"
fi
p=$LOCK_PATH
# `head -c` counts bytes; the prefix is ASCII, so bytes are characters.
ours() { [ -f "$p" ] && [ "$(head -c ${#WANT} "$p")" = "$WANT" ]; }
