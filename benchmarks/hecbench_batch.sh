#!/bin/sh
# HeCBench programs through `kernforge app batch` (docs/applications.md, "Many programs"), run
# as one batch under a device-time budget, then the report. Run it again with the same OUT to
# go on after an interruption (finished programs are not run again).
#
# Reviewed manifests (benchmarks/hecbench/manifests/NAME.toml; benchmarks/hecbench/README.md),
# binaries built beforehand in build/hec of this checkout, or in $HECBENCH_BIN:
#
#   benchmarks/hecbench_batch.sh OUT [BUDGET [NAME...]]     e.g. runs/hec 20m heat jacobi
#
# BUDGET (default 25m) is the device time of this run (this allocation): a later run with the
# same OUT goes on with a new BUDGET of its own; programs stopped mid-way go first.
#
# The manifests are copied into OUT/manifests with their source set to the binaries'
# directory, in the order given (without NAMEs: all, the stencil and PDE programs first).
# The kernels' sources a manifest binds ([integrate] sources = ["../hecsrc/..."]) are set to
# HeCBench's src in $HECBENCH_SRC (default: build/hecsrc of this checkout, which build.sh links);
# where that directory is missing, the manifests are copied without sources (M3a then probes).
# HECBENCH_QUICK=1 copies them with fewer rounds (M1 2, M4 3) and operator matching only (no
# tuning), for a first pass on little device time; use another OUT for the full manifests (a
# changed manifest is run again from the start).
#
# Drafted manifests, built on this machine from HeCBench's sources (nothing reviewed):
#
#   benchmarks/hecbench_batch.sh --draft HECBENCH_SRC OUT [BUDGET]    e.g. ~/HeCBench/src runs/d
#
# Exit status: that of `kernforge app batch` (0 every program finished, 1 the budget ran out
# first, 9 one verdict inconclusive, 2 bad input); 2 before anything runs for a NAME without a
# manifest or a program whose binary is missing.
set -eu
py=${PYTHON:-python}
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--draft" ]; then
    if [ $# -lt 3 ]; then
        echo "usage: $0 --draft HECBENCH_SRC OUT [BUDGET]" >&2
        exit 2
    fi
    src=$2 out=$3 budget=${4:-25m}
    "$py" -m kernforge app draft "$src" --only '*-cuda' --out "$out/manifests"
    set -- ""
else
    if [ $# -lt 1 ]; then
        echo "usage: $0 OUT [BUDGET [NAME...]]   or   $0 --draft HECBENCH_SRC OUT [BUDGET]" >&2
        exit 2
    fi
    out=$1 budget=${2:-25m}
    shift $(( $# < 2 ? $# : 2 ))
    bin=$(cd "${HECBENCH_BIN:-$here/../build/hec}" 2>/dev/null && pwd) || {
        echo "no binaries at ${HECBENCH_BIN:-$here/../build/hec}: build them" \
             "(benchmarks/hecbench/README.md) or set HECBENCH_BIN" >&2
        exit 2
    }
    # without NAMEs: the stencil and PDE programs first, then the others
    [ $# -gt 0 ] || set -- $(cd "$here/hecbench/manifests" &&
        { grep -l '^# HeCBench .*(stencil/PDE)' *.toml; grep -L '^# HeCBench .*(stencil/PDE)' *.toml; } |
        sed 's/\.toml$//')
    hsrc=$(cd "${HECBENCH_SRC:-$here/../build/hecsrc}" 2>/dev/null && pwd) || {
        hsrc=""
        echo "no HeCBench sources at ${HECBENCH_SRC:-$here/../build/hecsrc}: the manifests" \
             "are copied without [integrate] sources (set HECBENCH_SRC)" >&2
    }
    if [ -n "$hsrc" ]; then
        srcs="s|\"\\.\\./hecsrc/|\"$hsrc/|g"
    else
        srcs='/^sources = /d'
    fi
    # every name and binary checked before anything is written: a program run without its
    # binary would finish BLOCKED, and a finished program is not run again by the next batch
    missing=""
    for name in "$@"; do
        m=$here/hecbench/manifests/$name.toml
        if [ ! -f "$m" ]; then
            echo "no manifest $m (the names are those of benchmarks/hecbench/manifests)" >&2
            exit 2
        fi
        for exe in $(sed -n 's|^run = "\./\([^ "]*\).*|\1|p' "$m" | sort -u); do
            [ -x "$bin/$exe" ] || missing="$missing $exe"
        done
    done
    if [ -n "$missing" ]; then
        echo "no binary in $bin for:$missing; build them (benchmarks/hecbench/README.md)," \
             "or leave their programs out (NAME... after the budget)" >&2
        exit 2
    fi
    mkdir -p "$out/manifests"
    for name in "$@"; do
        m=$here/hecbench/manifests/$name.toml
        if [ -n "${HECBENCH_QUICK:-}" ]; then
            sed -e "s|^source = .*|source = \"$bin\"|" -e "$srcs" -e 's/^rounds = .*/rounds = 2/' \
                -e 's/^e2e_rounds = .*/e2e_rounds = 3/' -e 's/^strategies = .*/strategies = ["operator"]/' \
                "$m" > "$out/manifests/$name.toml"
        else
            sed -e "s|^source = .*|source = \"$bin\"|" -e "$srcs" "$m" > "$out/manifests/$name.toml"
        fi
    done
    for name in "$@"; do  # each NAME becomes its copy, kept one argument (OUT may hold spaces)
        set -- "$@" "$out/manifests/$name.toml"
        shift
    done
fi
status=0
if [ -z "$*" ]; then
    "$py" -m kernforge app batch --dir "$out/manifests" --out "$out/batch" --budget "$budget" \
        || status=$?
else
    "$py" -m kernforge app batch "$@" --out "$out/batch" --budget "$budget" || status=$?
fi
if ls "$out"/batch/apps/*/app.db >/dev/null 2>&1; then
    "$py" -m kernforge app report "$out"/batch/apps/* -o "$out/applications.md"
fi
exit $status
