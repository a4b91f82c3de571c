#!/usr/bin/env python3
"""What supervised evaluation costs (issue 29): evaluations per minute of a 30-trial tune,
every candidate in a supervised worker process vs in this process, printed side by side.

It records the example application (CPU: examples/heat3d_cpu.py; CUDA: examples/heat3d_cupy.py)
once, then tunes its hottest ``heat_step`` unit with TPE (the backend's ``standard`` preset, the
same seed) in both modes, alternating the order over ``--rounds`` rounds. Each tune runs in a
fresh Python process with a fresh kernforge compile cache; on CUDA an untimed tune first fills
CuPy's on-disk kernel cache, which every tune shares, so each timed tune finds it in the same
state. Both modes are timed over the same span, as ``kernforge tune`` runs it: from before the
recording is loaded and the backend created to the tune's end; isolated, the worker pool is
started once the recording is loaded, before this process creates its backend (as the CLI does:
the worker makes its backend ready meanwhile), and closed inside the span (a closed worker's
exit, which tears down its device context, is not waited for: printed as "gone ... after"). Each
round prints the whole span, when the first evaluation answered (the start-up), the rate after
it (per-evaluation cost alone), the pool's close and the workers started (more than one: a
worker was replaced after a failed candidate). Then, per mode, the median of each stage of an
evaluation after the first (compile, restore, run, verify, measure; "other": its wall time
outside them; "sampler": the tuner between two evaluations). A worker keeps each recording's
device state between evaluations (:mod:`kernforge.replay.devstate`); the in-process path
prepares it, uploading the prologue, for every evaluation.

    python benchmarks/bench_isolation.py                     # cpu, 30 trials, 2 rounds
    python benchmarks/bench_isolation.py --backend cuda      # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APPS = {"cpu": ("heat3d_cpu.py", ["--n", "32", "--steps", "4"], "heat_step"),
        "cuda": ("heat3d_cupy.py", ["--n", "128", "--steps", "4"], "heat_stencil")}


def record(backend: str, out: Path) -> Path:
    script, args, kernel = APPS[backend]
    subprocess.run([sys.executable, "-m", "kernforge", "record", "-o", str(out), "--",
                    sys.executable, str(ROOT / "examples" / script), *args], check=True,
                   cwd=ROOT, capture_output=True, text=True)
    from kernforge.record import find_recordings

    units = [p for p in find_recordings(out) if kernel in p.name]
    if not units:
        raise SystemExit(f"recording {script} gave no {kernel} unit in {out}")
    return units[0]


STAGES = ("sampler", "wall", "compile", "restore", "run", "verify", "measure", "other")


def one_tune(unit: Path, isolated: bool, trials: int, cache: Path) -> dict[str, Any]:
    """One tune in a fresh compile cache: its evaluations, the span's seconds, seconds to the
    first evaluation's answer and from there to the last, the close, the workers started."""
    os.environ["KERNFORGE_CACHE_DIR"] = str(cache)
    from kernforge.backends import get_backend
    from kernforge.record import load_recording
    from kernforge.replay.isolate import REAPER, Isolation
    from kernforge.replay.tuning import build_space, make_evaluator
    from kernforge.tune import Budget, tune

    t0 = time.perf_counter()
    rec = load_recording(unit)
    # the pool before this process's backend, as `kernforge tune` starts it
    iso = Isolation(warm=(rec.backend,)) if isolated else None
    done: list[float] = []
    per: list[dict[str, float]] = []  # each evaluation: its wall time, the sampler's, stages
    try:
        be = get_backend(rec.backend)
        space = build_space(rec, be, preset="standard")
        evaluate = make_evaluator(rec, be, isolate=iso)

        def timed(config: dict[str, object]) -> object:
            start = time.perf_counter()
            m = evaluate(config)
            end = time.perf_counter()
            row = {"wall": end - start, "sampler": start - done[-1] if done else float("nan")}
            row.update(dict(m.stages))
            row["other"] = row["wall"] - sum(dict(m.stages).values())
            per.append(row)
            done.append(end)
            return m

        study = tune(space, timed, budget=Budget(trials=trials), seed=0)
    finally:
        t_end = time.perf_counter()
        if iso is not None:
            iso.close()
    t_closed = time.perf_counter()
    for t in threading.enumerate():  # outside the span: the workers' exits (context teardown)
        if t.name == REAPER:
            t.join()
    return {"evaluations": study.evaluations, "seconds": t_closed - t0,
            "first_s": done[0] - t0 if done else float("nan"),
            "steady_s": done[-1] - done[0] if len(done) > 1 else float("nan"),
            "steady_n": len(done) - 1, "close_s": t_closed - t_end,
            "exit_s": time.perf_counter() - t_closed,
            "started": iso.started if iso is not None else 0,
            "per_eval_ms": {k: 1e3 * statistics.median(r[k] for r in per[1:] if k in r)
                            for k in STAGES if any(k in r for r in per[1:])}}


