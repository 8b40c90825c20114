# The one remote script of an engine restart: stop, change the files, start, then watch
# the engine on the host, reporting as it goes (executor/swap_output.py says what each
# line it prints means, executor/swap_script.py why it is built this way). After guard.sh,
# flock.sh and files.sh; the generated block on top sets this run's values:
#   T                     the token every line the script says begins with
#   HOST_PATH             PATH (sbin directories included: sudo may keep a user's PATH)
#   INIT SERVICE          systemd|runit|openrc, the engine's service
#   CONTROLLER SWAP       1 or 0: a controller's probe counts API server logs; SWAP 0 is
#                         the watch alone (run again after a lost connection)
#   RUNIT_DIRS INITD APISERVER_LOGS APISERVER_MANIFEST LINE_BYTES   where the probe looks
#   LOCK_DIR LOCK_PATH SWAP_LOCK STALE_AFTER     the host lock and the swap lock
#   STOP_TICK STOP_SLOW_TICK (sleep's seconds), STOP_FAST_TICKS STOP_TICKS (how many
#   looks at a stop are STOP_TICK apart, how many in all), STOP_TIMEOUT (for the message)
#   START_TICK RUN_TICK NUDGE_AFTER ALIVE_EVERY CLOCK_EVERY LOOK_EVERY (hundredths of a
#   second), WATCH_SECONDS, SWAP_LOCK_WAIT ALIVE_FOR (seconds)
#   UNPREPARED GONE NOT_HELD STOP_FAILED START_FAILED UNSAFE WAIT_TIMEOUT INPUT_ENDED
#                         exit codes
#   STEPS, and per step i: OP_i (write|remove|restore|restore_tree), FILE_i, MODE_i,
#   OWNER_i, PLAN_i, BACKUP_i, CONTENT_i (the new content's base64)
# shellcheck disable=SC2154  # the generated block's variables

export LC_ALL=C PATH="$HOST_PATH"
say() { printf '%s\n' "$*" 2>/dev/null; }

# One `state <init> <status line>` line (or `state absent`), as the planner's
# facts/distro.py status_snippet prints it; systemd's process and restart count; a
# controller's API server pod log files (1 + its restarts).
probe() {
  case $INIT in
    systemd)
      if systemctl cat "$SERVICE" >/dev/null 2>&1; then
        # shellcheck disable=SC2059  # the precision is the generated block's number
        printf "state systemd %.${LINE_BYTES}s\n" "$(systemctl is-active "$SERVICE")"
      else echo state absent; fi
      echo "show $(systemctl show -p MainPID -p NRestarts -p SubState "$SERVICE" 2>/dev/null | tr '\n' ' ')"
      ;;
    runit)
      s=
      # shellcheck disable=SC2086  # RUNIT_DIRS is a list of directories, split on blanks
      for d in $RUNIT_DIRS; do [ -e "$d/$SERVICE" ] && { s=$d/$SERVICE; break; }; done
      if [ -n "$s" ]; then
        st=$(sv status "$s" 2>&1); st=${st%%
*}
        # runit's `check` is its Type=notify: a process that runs but has not passed it
        # is starting, as systemd says "activating" until READY.
        case "$st" in run:*) if [ -x "$s"/check ] && ! (cd "$s" && ./check) >/dev/null 2>&1; then st="starting: $st"; fi;; esac
        # shellcheck disable=SC2059  # as above
        printf "state runit %.${LINE_BYTES}s\n" "$st"
      else echo state absent; fi
      ;;
    openrc)
      if [ -e "$INITD/$SERVICE" ]; then
        # shellcheck disable=SC2059  # as above
        printf "state openrc %.${LINE_BYTES}s\n" "$(rc-service "$SERVICE" status 2>&1 | head -n 1)"
      else echo state absent; fi
      ;;
    *) echo state unknown;;
  esac
  if [ "$CONTROLLER" = 1 ]; then
    # APISERVER_LOGS is a pattern (one directory per pod), its files counted: names that
    # are the kubelet's own (<restart>.log).
    # shellcheck disable=SC2086,SC2012
    echo "apiserver-logs $(ls $APISERVER_LOGS/*.log 2>/dev/null | wc -l)"
    # rke2's API server static pod manifest: its uid is the kubelet's config hash of the
    # pod that should run (executor/mirror_pod.py); no such file elsewhere.
    # shellcheck disable=SC2059  # as above
    printf "apiserver-manifest %.64s\n" "$(sed -n 's/^  uid: *//p' "$APISERVER_MANIFEST" 2>/dev/null)"
  fi
}
block() { p=$(probe 2>/dev/null); say "$T $1" && say "$p" && say "$T end"; }
# The host's turn (after the in-progress marker is set): say so, then look at the engine
# as it is before anything happens to it (`before`: its process, restart counts), while
# the node is cordoned and drained rather than after.
turn() { say "$T marked"; block before; }
cleared() { say "$T cleared $1"; }

