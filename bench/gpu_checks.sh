#!/usr/bin/env bash
# The GPU checks of the request path, as one command (issue 19): on a machine with CUDA and the dev venv
# (scripts/setup_env.sh), from anywhere:
#
#   bench/gpu_checks.sh [OUT_DIR]        (default: a temporary folder; docs/ is never touched)
#
# 0. what ran: GPU (nvidia-smi), driver, Python, torch, its CUDA and cuDNN, LeRobot, OpenCV -> OUT_DIR/versions.txt;
# 1. the bare ACT forward on cuda in a fresh process (the floor for every server's model time);
# 2. the three-stack latency benchmark (ours, LeRobot gRPC, LeRobot Zenoh draft) with every stack and the bare
#    model on cuda, the full matrix of frame sizes, camera counts and both trained sizes, its section written to
#    OUT_DIR/benchmarks.md (plot beside it), its console to OUT_DIR/latency.log.
# 3. the compiled forward (the server's compile_mode) against eager on cuda, for ACT and the tiny SmolVLA without
#    RTC (with RTC, torch recompiles per flow time and delay: minutes, see docs/reference/benchmarks.md), in torch's default
#    mode and in reduce-overhead (CUDA graphs) -> OUT_DIR/compile_default.md and OUT_DIR/compile_reduce_overhead.md
#    (plots beside them), consoles in OUT_DIR/compile_*.log.
# The whole script is sized for a 10-minute device command: step timeouts add up to 540 s.
# Not covered (no offline way to build it): SmolVLA at its real size needs the SmolVLM2 weights' config
# from the Hub. Bounded: each step has its own timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
python="${PYTHON:-.venv/bin/python}"
export LEROBOT_ROS_TEST_DOMAIN_ID="${LEROBOT_ROS_TEST_DOMAIN_ID:-47}"
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script is for a GPU machine')"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  "$python" - <<'EOF'
import platform
import cv2
import lerobot
import torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| cudnn", torch.backends.cudnn.version(), "| lerobot", lerobot.__version__, "| opencv", cv2.__version__)
print("device 0:", torch.cuda.get_device_name(0), "| capability", torch.cuda.get_device_capability(0))
EOF
} | tee "$out/versions.txt"
checkpoint=$("$python" -c "from lerobot_ros.sim.default_policy import default_checkpoint; print(default_checkpoint('act'))")
timeout 60 "$python" -m bench.bare_model "$checkpoint" --device cuda --requests 50 --warmup 10 > "$out/bare_act_cuda.json"
timeout 240 "$python" -m bench.server_request_latency --device cuda --requests 15 \
    --document "$out/benchmarks.md" --plot-dir "$out" > "$out/latency.log" 2>&1 || { tail -n 40 "$out/latency.log"; exit 1; }
tail -n 5 "$out/latency.log"
for mode in default reduce-overhead; do
  name="compile_${mode//-/_}"
  mkdir -p "$out/$name"
  timeout 120 "$python" -m bench.compiled_forward --device cuda --mode "$mode" --requests 30 --policies act,smolvla \
      --document "$out/$name.md" --plot-dir "$out/$name" > "$out/$name.log" 2>&1 || { tail -n 40 "$out/$name.log"; exit 1; }
  tail -n 8 "$out/$name.md"
done
echo "results in $out"