def fresh_tune(unit: Path, isolated: bool, trials: int, cache: Path) -> dict[str, Any]:
    """:func:`one_tune` in a new Python process (nothing warm from an earlier tune)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from bench_isolation import one_tune; from pathlib import Path; "
            "print(json.dumps(one_tune(Path(sys.argv[2]), sys.argv[3] == '1', "
            "int(sys.argv[4]), Path(sys.argv[5]))))")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(unit),
                          str(int(isolated)), str(trials), str(cache)], check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=sorted(APPS), default="cpu")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernforge-bench-iso-") as tmp:
        unit = record(args.backend, Path(tmp) / "rec")
        if args.backend == "cuda":  # CuPy's kernel cache filled: every timed tune finds it so
            fresh_tune(unit, False, args.trials, Path(tmp) / "cache-warm")
        rates: dict[str, list[float]] = {"in-process": [], "isolated": []}
        steady: dict[str, list[float]] = {"in-process": [], "isolated": []}
        parts: dict[str, list[dict[str, float]]] = {"in-process": [], "isolated": []}
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for isolated in order:
                cache = Path(tmp) / f"cache-{r}-{int(isolated)}"
                t = fresh_tune(unit, isolated, args.trials, cache)
                name = "isolated" if isolated else "in-process"
                rates[name].append(60.0 * t["evaluations"] / t["seconds"])
                steady[name].append(60.0 * t["steady_n"] / t["steady_s"])
                parts[name].append(t["per_eval_ms"])
                workers = (f", {t['started']:.0f} worker(s) started, gone {t['exit_s']:4.2f} s "
                           f"after" if isolated else "")
                print(f"round {r + 1} {name:10s}: {t['evaluations']:.0f} evaluations in "
                      f"{t['seconds']:6.2f} s = {rates[name][-1]:6.1f} / min; first answer "
                      f"after {t['first_s']:5.2f} s, then {steady[name][-1]:6.1f} / min; "
                      f"close {t['close_s']:5.2f} s{workers}", flush=True)
    print(f"\n{args.backend}: {args.trials}-trial tune of {unit.name}, median of "
          f"{args.rounds} round(s)")
    print(f"  {'':22s} {'in-process':>12s} {'isolated':>12s} {'ratio':>8s}")
    for label, figures in (("whole tune", rates), ("after the first answer", steady)):
        a, b = statistics.median(figures["in-process"]), statistics.median(figures["isolated"])
        print(f"  {label:22s} {a:10.1f}/m {b:10.1f}/m {b / a:7.3f}x")
    print("  (goal: whole tune >= 0.9x; a worker keeps each recording's device state between "
          "evaluations,\n   the in-process path prepares it for every evaluation: see "
          "'other' below)")
    print("\nwhere an evaluation's time goes, after the first (ms, median over evaluations, "
          "then over rounds;\n'sampler': the tuner between two evaluations; 'other': the "
          "evaluation's wall time outside its stages)")
    for stage in STAGES:
        cols = [[p[stage] for p in parts[n] if stage in p] for n in ("in-process", "isolated")]
        if all(cols):
            a, b = (statistics.median(c) for c in cols)
            print(f"  {stage:22s} {a:10.2f}ms {b:10.2f}ms {b - a:+8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