if [ "$INIT" = runit ]; then
  # runit's service directory, for the quick looks of the stop and the watch: found
  # once, as the head runs (before the host's turn when preloaded).
  # shellcheck disable=SC2086  # as in probe
  sd=$(for d in $RUNIT_DIRS; do [ -e "$d/$SERVICE" ] && echo "$d/$SERVICE" && break; done)
fi

# The stop and the start only ask the init system and return: waiting for the state is
# this script's business (`systemctl start` of an engine that never becomes ready blocks
# forever, and so can an openrc start script).
stop_engine() {
  case $INIT in
    systemd) systemctl stop "$SERVICE";;
    runit) sv down "$sd";;  # asks, returns; the caller polls
    openrc) rc-service "$SERVICE" stop;;
  esac
}
start_engine() {
  case $INIT in
    systemd) systemctl start --no-block "$SERVICE";;
    runit) sv up "$sd";;
    openrc)
      # openrc has no --no-block: detach the start script and poll instead.
      setsid rc-service "$SERVICE" start </dev/null >/dev/null 2>&1 &
      ;;
  esac
}

# Shell patterns of the probe, for every init system: down (or gone); running; down and
# not coming back by itself (runit says `want up` between restarts).
stopped() {
  case "$1" in
    "state absent"*|"state systemd inactive"*|"state systemd failed"*|"state runit down:"*|\
"state runit fail:"*|"state runit warning:"*|"state openrc "*stopped*|"state openrc "*crashed*)
      return 0;;
  esac
  return 1
}
running() {
  case "$1" in "state systemd active"*|"state runit run:"*|"state openrc "*started*) return 0;; esac
  return 1
}
plainly_down() {
  case "$1" in "state systemd inactive"*|"state runit down:"*|"state openrc "*stopped*) return 0;; esac
  return 1
}

# The stop's look at the engine at each tick. On runit, runsv's supervise/stat (one word,
# `down` once the service's process is gone) is read with a shell builtin, and the probe
# (`sv` and two subshells) runs only once it says anything but `run` or `finish`: eight
# engines stopping together, each host probing every 0.02 s, made each stop's end show
# 0.03-0.18 s late on the lab's shared CPUs. `p` stays empty until the service is down
# or something unexpected needs a probe.
# `down` alone is not the end of the stop: a service that crashed within a second of its
# start reads `down` while runsv sleeps a second before restarting it (runit's runsv.c:
# `sleep(1)` after update_status), our `sv down` still unread in its control pipe and its
# supervise/status still wanting up. The `sv up` of the start would then be skipped (sv.c
# `control()` sends nothing when the status already wants what is asked), and runsv,
# awake, would take the queued down and leave the engine stopped. So once stat says
# `down`, `sv status` must no longer say `want up`: runsv has taken the stop.
stop_look() {
  if [ "$INIT" != runit ]; then p=$(probe 2>/dev/null); return; fi
  k=; read -r k 2>/dev/null < "$sd/supervise/stat"
  case "$k" in
    down*) p=$(sv status "$sd" 2>&1); p=${p%%
*}
      case "$p" in *"want up"*) p=;; *) p="state runit $p";; esac;;
    run*|finish*) p=;;
    *) p=$(probe 2>/dev/null);;
  esac
}

# The watch's look at the engine: the probe at every tick; on runit the probe only when
# supervise/ says something changed, or once every LOOK_EVERY. That look is shell
# builtins and the service's `check`, where the probe runs `sv` and two subshells more:
# while a wave of engines starts, every program a host runs slows the others sharing its
# CPUs.
watch_look() {
  if [ "$INIT" != runit ]; then p=$(probe 2>/dev/null); return; fi
  k=; r=; read -r k 2>/dev/null < "$sd/supervise/stat"; read -r r 2>/dev/null < "$sd/supervise/pid"; k="$k $r"
  case "$k" in run*) if [ -x "$sd/check" ] && (cd "$sd" && ./check) >/dev/null 2>&1; then k="$k ok"; fi;; esac
  age=$((age + tick))
  if [ "$k" != "$key" ] || [ $age -ge "$LOOK_EVERY" ]; then key=$k; age=0; p=$(probe 2>/dev/null); fi
}

