"""Forge the stencil operator matrix on the GPU (one device call) and write the table and logs.

    python scripts/stencil_forge.py --rounds 8 --out $OUT [--stencils star_1 ...] [--shapes ...]

Starts from the committed dispatch table (src/kernforge/stencil/data/matrix.json) when
--table is left at its default, so a later run continues from the prior best. Writes
matrix.json, perf-log.jsonl and ideas.md (this run's section) into --out; copy them back into
the repository (src/kernforge/stencil/data/, docs/stencil/) after reviewing them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernforge.forge.parallel import forge_parallel
from kernforge.forge.run import BUILDS, forge_run
from kernforge.stencil.matrix import TABLE_PATH
from kernforge.stencil.spec import matrix


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stencils", nargs="*")
    ap.add_argument("--shapes", nargs="*")
    ap.add_argument("--precisions", nargs="*")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--changes", default=None, help="comma-separated changes (one round each)")
    ap.add_argument("--seed-design", default=None, help="start cells from this design")
    ap.add_argument("--band", type=float, default=0.02)
    ap.add_argument("--table", type=Path, default=TABLE_PATH, help="the starting table")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "forge-out")))
    ap.add_argument("--cache", type=Path, default=None,
                    help="compiled cubins (default: $KERNFORGE_CACHE_DIR/cubins, else "
                         "~/.cache/kernforge/cubins; with --gpus > 1 always the default)")
    ap.add_argument("--emulate", action="store_true", help="host emulator (small grids)")
    ap.add_argument("--gpus", type=int, default=1, help="forge processes, one per GPU")
    ap.add_argument("--build", choices=BUILDS, default="nvrtc",
                    help="nvrtc: as dispatch builds (on the GPU machine); nvcc: cubins (--cache)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: start no round that would end (with the final pass) later")
    args = ap.parse_args()
    cells = matrix(args.stencils, args.shapes, args.precisions)
    changes = [c for c in args.changes.split(",") if c] if args.changes else None
    if changes:
        args.rounds = len(changes)
    t0 = time.time()
    def say(m: str) -> None:
        print(f"[{time.time() - t0:7.1f}s] {m}", flush=True)

    if args.gpus > 1:
        summary = forge_parallel(cells, args.out, gpus=args.gpus, start_table=args.table,
                                 rounds=args.rounds, band=args.band, budget_s=args.budget,
                                 emulate=args.emulate, changes=changes,
                                 seed_design=args.seed_design, say=say, build=args.build)
    else:
        summary = forge_run(cells, args.out, start_table=args.table, rounds=args.rounds,
                            band=args.band, emulate=args.emulate, cache=args.cache,
                            budget_s=args.budget, changes=changes,
                            seed_design=args.seed_design, say=say, build=args.build)
    print(f"forge: {len(cells)} cells, {args.rounds} rounds, {time.time() - t0:.0f} s; "
          f"regressed: {summary['regressed'] or 'none'}")
    for rec in summary["final"]:
        print(f"  {rec['cell']:<34} {rec['now_s'] * 1e3:9.3f} ms  ratio {rec['ratio']:.3f}  "
              f"err {rec['error']:.1e}{'  REGRESSED' if rec['regressed'] else ''}"
              f"{'  drift' if rec.get('drift') else ''}")
    return 1 if summary["regressed"] or summary.get("failed") else 0


if __name__ == "__main__":
    raise SystemExit(main())
