# `cs_flock -x|-s FD SECONDS`: an flock on an open FD whose wait is bounded, returning 1
# once SECONDS have passed without it. Not `flock -w`: BusyBox's flock (Alpine) has no -w,
# only -n, so this tries -n every 0.05 s; it also lets a trapped signal end the wait
# within 0.05 s (a foreground flock holds a trap back until it returns).
cs_flock() {
  cs_t=0
  until flock -n "$1" "$2"; do
    [ "$cs_t" -lt $(($3 * 20)) ] || return 1
    sleep 0.05; cs_t=$((cs_t + 1))
  done
}
