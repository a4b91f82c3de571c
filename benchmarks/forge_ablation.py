#!/usr/bin/env python3
"""The forge's ablation: its rounds against TPE alone and random search, same cells, same budget.

Every arm is a sampler of tune over the same space of each cell (every operator its designs
build, :class:`kernforge.forge.cell_rounds.CellSpace`), with the same number of evaluations
per cell and seed, through the same objective (build, oracle on fresh inputs, time:
:mod:`kernforge.forge.cell_tune`):

  rounds   the forge's rounds: design round, one-parameter rounds, pairs, then TPE on the
           incumbent's design (the ``rounds`` sampler with :class:`ForgeRounds`)
  tpe      TPE over the whole space
  random   uniform random search over the whole space

Each run starts from the cell's naive operator (trial 0). The table gives, per cell and arm,
the best time (median over the seeds of each run's best), the speedup of that over the naive
operator (the median of every run's trial 0), and the evaluations a run needed to come within
5% of the best time any run found on the cell (median over the seeds that did, and how many
did); the last rows, per arm, the geometric mean of the speedups. ``--backend cpu-emulator``
runs the kernels on the host emulator (CI: its times say nothing about a GPU); ``cuda`` on
the GPU.

    python benchmarks/forge_ablation.py --backend cpu-emulator --budget 6 --seeds 2 \\
        --cells star_1/32x16x16/fp32 box_1/32x16x16/fp32
    python benchmarks/forge_ablation.py --backend cuda --budget 60 --seeds 3 \\
        --cells star_1/512x512x512/fp32 box_1/512x512x512/fp32 ... \\
        --json docs/benchmarks/data/forge-ablation-h200.json \\
        --md docs/benchmarks/forge-ablation-h200.md
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernforge.forge.cell_rounds import CellSpace
from kernforge.forge.cell_tune import BACKENDS, tune_cell
from kernforge.stencil.spec import Cell
from kernforge.tune import Budget

ARMS = ("rounds", "tpe", "random")
WITHIN = 0.95  # "reached": a best time within 5% of the cell's best (time <= best / 0.95)


def run_arm(cs: CellSpace, arm: str, seed: int, budget: int, backend: str, studies: Path,
            device: Any) -> dict[str, Any]:
    """One run: the trajectory of evaluated trials (time or None, operator key)."""
    t0 = time.monotonic()
    r = tune_cell(cs, sampler=arm, budget=Budget(trials=budget), backend=backend,
                  storage=studies / f"{arm}-{seed}.db",
                  study_name=f"{cs.cell.id}:{arm}:{seed}", seed=seed, device=device)
    path = []
    for t in r.trials:
        if t.evaluated:
            op = cs.operator(t.config)
            path.append([t.median, op.key if op is not None else None, t.status.value])
    best = r.best_trial
    best_op = cs.operator(best.config) if best is not None else None
    return {"cell": cs.cell.id, "arm": arm, "seed": seed, "evaluations": r.evaluations,
            "stop": r.stop_reason, "seconds": time.monotonic() - t0,
            "naive_s": r.baseline.median if r.baseline is not None else None,
            "best_s": best.median if best is not None else None,
            "best_op": best_op.key if best_op is not None else None,
            "trials": path}


def reached(run: dict[str, Any], target: float) -> int | None:
    """Evaluations until the run's best time is at most ``target``; None if never."""
    best = math.inf
    for i, (seconds, _, _) in enumerate(run["trials"], 1):
        if seconds is not None:
            best = min(best, seconds)
        if best <= target:
            return i
    return None


