#!/usr/bin/env bash
# The performance benchmark from a clean checkout, as root: setup (apt packages, .venv),
# the [bench] extra (ansible-core), then python -m tests.bench with any options given.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/pip install -q -e '.[bench]'
exec .venv/bin/python -m tests.bench "$@"
