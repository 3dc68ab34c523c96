#!/usr/bin/env bash
# The README's test command: set up (idempotent), then run the whole suite.
# Extra arguments go to pytest, e.g. scripts/run_tests.sh -k contract -x
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup_env.sh"
venv="${LEROBOT_ROS_VENV:-$root/.venv}"
cd "$root"
# Parallel workers (pytest-xdist): most tests wait on timers and processes rather than use the
# CPU. One worker runs a module whose fixtures are module-scoped (xdist_group); timing-sensitive
# tests run alone (test/support/workers.py). `-n 0` runs them all in this process.
exec "$venv/bin/python" -m pytest -n "${LEROBOT_ROS_TEST_WORKERS:-3}" --dist loadgroup "$@"