def summarize(runs: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Rows per (cell, arm) and the geometric-mean row per arm (module docstring)."""
    rows: list[dict[str, Any]] = []
    cells = list(dict.fromkeys(r["cell"] for r in runs))
    for cell in cells:
        mine = [r for r in runs if r["cell"] == cell]
        naive = [r["naive_s"] for r in mine if r["naive_s"] is not None]
        bests = [r["best_s"] for r in mine if r["best_s"] is not None]
        if not naive or not bests:
            continue
        naive_s, cell_best = statistics.median(naive), min(bests)
        for arm in arms:
            ours = [r for r in mine if r["arm"] == arm and r["best_s"] is not None]
            if not ours:
                continue
            best_s = statistics.median(r["best_s"] for r in ours)
            hits = [n for r in ours if (n := reached(r, cell_best / WITHIN)) is not None]
            rows.append({"cell": cell, "arm": arm, "best_s": best_s, "naive_s": naive_s,
                         "speedup": naive_s / best_s,
                         "evals_to_95": statistics.median(hits) if hits else None,
                         "reached": len(hits), "seeds": len(ours),
                         "best_op": min(ours, key=lambda r: r["best_s"])["best_op"]})
    summary = []
    for arm in arms:
        mine = [row for row in rows if row["arm"] == arm]
        if mine:
            gmean = math.exp(statistics.fmean(math.log(row["speedup"]) for row in mine))
            hits = [row["evals_to_95"] for row in mine if row["evals_to_95"] is not None]
            summary.append({"arm": arm, "geomean_speedup": gmean, "cells": len(mine),
                            "median_evals_to_95": statistics.median(hits) if hits else None,
                            "reached": sum(row["reached"] for row in mine),
                            "runs": sum(row["seeds"] for row in mine)})
    return {"rows": rows, "summary": summary}


def table(result: dict[str, Any], budget: int) -> list[str]:
    head = (f"{'cell':<28} {'arm':<7} {'best time':>11} {'speedup':>8} "
            f"{'evals to 95%':>13} {'reached':>8}  best operator")
    lines = [head, "-" * len(head)]
    for row in result["rows"]:
        evals = "-" if row["evals_to_95"] is None else f"{row['evals_to_95']:g}"
        lines.append(f"{row['cell']:<28} {row['arm']:<7} {row['best_s'] * 1e6:>9.1f}us "
                     f"{row['speedup']:>7.2f}x {evals:>13} "
                     f"{row['reached']:>4}/{row['seeds']:<3}  {row['best_op']}")
    lines.append("-" * len(head))
    for s in result["summary"]:
        evals = "-" if s["median_evals_to_95"] is None else f"{s['median_evals_to_95']:g}"
        lines.append(f"{'geomean (' + str(s['cells']) + ' cells)':<28} {s['arm']:<7} "
                     f"{'':>11} {s['geomean_speedup']:>7.2f}x {evals:>13} "
                     f"{s['reached']:>4}/{s['runs']:<3}  (budget {budget} evaluations)")
    return lines


def backend_object(backend: str) -> tuple[Any, Any]:
    """(the backend provenance names, the GPU device the runs share or None)."""
    if backend == "cuda":
        from kernforge.forge.measure import GpuDevice

        device = GpuDevice()
        return device.backend, device
    from kernforge.backends.cpu import CpuBackend

    return CpuBackend(), None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", nargs="+", required=True, help="cell ids (STENCIL/SHAPE/PREC)")
    ap.add_argument("--budget", type=int, default=40, help="evaluations per run (default 40)")
    ap.add_argument("--seeds", type=int, default=3, help="runs per cell and arm (default 3)")
    ap.add_argument("--arms", default=",".join(ARMS), help="samplers (default %(default)s)")
    ap.add_argument("--backend", choices=BACKENDS, default="cpu-emulator")
    ap.add_argument("--studies", type=Path, help="keep the studies here (default: a temporary "
                    "directory; an existing one resumes its runs)")
    ap.add_argument("--json", type=Path, help="write the figure file (with provenance) here")
    ap.add_argument("--md", type=Path, help="write a Markdown page here")
    args = ap.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if args.budget < 1 or args.seeds < 1 or not arms:
        ap.error("--budget and --seeds must be >= 1, --arms must name a sampler")
    cells = [CellSpace(Cell.parse(c)) for c in args.cells]
    be, device = backend_object(args.backend)
    t0 = time.monotonic()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kernforge-ablation-") as tmp:
        root = args.studies or Path(tmp)
        for cs in cells:
            studies = root / cs.cell.id.replace("/", "_")
            studies.mkdir(parents=True, exist_ok=True)
            for arm in arms:
                for seed in range(args.seeds):
                    run = run_arm(cs, arm, seed, args.budget, args.backend, studies, device)
                    runs.append(run)
                    print(f"{cs.cell.id} {arm} seed {seed}: best {run['best_op']} "
                          f"({run['evaluations']} evaluations, {run['seconds']:.0f} s)",
                          file=sys.stderr, flush=True)
    seconds = time.monotonic() - t0
    result = summarize(runs, arms)
    lines = table(result, args.budget)
    print("\n".join(lines))
    from kernforge.harness.provenance import provenance, write_figure

    prov = provenance(be, command=["python", *sys.argv] if argv is None
                      else ["python", "benchmarks/forge_ablation.py", *argv])
    figure = {"kind": "forge-ablation", "backend": args.backend, "budget": args.budget,
              "seeds": args.seeds, "arms": arms, "cells": args.cells, "seconds": seconds,
              **result}
    if args.json:
        write_figure(args.json, figure, {"runs": runs}, prov)
    if args.md:
        note = (" The emulator's times say nothing about GPU speed: this page shows the "
                "harness runs." if args.backend == "cpu-emulator" else "")
        args.md.write_text("\n".join([
            f"# The forge's rounds against TPE and random search ({args.backend})", "",
            (f"Same cells, same budget: {args.budget} evaluations per run, {args.seeds} "
             f"seeds per cell and arm; speedup over the cell's naive operator; evaluations to "
             f"come within 5% of the best time any run found on the cell.{note}"), "",
            (f"- Device: {prov['device']}; date: {prov['date']}; kernforge "
             f"{prov['kernforge_version']} (git {(prov['git']['revision'] or '?')[:12]})"),
            f"- Command: `{' '.join(prov['command'])}` ({seconds:.0f} s)", "",
            "```", *lines, "```", ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