# The staged temp files go with the script, unless put in place (their s<i> then empty):
# a script cancelled before its GO, or failed, leaves none behind.
unstage() {
  us_i=0
  while [ "$us_i" -lt "$STEPS" ]; do
    eval "us_f=\${s$us_i-}"
    [ -z "$us_f" ] || rm -f -- "$us_f"
    us_i=$((us_i + 1))
  done
}

# `openlock`: the swap lock on fd 9 unless the head opened it: the directory checked and
# made root's alone, the file created root's alone if absent, opened read-only (an flock
# needs no more).
openlock() {
  [ -z "$sl" ] || return 0
  if ! cs_dir "$LOCK_DIR" fix f; then echo "$why; nothing was stopped" >&2; return "$UNSAFE"; fi
  [ -e "$SWAP_LOCK" ] || ( umask 077; : >>"$SWAP_LOCK" )
  exec 9<"$SWAP_LOCK"; sl=1
}

# `held ID`: the host lock is still the apply's: its id, touched within STALE_AFTER.
held() {
  [ "$1" != - ] || return 0
  # How a lock file written with that id begins (lock.id_prefix), quoted by hand.
  cs_w='{"id": "'"$1"'", '
  if [ ! -f "$LOCK_PATH" ] || [ -L "$LOCK_PATH" ] || [ "$(head -c ${#cs_w} "$LOCK_PATH")" != "$cs_w" ]; then
    why="$LOCK_PATH no longer holds lock $1 (taken over or removed)"; return 1
  fi
  cs_a=$(stat -c %Y "$LOCK_PATH" 2>/dev/null) || { why="$LOCK_PATH is gone (removed)"; return 1; }
  cs_a=$(( $(date +%s) - cs_a ))
  [ "$cs_a" -le "$STALE_AFTER" ] && return 0
  why="lock $1 in $LOCK_PATH was last touched $cs_a s ago (its apply is gone or stuck)"; return 1
}

# True unless the watcher of the input (go) saw it end: killed here, it has read nothing,
# and once it is reaped no signal of its can come any more. With KILL, as every subshell
# of this script is ended: dash loses a TERM that reaches a subshell before it has reset
# the traps it inherited, and the watcher is forked just before `swap`, whose checks can
# take less time than a loaded host takes to schedule it. Its TERM lost, the watcher read
# on and `wait` waited for the end of an input the executor holds open: the script
# stalled at its GO while its keepalive talked, until ALIVE_FOR, then the executor took
# the silence for a lost connection (CI: rollouts stalled for 174-330 s, 2026-12).
w=
unwatch() { [ -n "$w" ] || return 0; kill -9 "$w" 2>/dev/null; wait "$w" 2>/dev/null; cs_r=$?; w=; [ "$cs_r" -ne "$INPUT_ENDED" ]; }

# `step I`: the values of step I, in op, file, mode, owner, plan, backup, content.
step() {
  eval "op=\$OP_$1 file=\$FILE_$1 mode=\$MODE_$1 owner=\$OWNER_$1 plan=\$PLAN_$1"
  eval "backup=\$BACKUP_$1 content=\$CONTENT_$1"
}
stage_step() { printf '%s\n' "$content" | cs_stage "$file" "$mode" "$owner" "$plan" base64; }

