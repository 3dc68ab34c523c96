#!/usr/bin/env bash
# The README's test command: set up (idempotent), then run the whole suite.
# Extra arguments go to pytest, e.g. scripts/run_tests.sh -k contract -x
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup_env.sh"
venv="${LEROBOT_ROS_VENV:-$root/.venv}"
cd "$root"
exec "$venv/bin/python" -m pytest "$@"
