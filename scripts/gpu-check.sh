#!/usr/bin/env bash
# One device call: install the wheels the GPU machine lacks, run the GPU tests, run the GPU
# benchmarks, print a short summary last. The log ($OUT/all.log), tables and JSON land in $OUT
# (at most 8 files come back from the device machine).
#   device run, carry [".whl", ".carry"]:  bash scripts/gpu-check.sh [bench_replay_gpu.py args]
#   (name .carry's parts instead when .carry/cubins exists: [".whl", ".carry/cubins.tar.xz"]
#   for the forge, [".carry/halide.tar.xz", ".carry/whl"] for the bench)
#   (since session 9 the tree plus both folders passes the device tool's 64 MiB carry limit:
#   carry [".whl"] and the Halide tests skip, unless an earlier call on the same warm machine
#   carried [".carry"] and unpacked Halide into /tmp/hl, which this script then uses)
#   GPU_STEPS="pytest-gpu stencil-forge" runs only those steps; FORGE_ROUNDS, FORGE_LIMIT,
#   FORGE_ARGS (more stencil_forge.py arguments) and BENCH_LIMIT tune the stencil steps (FORGE_GPUS: forge processes, default one per GPU) (.carry/halide.tar.xz: ../shared/device/halide.sh);
#   GPU_STEPS="scaling" (nvidia-h200-x2/x4) measures the service over 1..N GPUs;
#   GPU_STEPS="stencil-profile" runs Nsight Compute on PROFILE_CELLS (scripts/profile_stencil.py)
# (stencil forges and benches with Halide in one call, under the carry limit that .whl and Halide
#  together exceed: scripts/stencil-device.sh, which carries .carry/fw3 instead)
# (.whl is made here with: ../shared/device/wheels.sh tree-sitter tree-sitter-c
#  tree-sitter-cuda optuna openai dask distributed)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"; export OUT
if ls .whl/*.whl >/dev/null 2>&1; then  # once per machine (parallel calls share /tmp/site)
  # one marker per wheel folder: a warm machine that installed only .carry/whl's wheels (the
  # stencil scripts) still gets .whl's here
  if [ ! -f /tmp/site/.kf-installed-whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
    touch /tmp/site/.kf-installed-whl
  fi
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
if [ -f .carry/halide.tar.xz ] && [ ! -d /tmp/hl/halide ]; then  # made by ../shared/device/halide.sh; carry [".carry"]
  mkdir -p /tmp/hl && tar xJf .carry/halide.tar.xz -C /tmp/hl
fi
[ -d /tmp/hl/halide ] && export PYTHONPATH=/tmp/hl:${PYTHONPATH:-}
# cubins compiled on the host for the forge's first round (scripts/stencil_precompile.py), into
# the forge's cache (every forge process, one per GPU, finds it through KERNFORGE_CACHE_DIR):
# device time goes to measuring, not to nvcc; a new archive on a warm machine is unpacked too.
# Used only by forge runs with FORGE_ARGS="... --build nvcc" (the default, --build nvrtc,
# builds each candidate as dispatch does, on this machine)
export KERNFORGE_CACHE_DIR=${KERNFORGE_CACHE_DIR:-/tmp/kf-cache}
if [ -f .carry/cubins.tar.xz ]; then
  sum=$(sha256sum .carry/cubins.tar.xz | cut -c1-16)
  if [ ! -f "$KERNFORGE_CACHE_DIR/cubins/.kf-unpacked-$sum" ]; then
    mkdir -p "$KERNFORGE_CACHE_DIR/cubins" \
      && tar xJf .carry/cubins.tar.xz -C "$KERNFORGE_CACHE_DIR/cubins" \
      && touch "$KERNFORGE_CACHE_DIR/cubins/.kf-unpacked-$sum"
  fi
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
declare -A rc
step() {  # step NAME SECONDS COMMAND...: run with a time limit; one log, $OUT/all.log
  local name=$1 limit=$2; shift 2
  # GPU_STEPS="pytest-gpu demo ..." runs only the named steps (one device call has 10 minutes)
  if [ -n "${GPU_STEPS:-}" ] && [[ " $GPU_STEPS " != *" $name "* ]]; then return 0; fi
  echo "===== $name: $*" >> "$OUT/all.log"
  timeout "$limit" "$@" > "/tmp/$name.log" 2>&1; rc[$name]=$?
  cat "/tmp/$name.log" >> "$OUT/all.log"
  tail -n 30 "/tmp/$name.log"
}
# (330 s: the suite took 115-170 s in session 10; the NVRTC build tests spawn worker processes)
step pytest-gpu 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests
step bench-replay 200 python3 scripts/bench_replay_gpu.py "$@"
demo_dir=$(mktemp -d)/demo
step demo 240 python3 -m kernforge demo --backend cuda --out "$demo_dir"
[ -s "$demo_dir/summary.json" ] && cp "$demo_dir/summary.json" "$OUT/demo-summary.json"
# host time a replaced CuPy launch costs (the demo's worth-deploying rule uses the same figure)
[ -f scripts/bench_deploy_overhead.py ] && step deploy-overhead 120 python3 \
  scripts/bench_deploy_overhead.py --backend cuda --json "$OUT/deploy-overhead-cuda.json"
[ -f scripts/redteam.py ] && step redteam 120 python3 scripts/redteam.py --backend cuda \
  --out "$OUT/redteam-cuda.md" --json "$OUT/redteam-cuda.json"
[ -f scripts/self_compare.py ] && step self-compare 120 python3 scripts/self_compare.py \
  --backend cuda --json "$OUT/self-compare-cuda.json"
[ -f scripts/bench_service.py ] && step bench-service 150 python3 scripts/bench_service.py \
  --backend cuda --out "$OUT/service-cuda.md"
# one forge process per visible GPU (FORGE_GPUS), each over a balanced share of the cells; the
# rounds stop in time for the final zero-regression pass (budget = the step's limit - 45 s)
forge_limit=${FORGE_LIMIT:-540}
# FORGE_ARGS: more forge arguments, e.g. "--stencils box_1 box_2 --seed-design zbox --changes vx,lz"
# shellcheck disable=SC2086
step stencil-forge "$forge_limit" python3 scripts/stencil_forge.py --rounds "${FORGE_ROUNDS:-8}" \
  --gpus "${FORGE_GPUS:-$(nvidia-smi -L | wc -l)}" --budget $((forge_limit - 45)) --out "$OUT/forge" \
  ${FORGE_ARGS:-}
# kept on the machine for a later call's bench (BENCH_TABLE=/tmp/kf-forge/matrix.json)
[ -s "$OUT/forge/matrix.json" ] && mkdir -p /tmp/kf-forge && cp "$OUT/forge/matrix.json" /tmp/kf-forge/
# the bench dispatches through the table this run just forged, when there is one
table=(); [ -s "$OUT/forge/matrix.json" ] && table=(--table "$OUT/forge/matrix.json")
[ -n "${BENCH_TABLE:-}" ] && table=(--table "$BENCH_TABLE")
step stencil-bench "${BENCH_LIMIT:-420}" python3 -m kernforge stencil bench --json "$OUT/stencil-bench.json" \
  --md "$OUT/stencil-bench.md" --png "$OUT/stencil-bench.png" "${table[@]}" \
  --baselines "${BENCH_BASELINES:-naive,torch,halide,halide_auto}"
# multi-GPU scaling (issue 9): only when asked for by name, on nvidia-h200-x2 (or x4)
if [[ " ${GPU_STEPS:-} " == *" scaling "* ]]; then
  gpus=$(nvidia-smi -L | wc -l); counts=$(seq -s ' ' 1 "$gpus")
  step scaling "${SCALING_LIMIT:-480}" python3 scripts/bench_scaling.py --backend cuda \
    --workers $counts --points 16 --passes "${SCALING_PASSES:-83}" --batch 1 0 \
    --json "$OUT/scaling.json" --markdown "$OUT/scaling.md"
fi
# where a stencil operator's time goes (Nsight Compute): only when asked for by name;
# PROFILE_CELLS (space-separated cell ids), PROFILE_DESIGN (another design, see
# scripts/profile_stencil.py); the source-level sections say which loads miss L1
if [[ " ${GPU_STEPS:-} " == *" stencil-profile "* ]]; then
  step stencil-profile "${PROFILE_LIMIT:-300}" bash -c '
    for c in ${PROFILE_CELLS:-star_1/512x512x512/fp16 star_1/512x512x512/fp32}; do
      n=$(echo "$c" | tr "/" "_")
      ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section MemoryWorkloadAnalysis_Tables --section Occupancy --section WarpStateStats \
        --section SourceCounters -k "regex:^(zmarch|ztile|planesweep|temporal|naive|copy)$" \
        -c 2 python3 scripts/profile_stencil.py "$c" --launches 1 \
        ${PROFILE_DESIGN:+--design $PROFILE_DESIGN} > "$OUT/ncu-$n.txt" 2>&1
      echo "$c: rc=$? ($OUT/ncu-$n.txt)"
    done'
fi
status=0
for k in "${!rc[@]}"; do echo "$k rc=${rc[$k]}"; [ "${rc[$k]}" = 0 ] || status=1; done
exit $status
