#!/usr/bin/env python3
"""Deployment, end to end on the CPU: the example application plain and with its tuned spec.

Unless a spec is given, records ``heat_step`` of examples/heat3d_cpu.py, tunes it
(``kernforge tune``) and exports a spec (``kernforge export``). Then runs the unchanged
application R times plain and R times with the spec (``KERNFORGE_DEPLOY``), interleaved (the
order alternates every round), and prints both end-to-end times (median wall time of the whole
process), the median of the per-round ratios, and whether the outputs (the checksum line) are
identical. One more run through ``kernforge run --deploy`` shows which kernels were replaced.
Exits 1 when an output differs, 2 when a step fails.

    python benchmarks/deploy_e2e_cpu.py [--n 192] [--steps 60] [--rounds 7] [--trials 12]
    python benchmarks/deploy_e2e_cpu.py --spec runs/tune-x/deploy.json --n 192 --steps 60
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

APP = Path(__file__).resolve().parents[1] / "examples" / "heat3d_cpu.py"


def kernforge(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "kernforge", *args], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"kernforge {args[0]} failed (exit {proc.returncode})")
    return proc


def make_spec(work: Path, app_args: list[str], trials: int) -> Path:
    print(f"recording, tuning and exporting heat_step in {work} ...", flush=True)
    kernforge("record", "-o", str(work / "rec"), "--kernels", "heat_step", "--max-instances",
              "1", "--", "python", str(APP), *app_args)
    tuned = kernforge("tune", str(work / "rec"), "--out", str(work / "run"), "--preset",
                      "quick", "--trials", str(trials))
    print(tuned.stdout.rstrip())
    exported = kernforge("export", str(work / "run"), "-o", str(work / "deploy.json"))
    print(exported.stdout.rstrip())
    return work / "deploy.json"


def run_app(app_args: list[str], spec: Path | None) -> tuple[float, str]:
    """(wall seconds of the whole process, its checksum line)."""
    env = {k: v for k, v in os.environ.items() if k != "KERNFORGE_DEPLOY"}
    if spec is not None:
        env["KERNFORGE_DEPLOY"] = str(spec)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(APP), *app_args], env=env, capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(f"the application failed (exit {proc.returncode})")
    lines = [ln for ln in proc.stdout.splitlines() if "checksum" in ln]
    return seconds, lines[-1] if lines else "(no checksum line)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=192, help="grid points per axis (default 192)")
    ap.add_argument("--steps", type=int, default=60, help="time steps (default 60)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--trials", type=int, default=12, help="tuning trials (default 12)")
    ap.add_argument("--spec", type=Path, default=None, help="use this spec (skip tuning)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep recordings/run here")
    args = ap.parse_args()
    app_args = ["--n", str(args.n), "--steps", str(args.steps), "--diag-every", "0"]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kernforge-deploy-e2e-"))
    spec = args.spec or make_spec(work, app_args, args.trials)
    run_app(app_args, spec)  # warm the compile caches of both versions
    run_app(app_args, None)
    plain: list[float] = []
    tuned: list[float] = []
    outputs: set[tuple[str, str]] = set()
    for r in range(args.rounds):
        order = (None, spec) if r % 2 == 0 else (spec, None)
        for s in order:
            seconds, line = run_app(app_args, s)
            (plain if s is None else tuned).append(seconds)
            outputs.add(("plain" if s is None else "deployed", line))
    ratios = [p / t for p, t in zip(plain, tuned)]
    report = kernforge("run", "--deploy", str(spec), "-q", "--", "python", str(APP), *app_args)
    print(report.stderr.rstrip())
    identical = len({line for _, line in outputs}) == 1
    print(f"application: examples/heat3d_cpu.py {' '.join(app_args)}; {args.rounds} "
          f"interleaved rounds; spec {spec}")
    print(f"end to end, plain:         median {statistics.median(plain):.3f} s  "
          f"({', '.join(f'{t:.3f}' for t in plain)})")
    print(f"end to end, with the spec: median {statistics.median(tuned):.3f} s  "
          f"({', '.join(f'{t:.3f}' for t in tuned)})")
    print(f"speedup (median of per-round ratios): {statistics.median(ratios):.3f}x")
    for who, line in sorted(outputs):
        print(f"output {who:8s} {line}")
    print(f"outputs identical: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
