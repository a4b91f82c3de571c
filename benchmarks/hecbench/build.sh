#!/bin/sh
# Builds the HeCBench programs of benchmarks/hecbench/manifests and puts what they run in BIN
# (default: build/hec of this checkout): BIN/NAME-cuda (HeCBench's `make ARCH=...`, stripped),
# and the inputs their command lines name (benchmarks/hecbench/README.md); links build/hecsrc
# to HECBENCH_SRC, where the manifests' [integrate] sources are.
#
#   benchmarks/hecbench/build.sh HECBENCH_SRC [BIN [ARCH]]    e.g. ~/HeCBench/src build/hec sm_90
#
# HECBENCH_SRC is HeCBench's src/ (NAME-cuda directories). A program whose build fails is
# listed at the end and left out; exit status 1 then, 2 for bad input.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 HECBENCH_SRC [BIN [ARCH]]   (HECBENCH_SRC: HeCBench's src directory)" >&2
    exit 2
fi
src=$(cd "$1" && pwd) bin=${2:-$here/../../build/hec} arch=${3:-sm_90}
mkdir -p "$bin"
# the manifests' [integrate] sources are under build/hecsrc: HeCBench's src, linked once
[ -e "$here/../../build/hecsrc" ] || ln -s "$src" "$here/../../build/hecsrc"
failed=""
for m in "$here"/manifests/*.toml; do
    name=$(basename "$m" .toml)
    dir=$src/$name-cuda
    prog=$(sed -n 's/^program *= *//p' "$dir/Makefile" 2>/dev/null | head -1)
    if make -C "$dir" ARCH="$arch" >"$bin/.build-$name.log" 2>&1 && [ -f "$dir/${prog:-main}" ]
    then
        install -m 755 "$dir/${prog:-main}" "$bin/$name-cuda"
        strip "$bin/$name-cuda"
        rm -f "$bin/.build-$name.log"
    else
        failed="$failed $name"
    fi
done
# inputs: HeCBench keeps hotspot's grids under DVC: random grids of the same format
python3 - "$bin" <<'EOF'
import random, sys
from pathlib import Path
bin_ = Path(sys.argv[1])
rng = random.Random(1)
for d, n, files in (("hotspot-data", 512 * 512, ("temp_512", "power_512")),
                    ("hotspot3D-data", 128 * 128 * 8, ("temp_128x8", "power_128x8"))):
    (bin_ / d).mkdir(exist_ok=True)
    for f in files:
        lo, hi, fmt = (323.0, 343.0, "%.3f\n") if f.startswith("temp") else (0.0, 0.002, "%.6f\n")
        (bin_ / d / f).write_text("".join(fmt % rng.uniform(lo, hi) for _ in range(n)))
EOF
mkdir -p "$bin/divergence-data" "$bin/sw4ck-data"
cp "$src/divergence-cuda/input.txt" "$bin/divergence-data/"
cp "$src/sw4ck-cuda/sw4ck.in" "$bin/sw4ck-data/"
if [ -n "$failed" ]; then
    echo "not built (logs: $bin/.build-NAME.log):$failed" >&2
    exit 1
fi
