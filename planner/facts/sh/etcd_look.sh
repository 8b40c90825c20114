# The controller's own etcd member and API server as the host sees them, read the way that
# works on a real rke2/k3s host (no etcdctl there): the engine's own etcd client
# certificate (TLS_DIR/etcd/server-client.crt) against the member's JSON gateway on
# 127.0.0.1:2379, and the admin's client certificate against the API server's /readyz.
# Prints `etcd none` (no member's certificates: an external datastore, or no etcd),
# `etcd no-curl`, or `etcd certs`; then `== PART <answer on one line> cs-rc=<curl status>`
# for status, members, health and readyz. Each part is cut after PART_BYTES bytes (the
# program stopped by SIGPIPE), its status then lost: the parser refuses such a part.
# shellcheck disable=SC2154  # TLS_DIR, TIMEOUT, READYZ_TIMEOUT, PART_BYTES: the block's
cs_part() {
  name=$1; wait=$2; shift 2
  out=$( (curl -sS --max-time "$wait" "$@" 2>&1; printf '\ncs-rc=%s' "$?") \
    | head -c "$PART_BYTES" | tr '\n\r' '  ')
  printf '== %s %s\n' "$name" "$out"
  case $out in *" cs-rc=0") return 0;; esac
  return 1
}
e=$TLS_DIR/etcd
if [ ! -r "$e/server-client.crt" ] || [ ! -r "$e/server-client.key" ]; then
  echo "etcd none"
elif ! command -v curl >/dev/null 2>&1; then
  echo "etcd no-curl"
else
  echo "etcd certs"
  set -- --cacert "$e/server-ca.crt" --cert "$e/server-client.crt" --key "$e/server-client.key"
  # A member that does not answer its status (stopped, paused) answers nothing else:
  # not asked again, so a paused member costs one timeout, not three.
  if cs_part status "$TIMEOUT" "$@" -X POST -d '{}' https://127.0.0.1:2379/v3/maintenance/status; then
    cs_part members "$TIMEOUT" "$@" -X POST -d '{}' https://127.0.0.1:2379/v3/cluster/member/list
    cs_part health "$TIMEOUT" "$@" https://127.0.0.1:2379/health
  fi
  # The API server in front of this member: its own /readyz (anonymous access may be off,
  # as rke2 has it: the admin's certificate, kept beside the others).
  cs_part readyz "$READYZ_TIMEOUT" --cacert "$TLS_DIR/server-ca.crt" \
    --cert "$TLS_DIR/client-admin.crt" --key "$TLS_DIR/client-admin.key" \
    'https://127.0.0.1:6443/readyz?verbose'
fi
true