# `swap ID`: the checks, then the stop, each file's commit and the start, under the swap
# lock (opened by the head on fd 9).
swap() {
  trap '' HUP PIPE  # a failed write returns an error: `say` is a check
  # Before the stop, cargoship gone (its input ended: USR1 from the watcher) or told to:
  # give up, removing what was staged (the EXIT trap). The keepalive below must not
  # outlive the script, or it writes `alive` to the channel for ALIVE_FOR seconds (a
  # reader waiting for the script's end waited 150 s): until the EXIT trap knows its pid
  # a signal is only noted, and that trap kills it with KILL, since a TERM that reaches
  # a subshell before it has reset the traps it inherited is lost (dash).
  cs_gone=; trap 'cs_gone=1' INT TERM USR1
  # A blocking stop (systemctl waits for the unit, up to its TimeoutStopSec), a slow sync
  # or the swap lock's wait says nothing for a while: something must, or the executor
  # takes the silence for a lost connection. Gone with the script, and bounded all the
  # same.
  ( i=0; while [ $i -lt "$ALIVE_FOR" ] && sleep 1 >/dev/null; do say "$T alive" || exit 0; i=$((i + 1)); done ) </dev/null 9<&- &
  ka=$!
  trap 'kill -9 $ka 2>/dev/null; unwatch; unstage' EXIT
  trap 'exit "$GONE"' INT TERM USR1
  [ -z "$cs_gone" ] || exit "$GONE"
  # Until the start is asked for, the files are changing: a plan's snapshot waits for this
  # lock (the keepalive and the watcher closed fd 9: neither may hold it on). Bounded:
  # past it, a clear error and nothing stopped.
  openlock || exit $?
  cs_flock -x 9 "$SWAP_LOCK_WAIT" || { echo "timed out after $SWAP_LOCK_WAIT s waiting for $SWAP_LOCK (held by another process); nothing was stopped" >&2; exit "$WAIT_TIMEOUT"; }
  if ! held "$1"; then echo "$why; nothing was stopped" >&2; exit "$NOT_HELD"; fi
  # The point of no return: only with the channel to cargoship open both ways.
  say "$T go" || exit "$GONE"
  unwatch || exit "$GONE"
  trap - INT TERM
  trap : USR1  # nobody sends it now; a command trap is not inherited
  e=$(stop_engine 9>&- 2>&1) || { echo "stopping $SERVICE failed: $e" >&2; exit "$STOP_FAILED"; }
  n=0
  while :; do
    stop_look
    stopped "$p" && break
    n=$((n + 1))
    if [ $n -ge "$STOP_TICKS" ]; then
      [ -n "$p" ] || p=$(probe 2>/dev/null)
      echo "$SERVICE did not stop within $STOP_TIMEOUT s: $(echo "$p" | head -n 1)" >&2; exit "$STOP_FAILED"
    fi
    if [ $n -lt "$STOP_FAST_TICKS" ]; then sleep "$STOP_TICK"; else sleep "$STOP_SLOW_TICK"; fi
  done
  say "$T stopped $(date +%s)"
  # Each step in a subshell (files.sh), its stdout (`backup`, a count) its result; a
  # write's content staged before (its temp file in s<i>).
  i=0
  while [ $i -lt "$STEPS" ]; do
    step $i
    eval "staged=\${s$i-}"
    case $op in
      write) r=$(cs_commit "$file" "$plan" "$staged" </dev/null); rc=$?; eval "s$i=";;
      remove) r=$(cs_remove "$file" "$plan" </dev/null); rc=$?;;
      restore) r=$(cs_restore "$file" "$backup" </dev/null); rc=$?;;
      restore_tree) r=$(cs_restore_tree "$backup" </dev/null); rc=$?;;
      *) echo "step $i: unknown operation $op" >&2; exit "$UNPREPARED";;
    esac
    if [ $rc -ne 0 ]; then exit $rc; fi
    # shellcheck disable=SC2086  # its first word
    set -- $r; say "$T done $i ${1:-new}"
    i=$((i + 1))
  done
  # Right before the start, a controller's API server pod logs are counted again (the old
  # config's pod may have restarted once more while the engine stopped). A worker's probe
  # has nothing the `before` one lacks: no probe, one program less between the last file
  # and the start.
  if [ "$CONTROLLER" = 1 ]; then block starting; fi
  # The engine must not inherit the lock (an openrc daemon would hold it on).
  e=$(start_engine 9>&- 2>&1) || { echo "starting $SERVICE failed: $e" >&2; exit "$START_FAILED"; }
  flock -u 9 2>/dev/null; exec 9<&-
  say "$T started"
  kill -9 $ka 2>/dev/null  # KILL: a TERM can be lost (see unwatch)
  trap - PIPE EXIT  # its pid may be another process's by the script's end
}

