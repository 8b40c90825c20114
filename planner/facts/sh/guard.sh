# Root's alone: the checks of LOCK_DIR and STATE_DIR (planner/facts/lock_holder.py says why).
# Set by the generated block on top: OWNER_UID (0 on every host), and for cs_guard
# LOCK_DIR and STATE_DIR.
# shellcheck disable=SC2154  # OWNER_UID, LOCK_DIR, STATE_DIR: the generated block's

# `cs_dir DIR check|fix|tighten f|fd [UID_MODE]`: returns 1 with a one-line reason in $why
# when DIR, its parent or an entry of DIR is a link, is owned by anyone but OWNER_UID or is
# writable by anyone but it; entries must be regular files (f) or files and directories
# (fd). UID_MODE: what one stat said of the parent (cs_guard's), used where DIR is absent.
# `fix` (the executor) creates DIR 0700 when absent and takes group and world access away
# from DIR (and, for f, from its files); `tighten` does the same to a DIR that exists,
# creating none; `check` (a plan) changes nothing. Octal in $(( )) is POSIX; stat -c is
# GNU and busybox alike. No `local` (not POSIX): cs_ prefixes. An entry gone between the
# listing and its look (`cs_gone`: a racing run's lock temp, renamed into place under the
# mutex) has nothing left to judge.
cs_gone() { [ ! -e "$1" ] && [ ! -L "$1" ]; }
# `cs_own PATH d|f|fd [UID_MODE]`: UID_MODE is what one stat for many paths said of PATH
# (cs_dir), else PATH is stat'ed here.
cs_own() {
  if [ -L "$1" ]; then why="$1 is a symbolic link"; return 1; fi
  case $2 in
    d) [ -d "$1" ] || { why="$1 is not a directory"; return 1; };;
    f) [ -f "$1" ] || { why="$1 is not a regular file"; return 1; };;
    *) [ -f "$1" ] || [ -d "$1" ] || { why="$1 is neither a file nor a directory"; return 1; };;
  esac
  cs_s=${3:-$(stat -c '%u %a' -- "$1" 2>/dev/null)} || { why="cannot stat $1"; return 1; }
  [ -n "$cs_s" ] || { why="cannot stat $1"; return 1; }
  cs_u=${cs_s% *}; cs_m=${cs_s#* }
  if [ "$cs_u" != "$OWNER_UID" ]; then why="$1 is owned by uid $cs_u"; return 1; fi
  if [ $((0$cs_m & 022)) -ne 0 ]; then why="$1 is mode 0$cs_m (writable by others)"; return 1; fi
}
cs_nl='
'
# The next line of cs_pre into cs_l (empty when none is left).
cs_next() {
  case $cs_pre in
    *"$cs_nl"*) cs_l=${cs_pre%%"$cs_nl"*}; cs_pre=${cs_pre#*"$cs_nl"};;
    *) cs_l=$cs_pre; cs_pre=;;
  esac
}
cs_dir() {
  why=; cs_D=$1; cs_A=$2; cs_T=$3; cs_U=${4:-}  # UID_MODE: what a stat said of the parent
  if [ "$cs_A" = fix ] && cs_gone "$cs_D"; then  # made only under a parent root's alone
    if ! cs_own "${cs_D%/*}" d; then why="$why: refusing to use $cs_D"; return 1; fi
    if ! ( umask 077; mkdir -- "$cs_D" 2>/dev/null ) && cs_gone "$cs_D"; then
      why="cannot create $cs_D"; return 1
    fi  # or made meanwhile by a racing run: judged below like any other
  fi
  # The parent, DIR and its entries in one stat ("uid mode", a line each, in order), not
  # a stat each: a program per entry on every plan. Where any is gone by then, stat
  # fails, cs_pre stays empty and each is stat'ed alone (cs_own).
  set --
  cs_pre=
  if [ -d "$cs_D" ] && [ ! -L "$cs_D" ]; then
    for cs_f in "$cs_D"/* "$cs_D"/.[!.]* "$cs_D"/..?*; do
      cs_gone "$cs_f" || set -- "$@" "$cs_f"
    done
    cs_pre=$(stat -c '%u %a' -- "${cs_D%/*}" "$cs_D" "$@" 2>/dev/null) || cs_pre=
  fi
  cs_next
  [ -n "$cs_l" ] || cs_l=$cs_U
  if ! cs_own "${cs_D%/*}" d "$cs_l"; then why="$why: refusing to use $cs_D"; return 1; fi
  [ -e "$cs_D" ] || [ -L "$cs_D" ] || return 0
  cs_next
  if ! cs_own "$cs_D" d "$cs_l"; then
    why="$why: refusing to use it (it must be root's alone)"; return 1
  fi
  cs_dm=$cs_m
  for cs_f in "$@"; do
    cs_next
    cs_gone "$cs_f" && continue
    if ! cs_own "$cs_f" "$cs_T" "$cs_l"; then
      cs_gone "$cs_f" && continue
      why="$why: refusing to use $cs_D"; return 1
    fi
    if [ "$cs_A" != check ] && [ "$cs_T" = f ] && [ $((0$cs_m & 077)) -ne 0 ] &&
        ! chmod go= -- "$cs_f" 2>/dev/null && ! cs_gone "$cs_f"; then
      why="cannot make $cs_f root's alone"; return 1
    fi
  done
  if [ "$cs_A" != check ] && [ $((0$cs_dm & 077)) -ne 0 ]; then
    chmod go= -- "$cs_D" || { why="cannot make $cs_D root's alone"; return 1; }
  fi
  return 0
}
# `cs_guard check|fix`: LOCK_DIR and STATE_DIR checked (check), or also LOCK_DIR created
# and both tightened (fix); 1 with the reason in $why when one is unsafe. Both are checked
# before either is fixed: a refusal changes nothing. STATE_DIR is made when something is
# kept there (a marker, a record): a lock taken by an apply that is then refused leaves
# nothing behind.
cs_guard() {
  # Neither directory there yet (a host cargoship has not changed): their parents, all a
  # check then reads, in one stat. Used only where cs_dir finds its directory absent.
  cs_up1=; cs_up2=
  if cs_gone "$LOCK_DIR" && cs_gone "$STATE_DIR"; then
    cs_up=$(stat -c '%u %a' -- "${LOCK_DIR%/*}" "${STATE_DIR%/*}" 2>/dev/null) || cs_up=
    case $cs_up in *"$cs_nl"*) cs_up1=${cs_up%%"$cs_nl"*}; cs_up2=${cs_up#*"$cs_nl"};; esac
  fi
  if ! cs_dir "$LOCK_DIR" check f "$cs_up1" || ! cs_dir "$STATE_DIR" check fd "$cs_up2"; then
    return 1
  fi
  [ "$1" = fix ] || return 0
  if ! cs_dir "$LOCK_DIR" fix f || ! cs_dir "$STATE_DIR" tighten fd; then return 1; fi
}
