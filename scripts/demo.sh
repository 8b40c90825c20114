#!/usr/bin/env bash
# The demo: start a lab of 3 controllers and 3 workers (real sshd hosts on this machine)
# and run `cargoship plan` against it. The lab stays up; stop it with the command printed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
LAB=${LAB:-/tmp/cargoship-demo}
.venv/bin/python -m tests.lab down --dir "$LAB" >/dev/null 2>&1 || true
.venv/bin/python -m tests.lab up --dir "$LAB" --controllers 3 --workers 3 \
  --os ubuntu-22.04,debian-12,rocky-9
echo
status=0
.venv/bin/cargoship plan -c "$LAB/cluster.yaml" || status=$?
echo
echo "lab left running in $LAB; stop it with: .venv/bin/python -m tests.lab down --dir $LAB"
exit "$status"
