#!/usr/bin/env python3
"""apply_boundary's unmodified seed against the roofline gate, ``--runs`` times under load.

Issue 43: in ``make demo`` evolve refused the unmodified seed of ``apply_boundary`` with
``roofline:exceeded`` (the bound counted the whole grid where the kernel writes its faces, and
was calibrated on a baseline timed at another moment). This runs the CPU demo's evolve step
for that kernel, as the demo runs it: ``examples/heat3d_cpu.py`` recorded at the demo's size
(:data:`kernforge.pipeline.demo.APPS`), the recordings of ``apply_boundary`` hottest first
(:class:`~kernforge.pipeline.evolve_eval.EvolveTarget`), the evaluator evolve builds
(:func:`~kernforge.pipeline.evolve_eval.make_evolve_evaluator`: every integrity gate, the
roofline included; the demo's inner trials and repeat from
:func:`~kernforge.pipeline.demo.demo_evolve_config`), with the seed (the recorded source) as
the candidate. Before each run the load generator of ``self_compare.py`` starts ``level``
processes (busy spells and pauses of random length), the level cycling from none to every
core.

Prints a table per load level (runs, roofline refusals, evaluation outcomes) and exits 1 on
any roofline refusal. ``--json`` writes a figure file with provenance and every run.

    python benchmarks/roofline_seed.py [--runs 50] [--n 128] [--max-load CORES]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from self_compare import Load

from kernforge.core import Status
from kernforge.evolve.types import EvalResult
from kernforge.harness.provenance import provenance, write_figure
from kernforge.pipeline.demo import APPS, EXAMPLES, demo_evolve_config
from kernforge.pipeline.evolve_eval import EvolveTarget, make_evolve_evaluator
from kernforge.record import find_recordings, load_recording

KERNEL = "apply_boundary"


def record_demo(root: Path, n: int, steps: int) -> list[Any]:
    """The CPU demo's application recorded as the demo records it (the first launch of each
    kernel skipped, at most two per kernel)."""
    app = EXAMPLES / APPS["cpu"].script
    subprocess.run([sys.executable, "-m", "kernforge", "record", "-o", str(root),
                    "--skip", "1", "--max-instances", "2", "--", sys.executable, str(app),
                    "--n", str(n), "--steps", str(steps)], check=True, capture_output=True)
    return [load_recording(p) for p in find_recordings(root)]


def outcome(r: EvalResult) -> str:
    """``ok``, ``roofline`` (refused by the roofline gate) or the failure's status."""
    if r.status is Status.OK:
        return "ok"
    text = r.message.lower()
    return "roofline" if "roofline" in text or "impossible" in text else r.status.value


def summarize(rows: list[dict[str, Any]]) -> tuple[list[str], bool]:
    kinds = sorted({r["outcome"] for r in rows} | {"ok", "roofline"})
    head = f"{'load':>4}  {'runs':>4}  " + "  ".join(f"{k:>10}" for k in kinds)
    lines = [head]
    for lv in sorted({r["load"] for r in rows}):
        rs = [r for r in rows if r["load"] == lv]
        lines.append(f"{lv:>4}  {len(rs):>4}  " + "  ".join(
            f"{sum(r['outcome'] == k for r in rs):>10}" for k in kinds))
    refused = sum(r["outcome"] == "roofline" for r in rows)
    ok = refused == 0
    lines.append(f"roofline refusals of the unmodified seed: {refused} of {len(rows)} runs "
                 f"-> {'OK' if ok else 'FAILED'}")
    return lines, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--n", type=int, default=APPS["cpu"].default_n,
                    help="grid points per axis (default: the CPU demo's)")
    ap.add_argument("--steps", type=int, default=4, help="time steps of the recorded run")
    ap.add_argument("--max-load", type=int, default=os.cpu_count() or 1,
                    help="the highest load level (processes), default every core")
    ap.add_argument("--json", type=Path, help="write the figure file here")
    args = ap.parse_args()
    cfg = demo_evolve_config(1, APPS["cpu"].inner_trials, 7)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kernforge-roofline-") as tmp:
        recs = [r for r in record_demo(Path(tmp), args.n, args.steps)
                if r.source.entry == KERNEL]
        if not recs:
            print(f"the demo application recorded no {KERNEL} launch", file=sys.stderr)
            return 2
        target = EvolveTarget.of(recs, preset=cfg.tuner.preset)
        evaluate = make_evolve_evaluator(target, inner_trials=cfg.tuner.trials,
                                         repeat=cfg.tuner.repeat, seed=cfg.tuner.seed)
        t0 = time.monotonic()
        for i in range(args.runs):
            level = i % (args.max_load + 1)
            load = Load(level, i)
            try:
                time.sleep(0.3 if level else 0.0)
                r = evaluate(target.original_code)
            finally:
                load.stop()
            rows.append({"run": i, "load": level, "outcome": outcome(r),
                         "status": r.status.value, "fitness_s": r.fitness,
                         "message": r.message[:300]})
            print(f"{i + 1}/{args.runs} load {level}: {rows[-1]['outcome']}"
                  + (f" ({r.message[:160]})" if rows[-1]["outcome"] != "ok" else
                     f" {r.fitness * 1e6:.1f} us" if r.fitness else ""), flush=True)
        seconds = time.monotonic() - t0
    lines, ok = summarize(rows)
    print("\n".join(lines))
    if args.json:
        write_figure(args.json, {"kind": "roofline-seed", "ok": ok, "runs": len(rows),
                                 "seconds": seconds, "unit": recs[0].name},
                     {"runs": rows}, provenance(target.backend, command=["python", *sys.argv]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
