#!/usr/bin/env bash
# The stencil bench in time-boxed groups (one process per stencil), merged into one JSON, so a
# device call with little time left still returns every group that finished.
#   device run, carry [".whl"]:  bash scripts/stencil-bench-groups.sh SECONDS_PER_GROUP [bench args]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}; mkdir -p "$OUT/groups"
limit=${1:-60}; shift || true
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
for st in star_1 star_2 box_1 box_2 varcoeff_star_1 star_1_t4; do
  echo "===== $st" >> "$OUT/bench.log"
  timeout "$limit" python3 -m kernforge stencil bench --stencils "$st" \
    --json "/tmp/bench-$st.json" "$@" >> "$OUT/bench.log" 2>&1
  echo "$st rc=$?" | tee -a "$OUT/bench.log"
done
python3 - "$OUT/stencil-bench.json" <<'PY'
import glob, json, sys
parts = [json.load(open(p)) for p in sorted(glob.glob("/tmp/bench-*.json"))]
merged = dict(parts[0]) if parts else {}
merged["cells"] = [c for p in parts for c in p["cells"]]
merged["groups"] = [p.get("seconds") for p in parts]
json.dump(merged, open(sys.argv[1], "w"), indent=1)
print(f"merged {len(parts)} groups, {len(merged['cells'])} cells")
PY
