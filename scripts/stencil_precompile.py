"""Compile a forge round's candidates on this machine, so the device call finds them cached
(for forge runs with ``--build nvcc``; the default ``--build nvrtc`` builds on the GPU machine).

    python scripts/stencil_precompile.py --changes pairs2 --cache .carry/cubins [--stencils ...]
    tar cJf .carry/cubins.tar.xz -C .carry/cubins .   # cubins compress ~13x
    device run, carry [".whl", ".carry/cubins.tar.xz"]: GPU_STEPS=stencil-forge \
        FORGE_ARGS="--changes pairs2,... --stencils ... --build nvcc" bash scripts/gpu-check.sh
    (gpu-check.sh unpacks the archive into the forge's cache, $KERNFORGE_CACHE_DIR/cubins)

The forge compiles each round's candidates before it measures them (nvcc on the device
machine's cores: 1139 operators took 71 s of device time on the H200's 16 cores in session
10). Only the first round's candidates follow from the table before the run (later rounds start
from its winners), so this compiles those and every incumbent (the final pass builds them
again); for ``tpe``, the first of its three batches (its studies are seeded by the cell's id
and no time is known yet: the same operators the device run asks for). The cache is keyed by source, options and architecture (``forge.compile``); a cubin
built by this machine's nvcc runs on the device's driver when that driver is as new or newer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernforge.core.errors import KernforgeError
from kernforge.forge.bo import first_batch
from kernforge.forge.compile import compile_all
from kernforge.forge.ideas import TPE_ROUNDS
from kernforge.forge.loop import IDEAS, Forge, _candidates
from kernforge.forge.run import default_compiler
from kernforge.stencil.matrix import TABLE_PATH
from kernforge.stencil.spec import Cell, matrix


def _no_sessions(cell: Cell) -> Any:
    raise AssertionError("precompiling measures nothing")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stencils", nargs="*")
    ap.add_argument("--shapes", nargs="*")
    ap.add_argument("--precisions", nargs="*")
    ap.add_argument("--changes", required=True,
                    help="the forge run's --changes; only its first round is compiled")
    ap.add_argument("--table", type=Path, default=TABLE_PATH)
    ap.add_argument("--seed-design", default=None, help="the forge run's --seed-design")
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc (default: cores)")
    args = ap.parse_args()
    change = args.changes.split(",")[0]
    if change not in IDEAS:
        print(f"error: unknown forge change {change!r}; choose from {', '.join(IDEAS)}",
              file=sys.stderr)
        return 2
    try:
        cells = matrix(args.stencils, args.shapes, args.precisions)
        # the run's own start: the table's incumbents (naive where a cell has none or its entry
        # no longer builds), seeded cells at the seed design's defaults
        forge = Forge(cells, args.table, Path(os.devnull), default_compiler(args.cache),
                      _no_sessions, seed_design=args.seed_design)
        ops = []
        for cell in cells:
            inc = forge.incumbents[cell.id]
            ops.append(forge._op(cell))
            ops.extend(first_batch(cell, inc.design, inc.params, change)
                       if change in TPE_ROUNDS else _candidates(cell, inc, change))
    except KernforgeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    t0 = time.time()
    unique = list({(op.cell_id, op.key): op for op in ops}.values())
    print(f"{change}: compiling {len(unique)} operators into {args.cache}", flush=True)
    try:
        built = compile_all(unique, args.cache, jobs=args.jobs)
    except KernforgeError as exc:  # no nvcc
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failed = [b for b in built if not b.ok]
    size = sum(p.stat().st_size for p in args.cache.glob("*.cubin"))
    print(f"{len(built) - len(failed)} compiled, {len(failed)} failed, {time.time() - t0:.0f} s; "
          f"cache {size / 2**20:.1f} MiB")
    for b in failed[:5]:  # a candidate that does not compile is the forge's to reject
        print(f"  {b.op.key}: {b.log.strip().splitlines()[-1] if b.log.strip() else '?'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
