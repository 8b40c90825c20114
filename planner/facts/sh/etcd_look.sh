# The controller's own etcd member and API server as the host sees them, read the way that
# works on a real rke2/k3s host (no etcdctl there): the engine's own etcd client
# certificate (TLS_DIR/etcd/server-client.crt) against the member's JSON gateway on
# 127.0.0.1:2379, and the admin's client certificate against the API server's /readyz.
# Prints `etcd none` (no member's certificates: an external datastore, or no etcd),
# `etcd no-curl`, or `etcd certs`; then `== PART <answer on one line> cs-rc=<curl status>`
# for status, members, health and readyz. A part over PART_BYTES bytes is printed without
# its status (the parser refuses such a part), and the output is cut there.
# shellcheck disable=SC2154  # TLS_DIR, TIMEOUT, READYZ_TIMEOUT, PART_BYTES: the block's
cs_part() {
  name=$1; wait=$2; shift 2
  out=$( (curl -sS --max-time "$wait" "$@" 2>&1; printf '\ncs-rc=%s' "$?") \
    | head -c "$PART_BYTES" | tr '\n\r' '  ')
  printf '== %s %s\n' "$name" "$out"
  case $out in *" cs-rc=0") return 0;; esac
  return 1
}
# The member's status, member list and /health in one curl, each answer followed by MARK
# (curl's write-out, printed after a failed transfer too): one process and one TLS
# handshake on the controller, where a curl each cost three of both at every look of the
# gate. --fail-early: a member that does not answer its status (stopped, paused) is not
# asked again, so it costs one timeout, not three. --stderr -: curl's error goes into the
# same stream, in order, before the failed answer's MARK (on stderr it would come first,
# stdout being buffered). After the last MARK, curl's status: that of the last part asked.
MARK='~cs-part~'
cs_member() {
  url=https://127.0.0.1:2379
  out=$( (curl --stderr - -sS --fail-early --max-time "$TIMEOUT" "$@" -w "\n$MARK\n" \
      -X POST -d '{}' "$url/v3/maintenance/status" \
    --next -sS --max-time "$TIMEOUT" "$@" -w "\n$MARK\n" \
      -X POST -d '{}' "$url/v3/cluster/member/list" \
    --next -sS --max-time "$TIMEOUT" "$@" -w "\n$MARK\n" "$url/health" 2>&1
    printf '\ncs-rc=%s' "$?") | head -c "$((3 * PART_BYTES + 300))" | tr '\n\r' '  ')
  for name in status members health; do
    case $out in
      *"$MARK"*) ;;
      # No answer at all: curl refused to start (its error, its status); else not asked.
      *) if [ "$name" = status ]; then printf '== status %s\n' "$out"; fi; return ;;
    esac
    body=${out%%"$MARK"*}; out=${out#*"$MARK"}
    if [ "${#body}" -gt "$PART_BYTES" ]; then
      printf '== %s too long\n' "$name"; return
    fi
    case $out in
      *"$MARK"*) printf '== %s %s cs-rc=0\n' "$name" "$body" ;;
      *) printf '== %s %s %s\n' "$name" "$body" "$out" ;;
    esac
  done
}
e=$TLS_DIR/etcd
if [ ! -r "$e/server-client.crt" ] || [ ! -r "$e/server-client.key" ]; then
  echo "etcd none"
elif ! command -v curl >/dev/null 2>&1; then
  echo "etcd no-curl"
else
  echo "etcd certs"
  set -- --cacert "$e/server-ca.crt" --cert "$e/server-client.crt" --key "$e/server-client.key"
  cs_member "$@"
  # The API server in front of this member: its own /readyz (anonymous access may be off,
  # as rke2 has it: the admin's certificate, kept beside the others).
  cs_part readyz "$READYZ_TIMEOUT" --cacert "$TLS_DIR/server-ca.crt" \
    --cert "$TLS_DIR/client-admin.crt" --key "$TLS_DIR/client-admin.key" \
    'https://127.0.0.1:6443/readyz?verbose'
fi
true
