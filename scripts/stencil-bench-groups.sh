#!/usr/bin/env bash
# The stencil bench in time-boxed groups (one process per stencil), merged into one JSON, so a
# device call with little time left still returns every group that finished.
#   device run, carry [".carry"] (Halide, and dask/distributed's wheels in .carry/whl):
#     bash scripts/stencil-bench-groups.sh SECONDS_PER_GROUP [bench args]
#   BENCH_GPUS="0 1" runs one queue worker per GPU (each pulls the next group; a group's cells
#   run on one GPU, each row carries the copy bandwidth measured on its GPU); "1@FILE" makes
#   GPU 1's worker start only once FILE exists (e.g. after tests on that GPU); BENCH_DEADLINE
#   (seconds) stops the workers from starting groups after it; BENCH_PRECISIONS and
#   BENCH_STENCILS (space-separated) pick the groups.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}; mkdir -p "$OUT"
limit=${1:-60}; shift || true
# the wheels the CLI imports: .whl, or only dask/distributed's in .carry/whl (with Halide's
# 46 MB in .carry, all of .whl would pass the device tool's 64 MiB carry limit)
for w in .whl .carry/whl; do
  mark=/tmp/site/.kf-installed-${w//[.\/]/}  # one marker per wheel folder
  if ls $w/*.whl >/dev/null 2>&1 && [ ! -f "$mark" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site $w/*.whl || exit 1
    touch "$mark"
  fi
done
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
if [ -f .carry/halide.tar.xz ] && [ ! -d /tmp/hl/halide ]; then
  mkdir -p /tmp/hl && tar xJf .carry/halide.tar.xz -C /tmp/hl
fi
[ -d /tmp/hl ] && export PYTHONPATH=/tmp/hl:${PYTHONPATH:-}
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# BENCH_RESUME=1: go on from an earlier call on the same (still warm) machine: its finished
# groups are skipped and merged with this call's
claims=/tmp/bench-claims
[ -n "${BENCH_RESUME:-}" ] || rm -rf /tmp/bench-*.json "$claims"
mkdir -p "$claims"
worker() {  # worker DEVICE [WAIT_FILE] -- bench args: pull groups until none is left
  local dev=$1 wait_for=$2; shift 2
  if [ -n "$wait_for" ]; then while [ ! -e "$wait_for" ]; do sleep 2; done; fi
  # groups of one stencil and precision; fp32 first (the headline geomean), the heaviest
  # stencils first within a precision; no group starts after BENCH_DEADLINE seconds
  for pr in ${BENCH_PRECISIONS:-fp32 fp16 fp64}; do
    for st in ${BENCH_STENCILS:-box_2 star_1_t4 box_1 star_2 varcoeff_star_1 star_1}; do
      [ $((SECONDS - start)) -lt "${BENCH_DEADLINE:-100000}" ] || return 0
      mkdir "$claims/$st-$pr" 2>/dev/null || continue
      # each cell's results are written as it ends: a group cut by its limit keeps them
      CUDA_VISIBLE_DEVICES=$dev timeout "$limit" python3 -m kernforge stencil bench \
        --stencils "$st" --precisions "$pr" --json "/tmp/bench-$st-$pr.json" "$@" \
        > "/tmp/bench-$st-$pr.log" 2>&1
      echo "$st $pr rc=$? (GPU $dev, $((SECONDS - start)) s)" | tee -a "/tmp/bench-$st-$pr.log"
      { echo "===== $st $pr on GPU $dev"; cat "/tmp/bench-$st-$pr.log"; } >> "$OUT/bench.log"
    done
  done
}
start=$SECONDS
for spec in ${BENCH_GPUS:-0}; do
  dev=${spec%%@*}; wait_for=""; [[ $spec == *@* ]] && wait_for=${spec#*@}
  worker "$dev" "$wait_for" "$@" &
done
wait
python3 - "$OUT/stencil-bench.json" <<'PY'
import glob, json, sys
from kernforge.forge.bench import summary
parts = [json.load(open(p)) for p in sorted(glob.glob("/tmp/bench-*.json"))]
merged = dict(parts[0]) if parts else {}
merged["cells"] = [c for p in parts for c in p["cells"]]
merged["groups"] = [p.get("seconds") for p in parts]
# each part's summary covers its own group only: recompute it over every merged cell
merged["summary"] = summary(merged["cells"])
json.dump(merged, open(sys.argv[1], "w"), indent=1)
print(f"merged {len(parts)} groups, {len(merged.get('cells', []))} cells")
PY