# After `started`, the engine is probed, and a probe printed only when it changed, until
# WATCH_SECONDS or until the executor stops reading (a line then fails to write). Until
# the engine runs, each look comes a twentieth of the time waited so far after the last,
# between START_TICK and RUN_TICK (executor/polling.py paces the executor's own looks so),
# then every RUN_TICK: a start the lab's engines make in 2 s is still seen within a tenth
# of a second, and a real one of 30-120 s costs 110-290 looks, not the 600-2400 of a fixed
# START_TICK, each of them programs run (systemctl asking PID 1) on a host busy starting
# its engine. The start is asked for again when the service stays plainly down for
# NUDGE_AFTER: a start the init system lost (the stop waits until runit has taken it, see
# stop_look, so runit's own skip is not one of them).
watch() {
  end=$(( $(date +%s) + WATCH_SECONDS ))
  # Times in hundredths of a second, so the shell's integer arithmetic can count them.
  last=; quiet=0; down=0; clock=0; tick=$START_TICK; waited=0
  key=x; age=0
  while :; do
    watch_look
    if [ "$p" != "$last" ]; then
      # shellcheck disable=SC2015  # any of the three writes failing ends the watch
      say "$T state" && say "$p" && say "$T end" || exit 0
      last=$p; quiet=0
    fi
    if running "$p"; then tick=$RUN_TICK
    elif [ "$tick" -lt "$RUN_TICK" ]; then
      tick=$((waited / 20))
      if [ "$tick" -lt "$START_TICK" ]; then tick=$START_TICK; fi
      if [ "$tick" -gt "$RUN_TICK" ]; then tick=$RUN_TICK; fi
    fi
    case "$p" in
      *"want up"*) down=0;;
      *) if plainly_down "$p"; then down=$((down + tick)); else down=0; fi;;
    esac
    if [ $down -ge "$NUDGE_AFTER" ]; then start_engine >/dev/null 2>&1 9>&-; down=0; fi
    quiet=$((quiet + tick))
    if [ $quiet -ge "$ALIVE_EVERY" ]; then say "$T alive" || exit 0; quiet=0; fi
    # The clock once a second, not at every tick: `date` is a program, and while an
    # engine starts every program the host runs slows it down.
    clock=$((clock + tick))
    if [ $clock -ge "$CLOCK_EVERY" ]; then clock=0; if [ "$(date +%s)" -ge "$end" ]; then say "$T deadline"; exit 0; fi; fi
    waited=$((waited + tick))
    sleep "$((tick / 100)).$((tick / 10 % 10))$((tick % 10))"
  done
}
main() { if [ "$SWAP" = 1 ]; then swap - && watch; else watch; fi; }

# `go ID`: from GO on the shell runs `swap`, and does not read its input, so a watcher
# does, on a copy of it (an asynchronous list's input is /dev/null unless redirected):
# its end means cargoship is gone (USR1: swap gives up at once). After GO, cargoship
# sends nothing until the host is back (`finish`), so the watcher reads nothing but that
# end; `swap` kills it before the stop.
go() {
  trap 'exit "$GONE"' USR1
  exec 8<&0
  # shellcheck disable=SC2034  # cs_l: what is read is never used, only that it was
  ( exec 0<&8 8<&- 9<&-; IFS= read -r cs_l || { kill -USR1 $$ 2>/dev/null; exit "$INPUT_ENDED"; } ) &
  w=$!
  exec 8<&-
  swap "$1" </dev/null && { watch </dev/null & }
}

# The head's own work, before the host's turn when preloaded: the lock directory checked,
# changing nothing (a script cancelled before GO leaves no trace), the swap lock opened on
# fd 9 if it is there (after the apply's first restart of the host it is; only GO's
# `swap` takes it: see `openlock`), then each new content staged. A host that has run it
# has changed nothing a reader of its files sees.
if [ "$SWAP" = 1 ]; then
  # A write that fails before GO (the `before` probe of a client that just died) ends the
  # script as the end of its input does: removing what it staged.
  trap unstage EXIT
  trap 'exit "$UNPREPARED"' HUP INT TERM PIPE
  if ! cs_dir "$LOCK_DIR" check f; then echo "$why; nothing was stopped" >&2; exit "$UNSAFE"; fi
  sl=; if [ -f "$SWAP_LOCK" ]; then exec 9<"$SWAP_LOCK"; sl=1; fi
  # A staging failure ends the script before anything was stopped or changed.
  i=0
  while [ $i -lt "$STEPS" ]; do
    step $i
    if [ "$op" = write ]; then eval "s$i=\$(stage_step)" || exit "$UNPREPARED"; fi
    i=$((i + 1))
  done
  say "$T staged"
fi
