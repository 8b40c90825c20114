# The lock as root sees it, after the same checks as the executor's (changing nothing):
# `unsafe <why>`, `none`, or `lock <mtime> <now>` and the base64 of its first 4096 bytes.
# shellcheck disable=SC2154  # LOCK_PATH: the generated block's; $why: cs_guard's
if ! cs_guard check; then echo "unsafe $why"; exit 0; fi
p=$LOCK_PATH
if [ -f "$p" ]; then echo "lock $(stat -c %Y "$p") $(date +%s)"; head -c 4096 "$p" | base64 -w0; echo; else echo none; fi
