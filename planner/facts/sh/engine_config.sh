# The engine's configuration sources, found as rke2 and k3s find them (planner/facts/
# engine_config.py says how and cites their sources): the unit's environment files, its
# command line, then the config file (moved by $<PROGRAM>_CONFIG_FILE or --config) and its
# `.d` drop-ins, `*.yaml` and `*.yml` in any case, in name order (byte order: LC_ALL=C).
# Read only; nothing here runs what a file says (environment files are read, not sourced).
# Set by the generated block on top: PROGRAM (K3S, RKE2), SERVICE, DEFAULT_CONFIG,
# ENV_FILES (paths without spaces, in the unit's order), MAX_BYTES, MAX_LINE,
# SYSTEMD_RUNNING (/run/systemd/system).
# shellcheck disable=SC2154  # PROGRAM, SERVICE, DEFAULT_CONFIG, ENV_FILES, MAX_*, SYSTEMD_*
LC_ALL=C
export LC_ALL
# One line per file: a word, its size, its content in base64, its path (last: paths may
# hold spaces). The size is "-" when fewer than MAX_BYTES came (the whole file: the parser
# counts them), so `wc` runs only for a file that may be larger: one program fewer per
# file on every plan. A file that cannot be read says -1.
# shellcheck disable=SC2017  # the rounding up is the point: base64 writes whole quads
cs_full=$(( (MAX_BYTES + 2) / 3 * 4 ))  # base64 characters of MAX_BYTES bytes
cs_emit() {
  cs_b=$(head -c "$MAX_BYTES" "$2" 2>/dev/null | base64 -w0)
  if [ "${#cs_b}" -lt "$cs_full" ] && [ -r "$2" ]; then
    cs_s=-
  else
    cs_s=$(wc -c < "$2" 2>/dev/null || echo -1)
  fi
  echo "$1 $cs_s $cs_b $2"
}
# `cs_last FILE PATTERN`: FILE's last line that matches PATTERN after any indent, whole, in
# cs_v (empty if none), read by the shell itself: a `grep | tail` or `sed | tail` was two
# programs on every plan.
cs_last() {
  cs_v=
  while IFS= read -r cs_l || [ -n "$cs_l" ]; do
    # shellcheck disable=SC2254  # the pattern is the caller's, matched as a pattern
    case ${cs_l#"${cs_l%%[![:space:]]*}"} in $2) cs_v=$cs_l;; esac
  done 2>/dev/null < "$1"
}
cs_unquote() {
  cs_u=$1
  case $cs_u in
    \"*\") cs_u=${cs_u#\"}; cs_u=${cs_u%\"};;
    \'*\') cs_u=${cs_u#\'}; cs_u=${cs_u%\'};;
  esac
}
cs_env_config=
for cs_f in $ENV_FILES; do
  [ -f "$cs_f" ] || continue
  cs_emit env "$cs_f"
  cs_last "$cs_f" "${PROGRAM}_CONFIG_FILE=*"
  cs_unquote "${cs_v#*=}"
  [ -n "$cs_u" ] && cs_env_config=$cs_u
done
# The unit's command line: systemd's ExecStart (as systemd parsed it, continuation lines
# joined), else runit's `run` script's exec line, else OpenRC's command_args. systemd
# only where it runs (sd_booted(): /run/systemd/system, as the init fact asks): elsewhere
# an installed systemctl can only fail, and costs a heavy program's start on every plan.
cs_exec=
cs_src=
if [ -d "$SYSTEMD_RUNNING" ] && command -v systemctl >/dev/null 2>&1 &&
    systemctl cat "$SERVICE" >/dev/null 2>&1; then
  cs_exec=$(systemctl show -p ExecStart --value "$SERVICE" 2>/dev/null \
    | sed -n 's/.*argv\[\]=\([^;]*\) ;.*/\1/p' | head -n 1)
  cs_src="ExecStart of $SERVICE.service"
else
  for cs_d in /etc/service /var/service /service; do
    if [ -f "$cs_d/$SERVICE/run" ]; then
      cs_last "$cs_d/$SERVICE/run" 'exec[[:space:]]*'
      cs_exec=$cs_v
      cs_src="$cs_d/$SERVICE/run"
      break
    fi
  done
  if [ -z "$cs_src" ] && [ -f "/etc/init.d/$SERVICE" ]; then
    cs_exec=$(sed -n 's/^[[:space:]]*command_args=//p' "/etc/init.d/$SERVICE" | tail -n 1)
    cs_unquote "$cs_exec"
    cs_exec=$cs_u
    cs_src="/etc/init.d/$SERVICE (command_args)"
  fi
fi
# LC_ALL=C: ${#} counts bytes, as head -c does.
if [ "${#cs_exec}" -gt "$MAX_LINE" ]; then
  cs_exec=$(printf '%s' "$cs_exec" | head -c "$MAX_LINE")
fi
echo "exec $(printf '%s' "$cs_exec" | base64 -w0) ${cs_src:--}"
# --config / -c on that command line (only the environment variable wins over it).
cs_flag_config=
cs_next=
set -f
# shellcheck disable=SC2086  # split into words, as the unit's command line is
set -- $cs_exec
set +f
for cs_a in "$@"; do
  if [ -n "$cs_next" ]; then cs_flag_config=$cs_a; cs_next=; continue; fi
  case $cs_a in
    --config=*|-c=*) cs_flag_config=${cs_a#*=};;
    --config|-c) cs_next=1;;
  esac
done
cs_main=${cs_env_config:-${cs_flag_config:-$DEFAULT_CONFIG}}
echo "config $cs_main"
# `-f` follows a link as the engine does, but only to a regular file.
if [ -f "$cs_main" ]; then cs_emit file "$cs_main"; fi
for cs_f in "$cs_main.d"/*; do
  [ -f "$cs_f" ] || continue
  case $cs_f in
    *.[yY][aA][mM][lL]|*.[yY][mM][lL]) cs_emit file "$cs_f";;
  esac
done
true
