#!/bin/sh
# HeCBench programs through `kernforge app draft` and `kernforge app batch` (docs/applications.md,
# "Many programs"): manifests drafted from the programs' Makefiles, run as one batch under a
# device-time budget, then the report. Run it again with the same OUT to go on after an
# interruption (finished programs are not run again).
#
#   benchmarks/hecbench_batch.sh HECBENCH_SRC OUT [BUDGET]      e.g. /work/hecsrc/src runs/hec 25m
#
# Exit status: that of `kernforge app batch` (0 every program finished, 1 the budget ran out
# first, 9 one verdict inconclusive, 2 bad input).
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 HECBENCH_SRC OUT [BUDGET]" >&2
    exit 2
fi
src=$1 out=$2 budget=${3:-25m}
py=${PYTHON:-python}
"$py" -m kernforge app draft "$src" --only '*-cuda' --out "$out/manifests"
status=0
"$py" -m kernforge app batch --dir "$out/manifests" --out "$out/batch" --budget "$budget" \
    || status=$?
if ls "$out"/batch/apps/*/app.db >/dev/null 2>&1; then
    "$py" -m kernforge app report "$out"/batch/apps/* -o "$out/applications.md"
fi
exit $status
