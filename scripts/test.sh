#!/usr/bin/env bash
# The test command: setup, linters, type checks, then every test (unit and lab end-to-end).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Compiled once, not at every start: this machine's environment sets
# PYTHONDONTWRITEBYTECODE, and with it every `cargoship` a test starts compiled the package
# anew (0.1 s of CPU each; tests/bench/FINDINGS.md). The caches are the checkout's own,
# and gitignored; the lab's programs never saw the variable (tests/lab/lab.py HOST_ENV).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q -j 0 cargoship planner executor schemas tests
# Whatever happens, no lab host of this run outlives it (labs of other runs are left alone).
RUN_TMP=$(mktemp -d /tmp/cargoship-test.XXXXXX)
trap '.venv/bin/python -m tests.lab down --all --under "$RUN_TMP" >/dev/null 2>&1 || true; rm -rf "$RUN_TMP"' EXIT
.venv/bin/ruff check .
# The lab too: its engines and API stand-in decide what the end-to-end tests can see.
.venv/bin/mypy planner executor cargoship schemas tests/lab
# The shell every host runs, as the package ships it (planner/hosts/shell.py loads it):
# POSIX sh, for hosts whose sh is dash or BusyBox's.
find planner executor -name '*.sh' -path '*/sh/*' -print0 | xargs -0 shellcheck -s sh
# Test files side by side (most lab time is waiting on hosts); one file's tests stay in one
# worker, in order. CARGOSHIP_TEST_WORKERS=0 runs everything in this process. Six on 2
# cores keep both busy (870 CPU-s of 909 in a 456 s run); eight gained nothing that held
# (tests/bench/FINDINGS.md, "The suite is CPU-bound now" and "Eight workers instead of six").
# The longest files first (tests/conftest.py, tests/file_weights.json), in that order.
.venv/bin/python -m pytest -q --basetemp="$RUN_TMP/pytest" \
  -n "${CARGOSHIP_TEST_WORKERS:-6}" --dist loadfile --no-loadscope-reorder --durations=15 "$@"
# Every safety rule with a pure decision, broken one at a time: tests/unit must notice
# (README "Mutation suite"). The tests above passing is its baseline.
.venv/bin/python -m tests.mutation --quick --no-baseline
