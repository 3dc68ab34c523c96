#!/usr/bin/env bash
# Download the wheels bench/gpu_forward_curve.sh carries to the GPU machine (issue 32) into .whl/ at the repo root.
#
#   bench/fetch_gpu_wheels.sh            (PYTHON=... to use another interpreter's pip; default .venv/bin/python)
#
# The list is bench/gpu_wheels.txt (name==version, '#' comments). .whl/ is emptied of wheels first, so it holds
# exactly that list: two versions of one package would stop the install there. .whl/ must stay out of git
# (`echo /.whl/ >> .git/info/exclude`, done here when missing); it travels to the device with carry [".whl"].
# The wheels are for the device: CPython 3.12, x86-64 manylinux, binary only, no dependencies resolved
# (each one needed is named in the list).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' bench/gpu_wheels.txt | grep -v '^$')
mkdir -p .whl
rm -f .whl/*.whl
"$python" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${wanted[@]}"
count=$(find .whl -maxdepth 1 -type f -name '*.whl' | wc -l)
if [ "$count" -ne "${#wanted[@]}" ]; then
  echo "expected ${#wanted[@]} wheels in .whl, found $count" >&2
  exit 1
fi
ls -l .whl/*.whl
echo "total: $(du -cb .whl/*.whl | tail -n 1 | cut -f1) bytes ($(du -ch .whl/*.whl | tail -n 1 | cut -f1)) in $count wheels"
