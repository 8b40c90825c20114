# `yes` after touching (ACTION touch) or removing (ACTION remove) the lock if it is still
# this run's; `no`, changing nothing, if it is gone or another run's.
# shellcheck disable=SC2154  # ACTION: the generated block's
if ours; then
  case $ACTION in
    touch) touch -c "$p";;
    remove) rm -f "$p";;
    *) echo "unknown lock action $ACTION" >&2; exit 2;;
  esac
  echo yes
else echo no; fi
