#!/usr/bin/env bash
# The GPU checks of the request path, as one run (issue 19): on a machine with CUDA and the dev venv
# (scripts/setup_env.sh), from the repository root:
#
#   bench/gpu_checks.sh [OUT_DIR]        (default: a temporary folder; docs/ is never touched)
#
# 1. the bare ACT forward on cuda in a fresh process (the floor for every server's model time);
# 2. the three-stack latency benchmark with every stack and the bare model on cuda, 20 requests per
#    stack and configuration, its section written to OUT_DIR/benchmarks.md (plot beside it).
# Not covered (no offline way to build it): SmolVLA at its real size needs the SmolVLM2 weights' config
# from the Hub. Compilation is not built. Bounded: each step has its own timeout.
set -euo pipefail
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
python=".venv/bin/python"
export LEROBOT_ROS_TEST_DOMAIN_ID="${LEROBOT_ROS_TEST_DOMAIN_ID:-47}"
"$python" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))" | tee "$out/device.txt"
checkpoint=$("$python" -c "from lerobot_ros.sim.default_policy import default_checkpoint; print(default_checkpoint('act'))")
timeout 600 "$python" bench/bare_model.py "$checkpoint" --device cuda --requests 50 --warmup 10 > "$out/bare_act_cuda.json"
timeout 1800 "$python" bench/server_request_latency.py --device cuda --requests 20 \
    --document "$out/benchmarks.md" --plot-dir "$out" 2>&1 | tail -n 40 | tee "$out/latency.log"
echo "results in $out"
