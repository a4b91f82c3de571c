#!/usr/bin/env python3
"""Tuner benchmark (issue 4): TPE vs random against the exhaustive best, on recorded kernels.

Two steps, so the expensive one runs once on the GPU and the samplers are compared on it:

  measure   record applications (default examples/heat3d_cupy.py --n 256 and
            examples/jacobi2d_cupy.py --n 4096), build each unit's search space (the
            backend's "quick" preset plus constant scalars), and
            evaluate EVERY valid point with the real evaluator (compile, verify, time);
            writes the table (config -> status, median) as JSON.
  simulate  replay the samplers against that table (Kernel Tuner's simulation mode): TPE and
            random, 5 seeds, 30 evaluations each; prints, per kernel, the median best-so-far
            (relative to the exhaustive best) and how many evaluations each seed needed to
            come within 3%; writes a PNG of the curves.

    python benchmarks/bench_tuner.py measure --out DIR            # on the GPU machine
    python benchmarks/bench_tuner.py simulate DIR/tuner_table.json --png docs/benchmarks/x.png
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kernforge.core import Measurement, Status
from kernforge.tune import Budget, SearchSpace, tune

ROOT = Path(__file__).resolve().parents[1]
console = Console(width=150)


def measure(args: argparse.Namespace) -> int:
    import kernforge
    from kernforge.pipeline.run_app import record_application
    from kernforge.record import find_recordings, load_recording
    from kernforge.replay.tuning import make_evaluator, space_from_dimensions

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commands = [["python", *app.split()] for app in args.app]
    tables: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, command in enumerate(commands):
            status, _ = record_application(command, Path(tmp) / f"app{i}", max_instances=1,
                                           skip=1)
            if status:
                raise SystemExit(f"{command} exited with status {status}")
        for path in find_recordings(tmp):
            rec = load_recording(path)
            if args.kernels and not fnmatchcase(rec.source.entry, args.kernels):
                continue
            be = kernforge.get_backend(rec.backend)
            space = bench_space(rec, be, space_from_dimensions)
            evaluate = make_evaluator(rec, be, repeat=args.repeat, warmup=1)
            points = list(space.valid_points())
            t0 = time.perf_counter()
            rows = []
            for i, config in enumerate(points):
                m = evaluate(config)
                rows.append({"key": space.key(config), "status": m.status.value,
                             "median": m.median if m.ok else None})
                if time.perf_counter() - t0 > args.max_seconds:
                    console.print(f"{rec.name}: stopped after {i + 1} of {len(points)} points")
                    break
            ok = [r["median"] for r in rows if r["median"] is not None]
            console.print(f"{rec.name}: {len(rows)} points, {len(ok)} verified, best "
                          f"{min(ok) * 1e6:.2f} us, {time.perf_counter() - t0:.0f} s",
                          markup=False)
            tables.append({"unit": rec.name, "space": space.to_json(), "rows": rows,
                           "complete": len(rows) == len(points)})
    device = kernforge.get_backend(tables and rec.backend or "cpu").identity()
    result = {"device": device, "date": time.strftime("%Y-%m-%d"),
              "command": " ".join(sys.argv), "app": commands,
              "space": "quick preset + const.scalars (min_blocks dropped above 800 points)",
              "repeat": args.repeat, "tables": tables}
    (out / "tuner_table.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


def bench_space(rec: Any, be: Any, space_from_dimensions: Any) -> SearchSpace:
    """The backend's quick preset plus constant scalars; launch_bounds_min_blocks dropped when
    that leaves over 800 points (so every space can be measured exhaustively)."""
    dims = dict(be.tuning_dimensions(rec.variant, "quick"))
    dims["const.scalars"] = (False, True)
    space = space_from_dimensions(rec, dims)
    if space.size() > 800:
        dims.pop("opt.launch_bounds_min_blocks", None)
        space = space_from_dimensions(rec, dims)
    return space


def _table_evaluator(rows: list[dict[str, Any]], space: SearchSpace) -> Any:
    by_key = {r["key"]: r for r in rows}

    def evaluate(config: dict[str, Any]) -> Measurement:
        r = by_key.get(space.key(config))
        if r is None:
            return Measurement(Status.INVALID_CONFIG, "not measured")
        if r["median"] is None:
            return Measurement(Status(r["status"]), "failed when measured")
        return Measurement(Status.OK, samples=(r["median"],))

    return evaluate


def _curve(space: SearchSpace, rows: list[dict[str, Any]], sampler: str, seed: int,
           trials: int) -> list[float]:
    """Best-so-far median after each evaluation."""
    evaluate = _table_evaluator(rows, space)
    res = tune(space, evaluate, sampler=sampler, budget=Budget(trials=trials), seed=seed)
    best, curve = float("inf"), []
    for t in sorted(res.trials, key=lambda t: t.number):
        if not t.evaluated:
            continue
        if t.ok and t.median is not None:
            best = min(best, t.median)
        curve.append(best)
    return curve + [best] * (trials - len(curve))


def simulate(args: argparse.Namespace) -> int:
    data = json.loads(Path(args.table[0]).read_text())
    for more in args.table[1:]:  # tables measured separately, merged by unit (later wins)
        extra = {t["unit"]: t for t in json.loads(Path(more).read_text())["tables"]}
        data["tables"] = [extra.pop(t["unit"], t) for t in data["tables"]] + list(extra.values())
    summary, curves = [], {}
    for tab in data["tables"]:
        space = SearchSpace.from_json(tab["space"])
        ok = [r["median"] for r in tab["rows"] if r["median"] is not None]
        best = min(ok)
        for sampler in ("tpe", "random"):
            runs = [_curve(space, tab["rows"], sampler, seed, args.trials)
                    for seed in range(args.seeds)]
            rel = [[b / best for b in run] for run in runs]
            med = [statistics.median(col) for col in zip(*rel)]
            curves[(tab["unit"], sampler)] = med
            hits = [next((i + 1 for i, r in enumerate(run) if r <= 1.03), None) for run in rel]
            summary.append({"unit": tab["unit"], "sampler": sampler, "points": len(tab["rows"]),
                            "valid": len(ok), "best_us": best * 1e6,
                            "at10": med[min(9, len(med) - 1)], "at30": med[-1],
                            "hits": hits})
    _report(data, summary)
    if args.png:
        _plot(curves, data, Path(args.png))
    tpe_ok = [s for s in summary if s["sampler"] == "tpe" and s["at30"] <= 1.03]
    console.print(f"TPE within 3% of the exhaustive best by {args.trials} evaluations (median "
                  f"of {args.seeds} seeds) on {len(tpe_ok)} of {len(data['tables'])} kernels")
    return 0


def _report(data: dict[str, Any], summary: list[dict[str, Any]]) -> None:
    t = Table(title=f"best-so-far / exhaustive best, median of seeds; {data['device']['device']}, "
                    f"{data['date']}, {data['app']}")
    for c in ("unit", "sampler", "points (verified)", "exhaustive best", "after 10", "after 30",
              "evaluations to reach 3% (per seed)"):
        t.add_column(c, justify="right")
    for s in summary:
        t.add_row(s["unit"], s["sampler"], f"{s['points']} ({s['valid']})",
                  f"{s['best_us']:.2f} us", f"{s['at10']:.3f}", f"{s['at30']:.3f}",
                  " ".join(str(h) if h else "-" for h in s["hits"]))
    console.print(t)


def _plot(curves: dict[tuple[str, str], list[float]], data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units = sorted({u for u, _ in curves})
    fig, axes = plt.subplots(1, len(units), figsize=(3.2 * len(units), 3), squeeze=False)
    for ax, unit in zip(axes[0], units):
        for sampler, color in (("tpe", "#dd8452"), ("random", "#4c72b0")):
            ys = curves[(unit, sampler)]
            ax.plot(range(1, len(ys) + 1), ys, color=color, label=sampler)
        ax.axhline(1.03, ls=":", color="#888")
        ax.set_title(unit, fontsize=8)
        ax.set_xlabel("evaluations", fontsize=8)
        ax.set_ylim(0.99, max(1.3, min(2.0, max(curves[(unit, "random")][:1] or [1.3]))))
    axes[0][0].set_ylabel("best so far / exhaustive best")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"TPE vs random, median of seeds ({data['device']['device']}, {data['date']})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--app", action="append", default=None,
                   help="an application and its arguments (repeatable)")
    m.add_argument("--repeat", type=int, default=5)
    m.add_argument("--kernels", default=None, help="only kernels matching this glob")
    m.add_argument("--max-seconds", type=float, default=150.0, help="per kernel")
    m.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    s = sub.add_parser("simulate")
    s.add_argument("table", nargs="+", help="table JSON file(s); later ones replace units")
    s.add_argument("--trials", type=int, default=30)
    s.add_argument("--seeds", type=int, default=5)
    s.add_argument("--png", default=None)
    args = ap.parse_args()
    if args.step == "measure" and not args.app:
        args.app = [f"{ROOT / 'examples' / 'heat3d_cupy.py'} --n 256 --steps 4",
                    f"{ROOT / 'examples' / 'jacobi2d_cupy.py'} --n 4096 --steps 4"]
    return measure(args) if args.step == "measure" else simulate(args)


if __name__ == "__main__":
    sys.exit(main())
