#!/usr/bin/env bash
# The demo: what cargoship is for, in under a minute. A lab of 1 controller and 3 workers
# (real sshd hosts on this machine) starts with drift: two workers on a stale mirror list,
# a chart value changed by hand on the controller. Then, printing each command so you can
# repeat it: plan to a file, show the plan, apply it, plan again (nothing left).
# The lab is removed at the end; KEEP_LAB=1 leaves it up to try more commands.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ROOT=$PWD
LAB=${LAB:-/tmp/cargoship-demo}
PY="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH"
lab() { (cd "$ROOT" && "$PY" -m tests.lab "$@"); }
run() { printf '\n\033[1m%s$ %s\033[0m\n' "${LAB}" "$*"; "$@"; }
lab down --dir "$LAB" >/dev/null 2>&1 || true
if [ "${KEEP_LAB:-0}" != 1 ]; then
  trap 'lab down --dir "$LAB" >/dev/null 2>&1 || true' EXIT
fi
started=$SECONDS
echo "Starting a lab of 1 controller and 3 workers in $LAB ..."
lab up --dir "$LAB" --controllers 1 --workers 3 --os ubuntu-22.04,debian-12,rocky-9 >/dev/null
(cd "$ROOT" && "$PY" -m tests.lab.demo --dir "$LAB")
cd "$LAB"
code=0
run cargoship plan -c cluster.yaml -out plan.json --detailed-exitcode || code=$?
[ "$code" = 2 ] || { echo "demo: expected changes to plan (exit 2), got exit $code" >&2; exit 1; }
run cargoship show plan.json
run cargoship apply plan.json --confirm
run cargoship plan -c cluster.yaml --detailed-exitcode
echo
echo "Demo done in $((SECONDS - started))s."
if [ "${KEEP_LAB:-0}" = 1 ]; then
  echo "The lab is still up in $LAB; remove it with: .venv/bin/python -m tests.lab down --dir $LAB"
fi
