#!/usr/bin/env bash
# One device call of stencil work on the GPU machine: optionally a forge run, then a bench of the
# cells it changed (or of named cells, resumable across calls). Everything lands in $OUT/$NAME-*.
#
#   device run, carry [".carry/fw3", ".carry/halide.tar.xz"]:
#     NAME=a FORGE="--cell-ids C1,C2 --changes tpe2,tpe3" bash scripts/stencil-device.sh
#     NAME=snap BENCH_CELLS=C1,...,C60 BENCH_ARGS="--baselines ''" bash scripts/stencil-device.sh
#
# The two carried folders are made on the host (both git-ignored):
#   ../shared/device/halide.sh                        -> .carry/halide.tar.xz (46 MB)
#   ../shared/device/wheels.sh optuna dask distributed -> .whl; then copy the wheels of dask,
#     distributed, partd, locket, zict, tblib, tornado, importlib_metadata, optuna and colorlog
#     into .carry/fw3 (3.5 MB): with the tree and Halide it stays under the 64 MiB carry limit,
#     which .whl (16 MB, for scripts/gpu-check.sh) does not.
# Environment:
#   NAME         tag of the outputs (default run)
#   FORGE        arguments of `kernforge stencil forge` (not --out/--budget); empty: no forge
#   LIMIT        seconds this call may take in all (default 560), counted from the script's
#                start; the forge's --budget is what is left then minus BENCH_RESERVE (default
#                150) for the bench and the snapshot; a step with under 30 s left is skipped
#   BENCH_CELLS  comma-separated cell ids to bench; default: the cells the forge changed
#   BENCH_TABLE  dispatch table of the bench without a forge (e.g. an earlier call's
#                $OUT/$NAME-matrix.json put in the tree), with --changed-from the committed one
#                unless BENCH_CELLS names cells (with FORGE the forge's table is used)
#   BENCH_ARGS   more `kernforge stencil bench` arguments (e.g. --baselines '')
#   PYTEST       pytest arguments to run first (shell words, e.g.
#                '-m gpu tests/stencil/test_measure_gpu.py -k "later and l2p"')
#   SNAP_CELLS   cells to bench afterwards without baselines through the same table (% of copy
#                only: a one-session snapshot, $OUT/$NAME-snap.json)
#   A forge starts its NAME afresh (the machine's earlier table, bench and snapshot of that NAME
#   are removed); without one, a bench or snapshot of the same NAME resumes on a warm machine.
#   BENCH_FROM   a bench JSON in the tree to resume from when this machine has none (a cold
#                machine lost /tmp; copy the last call's $OUT/$NAME-bench.json there first)
set -uo pipefail
cd "$(dirname "$0")/.."
NAME=${NAME:-run} LIMIT=${LIMIT:-560} BENCH_RESERVE=${BENCH_RESERVE:-150}
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - start) )); }
# run STEP SECONDS CMD...: under a time limit, skipped (rc 124) with under 30 s (timeout 0 would
# mean no limit at all); output to the log
run() {
  local name=$1 t=$2; shift 2
  if [ "$t" -lt 30 ]; then echo "$name skipped: ${t} s left" | tee -a "$log"; return 124; fi
  timeout "$t" "$@" >> "$log" 2>&1
  local rc=$?; echo "$name rc=$rc" | tee -a "$log"; return $rc
}
if [ ! -f /tmp/site/.kf-fw3 ] && ls .carry/fw3/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .carry/fw3/*.whl && touch /tmp/site/.kf-fw3
fi
if [ -f .carry/halide.tar.xz ] && [ ! -d /tmp/hl/halide ]; then
  mkdir -p /tmp/hl && tar xJf .carry/halide.tar.xz -C /tmp/hl
fi
export PYTHONPATH=$PWD/src:/tmp/site:/tmp/hl PYTHONUNBUFFERED=1
export KERNFORGE_CACHE_DIR=${KERNFORGE_CACHE_DIR:-/tmp/kf-cache}
log=$OUT/$NAME-all.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
echo "== $(date -u +%FT%TZ) NAME=$NAME FORGE=${FORGE:-} BENCH_CELLS=${BENCH_CELLS:-}" >> "$log"
forge_dir=/tmp/kf-forge-$NAME bench_json=/tmp/kf-bench-$NAME.json snap_json=/tmp/kf-snap-$NAME.json
if [ -n "${PYTEST:-}" ]; then
  eval "pytest_args=($PYTEST)"  # shell words: -k "a or b" stays one argument
  run pytest $(( $(left) / 2 )) python3 -m pytest -q -p no:cacheprovider "${pytest_args[@]}"
fi
if [ -n "${FORGE:-}" ]; then
  rm -rf "$forge_dir" "$bench_json" "$snap_json"  # a new forge: nothing of an earlier one
  eval "forge_args=($FORGE)"
  budget=$(( $(left) - BENCH_RESERVE ))
  if [ "$budget" -lt 60 ]; then
    echo "forge skipped: a budget of $budget s" | tee -a "$log"
  else
    run forge $(( $(left) - 10 )) python3 -m kernforge stencil forge "${forge_args[@]}" \
      --out "$forge_dir" --budget "$budget"
  fi
  for f in matrix.json perf-log.jsonl forge-summary.json; do
    [ -f "$forge_dir/$f" ] && cp "$forge_dir/$f" "$OUT/$NAME-$f"
  done
elif [ -n "${BENCH_TABLE:-}" ]; then
  forge_dir=/tmp/kf-table-$NAME; rm -rf "$forge_dir"; mkdir -p "$forge_dir"
  cp "$BENCH_TABLE" "$forge_dir/matrix.json" \
    || { echo "cannot copy $BENCH_TABLE" | tee -a "$log"; exit 2; }
fi
if [ ! -f "$bench_json" ] && [ -n "${BENCH_FROM:-}" ] && [ -f "$BENCH_FROM" ]; then
  cp "$BENCH_FROM" "$bench_json"
fi
sel=()
if [ -n "${BENCH_CELLS:-}" ]; then
  sel=(--cell-ids "$BENCH_CELLS")
  [ -s "$forge_dir/matrix.json" ] && sel+=(--table "$forge_dir/matrix.json")
elif [ -s "$forge_dir/matrix.json" ]; then
  sel=(--table "$forge_dir/matrix.json" --changed-from src/kernforge/stencil/data/matrix.json)
fi
if [ ${#sel[@]} -gt 0 ]; then
  eval "bench_args=(${BENCH_ARGS:-})"
  run bench $(( $(left) - 5 )) python3 -m kernforge stencil bench "${sel[@]}" \
    --json "$bench_json" --md "$OUT/$NAME-bench.md" --resume "${bench_args[@]}"
  [ -f "$bench_json" ] && cp "$bench_json" "$OUT/$NAME-bench.json"
fi
if [ -n "${SNAP_CELLS:-}" ]; then
  snap=(--cell-ids "$SNAP_CELLS")
  [ -s "$forge_dir/matrix.json" ] && snap+=(--table "$forge_dir/matrix.json")
  run snapshot $(( $(left) - 5 )) python3 -m kernforge stencil bench "${snap[@]}" \
    --baselines '' --json "$snap_json" --resume
  [ -f "$snap_json" ] && cp "$snap_json" "$OUT/$NAME-snap.json"
fi
tail -n 40 "$log"
