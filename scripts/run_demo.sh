#!/usr/bin/env bash
# The README's demo command: set up (idempotent), then run the demo.
# Extra arguments go to the demo, e.g. scripts/run_demo.sh --help
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup_env.sh"
venv="${LEROBOT_ROS_VENV:-$root/.venv}"
exec "$venv/bin/python" -m lerobot_ros.demo "$@"
