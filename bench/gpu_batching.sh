#!/usr/bin/env bash
# The batching benchmark on a GPU machine, ready to run (no GPU was available
# when it was written; see docs/reference/benchmarks.md, section "batching").
#
#   ACT (96x128), SmolVLA at its real size (SmolVLM2-500M shapes, random
#   weights, built here without a download) and, when PI0_CHECKPOINT names a
#   local pi0 checkpoint directory (weights random or trained; this script
#   cannot build one offline: its PaliGemma tokenizer is a download), pi0,
#   all with device cuda, 1..64 robots, round-robin vs batched in one run.
#
# usage: bench/gpu_batching.sh [extra python -m bench.batching arguments]
#   PYTHON=.venv/bin/python  DEVICE=cuda  PI0_CHECKPOINT=/path/to/pi0  SECONDS_PER_POINT=10
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
device="${DEVICE:-cuda}"
families=(act smolvla_real)
checkpoints=()
if [ -n "${PI0_CHECKPOINT:-}" ]; then
  families+=(pi0)
  checkpoints+=(--checkpoint "pi0=${PI0_CHECKPOINT}")
fi
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this script is for a GPU machine')"
exec "$python" -m bench.batching --device "$device" --families "${families[@]}" "${checkpoints[@]}" \
  --counts 1 2 4 8 16 32 64 --seconds "${SECONDS_PER_POINT:-10}" "$@"
