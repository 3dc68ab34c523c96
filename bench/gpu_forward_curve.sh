#!/usr/bin/env bash
# The forward's service curve t(b) = t0 + k*b and GIL share g of LeRobot's ACT, pi0 and pi0.5 on a GPU (issue 32),
# as ONE device command. The GPU machine has torch, transformers, OpenCV, ... but no LeRobot, no ROS and no network,
# so LeRobot and the few packages its image lacks travel as wheels (bench/gpu_wheels.txt, fetched here by
# bench/fetch_gpu_wheels.sh into .whl/). From the repo root there:
#
#   bash bench/gpu_forward_curve.sh "$OUT"          (device tool: carry [".whl"], timeout_s 600)
#
# 1. installs .whl/*.whl into $SITE (default /tmp/site) with --no-index --no-deps --target and puts it first on
#    PYTHONPATH (it shadows the image's transformers 5.17 and tokenizers 0.23: see bench/gpu_wheels.txt);
# 2. records what ran (nvidia-smi, Python, torch, CUDA, cuDNN, LeRobot, transformers, ..., each with the folder it
#    was imported from, and whether the three policies' modules import) -> OUT/versions.txt;
# 3. runs bench/forward_curve.py on cuda once per policy, each in its own process with its own timeout (a policy that
#    hangs or runs out of memory costs only its own curve): ACT in float32, pi0 and pi0.5 in bfloat16, random
#    weights, batches 1..64 -> OUT/forward_curve.json (forward_curve's JSON shape, the policies merged, plus
#    "failed": {policy: exit status}); every step's console -> OUT/forward_curve.log.
# Step limits add up to 540 s (install 60, versions 45, act 75, pi0 180, pi05 180), inside a 10-minute command.
# Overridable: POLICIES="act pi0 pi05", BATCHES=1,2,4,8,16,32,64, REPEATS=20, PYTHON=python3, SITE=/tmp/site;
# an offline rehearsal on a CPU (not a measurement): DEVICE=cpu FORWARD_ARGS=--small POLICIES=act BATCHES=1,2.
# It imports neither ROS nor lerobot_ros. Exit status: 0 when every policy gave its curve.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bash bench/gpu_forward_curve.sh OUT_DIR}"
mkdir -p "$out"
python="${PYTHON:-python3}"
site="${SITE:-/tmp/site}"
policies="${POLICIES:-act pi0 pi05}"
batches="${BATCHES:-1,2,4,8,16,32,64}"
repeats="${REPEATS:-20}"
device="${DEVICE:-cuda}"
forward_args="${FORWARD_ARGS:-}"
log="$out/forward_curve.log"
parts="$(mktemp -d)"
: > "$log"
export PYTHONUNBUFFERED=1 PYTHONNOUSERSITE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

limit_of() {
  case "$1" in install) echo 60 ;; versions) echo 45 ;; act) echo 75 ;; *) echo 180 ;; esac
}

# step NAME COMMAND...: run COMMAND under NAME's time limit, its console appended to the log.
step() {
  local name="$1" limit status
  shift
  limit="$(limit_of "$name")"
  echo "== $(date -u +%T) $name (limit ${limit} s): $*" >> "$log"
  timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1
  status=$?
  [ "$status" -eq 124 ] && echo "!! $name ran past its ${limit} s" | tee -a "$log"
  [ "$status" -ne 0 ] && echo "!! $name: exit status $status (see forward_curve.log)"
  return "$status"
}

shopt -s nullglob
wheels=(.whl/*.whl)
if [ "${#wheels[@]}" -eq 0 ]; then
  echo "no wheels in .whl/: run bench/fetch_gpu_wheels.sh here and carry .whl" | tee -a "$log"
  exit 2
fi
step install "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "${wheels[@]}" || { tail -n 20 "$log"; exit 1; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

{
  date -u
  timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
  echo "carried: ${wheels[*]}"
} > "$out/versions.txt"
step versions "$python" - "$site" "$out/versions.txt" <<'EOF'
import importlib, platform, sys
site, path = sys.argv[1], sys.argv[2]
lines = [f"python {platform.python_version()} at {sys.executable}"]
import torch
lines.append(f"torch {torch.__version__} | cuda {torch.version.cuda} | cudnn {torch.backends.cudnn.version()}"
             f" | cuda available {torch.cuda.is_available()}")
if torch.cuda.is_available():
    lines.append(f"device 0: {torch.cuda.get_device_name(0)} | capability {torch.cuda.get_device_capability(0)}")
for name in ("lerobot", "transformers", "tokenizers", "draccus", "gymnasium", "huggingface_hub", "safetensors",
             "numpy", "torchvision", "einops", "cv2", "PIL"):
    try:
        module = importlib.import_module(name)
        where = "carried" if module.__file__.startswith(site) else "image"
        lines.append(f"{name} {getattr(module, '__version__', '?')} ({where}: {module.__file__})")
    except Exception as error:  # a missing package is a finding, not a crash of this record
        lines.append(f"{name}: NOT IMPORTABLE ({type(error).__name__}: {error})")
for module in ("lerobot.policies.act.modeling_act", "lerobot.policies.pi0.modeling_pi0",
               "lerobot.policies.pi05.modeling_pi05"):
    try:
        importlib.import_module(module)
        lines.append(f"import {module}: ok")
    except Exception as error:
        lines.append(f"import {module}: FAILED ({type(error).__name__}: {error})")
with open(path, "a") as handle:
    handle.write("\n".join(lines) + "\n")
EOF
cat "$out/versions.txt"

failed=0
for policy in $policies; do
  dtype=bfloat16  # pi0/pi0.5 weights; forward_curve keeps ACT in float32 whatever this says
  # shellcheck disable=SC2086  # FORWARD_ARGS is a list of flags
  step "$policy" "$python" -m bench.forward_curve --device "$device" --dtype "$dtype" --policies "$policy" \
      --batches "$batches" --repeats "$repeats" --warmup 3 $forward_args --out "$parts/$policy.json" || failed=1
  grep -E "^$policy: t\(b\)" "$log" | tail -n 1
done

"$python" - "$parts" "$out/forward_curve.json" $policies <<'EOF'
import json, os, sys
parts, path, names = sys.argv[1], sys.argv[2], sys.argv[3:]
merged = {"versions": None, "small": None, "policies": {}, "failed": {}}
for name in names:
    part = os.path.join(parts, f"{name}.json")
    if not os.path.exists(part):
        merged["failed"][name] = "no result: see forward_curve.log"
        continue
    with open(part) as handle:
        result = json.load(handle)
    merged["versions"] = merged["versions"] or result["versions"]
    merged["small"] = bool(merged["small"]) or result["small"]
    merged["policies"].update(result["policies"])
with open(path, "w") as handle:
    json.dump(merged, handle, indent=2)
    handle.write("\n")
for name, curve in merged["policies"].items():
    print(f"{name}: t0 {curve['t0_ms']:.2f} ms, k {curve['k_ms']:.3f} ms, g {curve['g']:.2f}"
          f"  (t(1) {curve['t_ms']['1']['median_ms'] if '1' in curve['t_ms'] else float('nan'):.1f} ms)")
print("failed:", merged["failed"] or "none")
EOF
rm -rf "$parts"
exit "$failed"
