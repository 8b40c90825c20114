# Prints `ours`, `new`, or `held`/`stale` followed by a LOCK-fact listing of the existing
# lock; creates or replaces the lock (content from stdin) unless `held`: held while its
# age (host clock, whole seconds) is at most STALE_AFTER (the generated block's).
# shellcheck disable=SC2154  # STALE_AFTER: the generated block's
if ours; then touch -c "$p"; echo ours; exit 0; fi
if [ -f "$p" ]; then
  mt=$(stat -c %Y "$p"); now=$(date +%s)
  if [ $((now - mt)) -le "$STALE_AFTER" ]; then v=held; else v=stale; fi
  echo "$v"; echo "lock $mt $now"
  head -c 4096 "$p" | base64 | tr -d '\n'; echo
  if [ "$v" = held ]; then exit 0; fi
else echo new; fi
# Temp file in the same directory, then rename: readers see old or new, never half.
t=$(mktemp "$p.XXXXXX")
trap 'rm -f "$t"' EXIT
cat >"$t"
chmod 0600 "$t"
mv -f "$t" "$p"
