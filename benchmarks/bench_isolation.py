#!/usr/bin/env python3
"""What supervised evaluation costs (issue 29): evaluations per minute of a 30-trial tune,
every candidate in a supervised worker process vs in this process, printed side by side.

It records the example application (CPU: examples/heat3d_cpu.py; CUDA: examples/heat3d_cupy.py)
once, then tunes its hottest ``heat_step`` unit with TPE (the backend's ``standard`` preset,
the same seed) in both modes, alternating the order over ``--rounds`` rounds. Each tune runs
in a fresh Python process with a fresh compile cache, so neither mode reuses builds (on disk
or in the backend's in-process cache) of an earlier tune; the time is the tuning loop (the
search space from the backend, every trial compiled, verified and timed) and, isolated, the
start of the worker. The figure is evaluations / wall minutes; the
ratio is isolated over in-process (the goal is >= 0.9).

    python benchmarks/bench_isolation.py                     # cpu, 30 trials, 2 rounds
    python benchmarks/bench_isolation.py --backend cuda      # on the GPU machine
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def one_tune(unit: Path, isolated: bool, trials: int, cache: Path) -> tuple[int, float]:
    """(evaluations, seconds) of one tune in a fresh compile cache."""
    os.environ["KERNFORGE_CACHE_DIR"] = str(cache)
    from kernforge.backends import get_backend
    from kernforge.record import load_recording
    from kernforge.replay.isolate import Isolation
    from kernforge.replay.tuning import build_space, make_evaluator
    from kernforge.tune import Budget, tune

    rec = load_recording(unit)
    be = get_backend(rec.backend)
    space = build_space(rec, be, preset="standard")
    t0 = time.perf_counter()
    iso = Isolation() if isolated else None
    try:
        evaluate = make_evaluator(rec, be, isolate=iso)
        study = tune(space, evaluate, budget=Budget(trials=trials), seed=0)
    finally:
        if iso is not None:
            iso.close()
    return study.evaluations, time.perf_counter() - t0


def fresh_tune(unit: Path, isolated: bool, trials: int, cache: Path) -> tuple[int, float]:
    """:func:`one_tune` in a new Python process (nothing warm from an earlier tune)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from bench_isolation import one_tune; "
            "from pathlib import Path; n, s = one_tune(Path(sys.argv[2]), sys.argv[3] == '1', "
            "int(sys.argv[4]), Path(sys.argv[5])); print(n, s)")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(unit),
                          str(int(isolated)), str(trials), str(cache)], check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout.split()
    return int(out[-2]), float(out[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=sorted(APPS), default="cpu")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernforge-bench-iso-") as tmp:
        unit = record(args.backend, Path(tmp) / "rec")
        rates: dict[str, list[float]] = {"in-process": [], "isolated": []}
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for isolated in order:
                cache = Path(tmp) / f"cache-{r}-{int(isolated)}"
                n, s = fresh_tune(unit, isolated, args.trials, cache)
                name = "isolated" if isolated else "in-process"
                rates[name].append(60.0 * n / s)
                print(f"round {r + 1} {name:10s}: {n} evaluations in {s:6.1f} s = "
                      f"{rates[name][-1]:6.1f} / min", flush=True)
    a, b = statistics.median(rates["in-process"]), statistics.median(rates["isolated"])
    print(f"\n{args.backend}: {args.trials}-trial tune of {unit.name}, median of "
          f"{args.rounds} round(s)")
    print(f"  {'in-process':>12s} {'isolated':>12s} {'ratio':>8s}")
    print(f"  {a:10.1f}/m {b:10.1f}/m {b / a:7.3f}x   (goal >= 0.9x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
