# Atomic file writes on a host, with the previous content kept as a backup: the functions
# of executor/file_writes.py's scripts and of the restart script's steps (its docstring says
# why each step is as it is). Each runs in its own subshell, with set -eu: a failure
# removes its temp file and leaves the target as it was.
# Set by the generated block on top: BACKUP_ROOT, RECORD_PREFIX, KEEP_BACKUPS,
# NOT_REGULAR (the exit code of a refusal) and ROOT_IDS (uid:gid of the backup
# directories: 0:0 on every host).
# shellcheck disable=SC2154  # the generated block's variables

cs_fail() { echo "$1" >&2; exit "$NOT_REGULAR"; }
# `cs_parent PATH`: PATH's directory in $cs_d (no program: dirname is one).
cs_parent() { case $1 in /*/*) cs_d=${1%/*};; /*) cs_d=/;; *) cs_d=.;; esac; }
# Stops the script when a path is a link or exists as a non-file.
cs_refuse_links() {
  for cs_p in "$@"; do
    if [ -L "$cs_p" ] || { [ -e "$cs_p" ] && [ ! -f "$cs_p" ]; }; then
      cs_fail "$cs_p is a link or not a regular file: refusing to write through it"
    fi
  done
}
cs_refuse_linked_dirs() {
  for cs_p in "$@"; do
    if [ -L "$cs_p" ]; then cs_fail "$cs_p is a symbolic link: refusing to write through it"; fi
  done
}
# The directory is there on every write but the first: no program then (a wave of
# restarts runs every host's write at once, and each program slows the others).
cs_mkdir() { [ -d "$1" ] || mkdir -p "$1"; }

# `cs_backup_dir PLAN PATH`: ready the plan's backup directory for PATH (pruning older
# plans' on the first backup a plan takes on this host: all but the newest KEEP_BACKUPS).
cs_backup_dir() {
  cs_refuse_linked_dirs "${BACKUP_ROOT%/*}" "$BACKUP_ROOT"
  cs_mkdir "$BACKUP_ROOT"
  chown "$ROOT_IDS" "${BACKUP_ROOT%/*}" "$BACKUP_ROOT"
  chmod 0700 "$BACKUP_ROOT"
  if [ ! -d "$BACKUP_ROOT/$1" ]; then
    mkdir -p "$BACKUP_ROOT/$1"
    # Newest first: `ls -t` sorts by time, which a glob cannot; only names of 32 hex
    # digits are kept.
    # shellcheck disable=SC2010
    ls -1t "$BACKUP_ROOT" | grep -E '^[0-9a-f]{32}$' \
      | grep -v -x -e "$1" | tail -n +"$KEEP_BACKUPS" \
      | while read -r old; do rm -rf -- "${BACKUP_ROOT:?}/$old"; done
  fi
  cs_b=$BACKUP_ROOT/$1$2
  cs_mkdir "${cs_b%/*}"
}

# `cs_backup_copy PLAN PATH`: take the first backup of PATH for this plan. A write run
# again (after a reconnection, when the first run's answer was lost) must not back up the
# content that run just wrote; a path that did not exist gets an `.absent` marker instead,
# so the run again still knows that a restore means removing the file.
cs_backup_copy() {
  cs_b=$BACKUP_ROOT/$1$2
  if [ ! -e "$cs_b" ] && [ ! -e "$cs_b.absent" ]; then
    if [ -e "$2" ]; then
      # `cp -P` never copies a link's target, and the copy is checked.
      cp -P --preserve=mode,ownership,timestamps "$2" "$cs_b.tmp"
      if [ -L "$cs_b.tmp" ] || [ ! -f "$cs_b.tmp" ]; then
        rm -f "$cs_b.tmp"; cs_fail "$2 changed into a link while it was backed up"
      fi
      mv -f "$cs_b.tmp" "$cs_b"
    else : > "$cs_b.absent"; fi
  fi
}

# `cs_stage PATH MODE OWNER PLAN cat|base64`: the first half of a write, which changes
# nothing a reader of PATH sees: the new content (stdin, or its base64) in a temp file
# beside it (so the final rename is atomic on the same filesystem), with its mode and
# owner, on disk, and the plan's backup directory ready. Prints the temp file's path; on
# a failure, removes it. cs_commit finishes the write.
cs_stage() (
  set -eu
  umask 077
  cs_refuse_links "$1"
  cs_parent "$1"
  cs_mkdir "$cs_d"
  cs_refuse_linked_dirs "$cs_d"
  tmp=$(mktemp "$cs_d/.cargoship.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  if [ "$5" = base64 ]; then base64 -d > "$tmp"; else cat > "$tmp"; fi
  chown "$3" "$tmp"
  chmod "$2" "$tmp"
  sync "$tmp"
  cs_backup_dir "$4" "$1"
  trap - EXIT
  printf '%s\n' "$tmp"
)

# `cs_commit PATH PLAN TMP`: the second half: back up the previous content, then rename
# the staged TMP over PATH. Prints `backup` when it kept a previous content; on a
# failure, removes TMP and leaves PATH as it was.
cs_commit() (
  set -eu
  umask 077
  tmp=$3
  trap 'rm -f "$tmp"' EXIT
  cs_refuse_links "$1"
  cs_parent "$1"
  cs_refuse_linked_dirs "$cs_d"
  cs_backup_copy "$2" "$1"
  if [ -e "$BACKUP_ROOT/$2$1" ]; then echo backup; fi
  # Checked again right before the rename: the backup copy takes a moment.
  cs_refuse_links "$1"
  mv -f "$tmp" "$1"
  trap - EXIT
  sync "$cs_d"
)

# `cs_restore PATH BACKUP`: put the previous content back (or, BACKUP empty, remove a
# file that did not exist before).
cs_restore() (
  set -eu
  cs_parent "$1"
  if [ -z "$2" ]; then
    cs_refuse_links "$1"
    rm -f "$1"
    sync "$cs_d"
    exit 0
  fi
  umask 077
  cs_refuse_links "$2"
  cs_refuse_linked_dirs "$cs_d"
  tmp=$(mktemp "$cs_d/.cargoship.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  cp -P --preserve=mode,ownership,timestamps "$2" "$tmp"
  sync "$tmp"
  mv -f "$tmp" "$1"
  trap - EXIT
  sync "$cs_d"
)

# `cs_remove PATH PLAN`: delete a file cargoship created, keeping its content as a backup
# for a restore.
cs_remove() (
  set -eu
  umask 077
  cs_refuse_links "$1"
  if [ -e "$1" ]; then
    cs_backup_dir "$2" "$1"
    cs_backup_copy "$2" "$1"
    rm -f "$1"
    cs_parent "$1"
    sync "$cs_d"
  fi
)

# `cs_restore_tree DIR`: put back every file a plan backed up on this host (DIR, its
# backups), and remove the ones that did not exist before it (their `.absent` markers);
# prints how many paths were restored. For a host an apply was killed while rolling
# back: its backups are the state before that apply.
cs_restore_tree() (
  set -eu
  umask 077
  cs_refuse_linked_dirs "${BACKUP_ROOT%/*}" "$BACKUP_ROOT" "$1"
  n=0
  cd "$1"
  # shellcheck disable=SC2044  # backups hold engine config paths: no blanks in them
  for saved in $(find . -xdev \( -type f -o -type l \) ! -name '*.tmp' | sort); do
    target=${saved#.}
    case "$target" in
      "$RECORD_PREFIX"*) continue ;;  # apply records are history, not config
      *.absent) rm -f -- "${target%.absent}" ;;
      *)
        if [ -L "$saved" ] || [ -L "$target" ] || { [ -e "$target" ] && [ ! -f "$target" ]; }
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
)
