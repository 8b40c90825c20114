#!/usr/bin/env bash
# The test command: setup, linters, type checks, then every test (unit and lab end-to-end).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Whatever happens, no lab host outlives the run.
trap '.venv/bin/python -m tests.lab down --all >/dev/null 2>&1 || true' EXIT
.venv/bin/ruff check .
.venv/bin/mypy planner executor cargoship schemas
.venv/bin/python -m pytest -q "$@"
