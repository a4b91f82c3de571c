#!/usr/bin/env bash
# One device call: install the wheels the GPU machine lacks, run the GPU tests, run the GPU
# benchmarks, print a short table last. Full logs and JSON land in $OUT (default ./gpu-out).
#   device run, carry [".whl"]:  bash scripts/gpu-check.sh
# (.whl is made here with: ../shared/device/wheels.sh tree-sitter tree-sitter-c tree-sitter-cuda)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"; export OUT
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -15
tests_rc=${PIPESTATUS[0]}
python3 scripts/bench_replay_gpu.py "$@" 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "gpu tests rc=$tests_rc  bench rc=$bench_rc"
exit $(( tests_rc || bench_rc ))
