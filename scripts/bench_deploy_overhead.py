#!/usr/bin/env python3
"""Host overhead of a deployment per kernel launch, on the CPU backend (no GPU needed).

A tiny C kernel (``scale``: y[i] = a * x[i] over a few elements, no OpenMP region, so the launch
itself costs a few microseconds) is recorded once, and a deployment spec built whose entry
replaces it by the same code at ``-O3``. Then the same ``kernforge.Kernel`` is launched many
times in each of these modes, and the median time per launch printed, with its overhead
against the plain launch:

- ``plain``: no deployment (the fast path: one flag checked);
- ``not in the spec``: a deployment whose spec lists another kernel;
- ``replaced``: the launch matches the entry and runs the tuned variant;
- ``problem mismatch``: the kernel is in the spec, but launched with another integer scalar
  (it runs the original);
- ``replaced, varied``: launches alternating between the matching problem and two others
  (another ``n``, another shape): what an application with several problem sizes sees.

Each mode runs ``--batches`` batches of ``--launches`` launches; the figure is the median over
the batches of the time per launch.

    python scripts/bench_deploy_overhead.py [--launches 2000] [--batches 15]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kernforge import deploy
from kernforge.backends import Kernel
from kernforge.deploy import Deployment, DeploySpec, entry_from_recording
from kernforge.record import load_recording, record

SCALE = r"""
void scale(const double *restrict x, double *restrict y, double a, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = a * x[i];
}
"""
OTHER = SCALE.replace("scale(", "other(")
N = 16


def per_launch(run: Callable[[], None], launches: int) -> float:
    """Seconds per call of ``run`` over ``launches`` calls (after a few untimed ones)."""
    for _ in range(max(10, launches // 20)):
        run()
    t0 = time.perf_counter()
    for _ in range(launches):
        run()
    return (time.perf_counter() - t0) / launches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=2000, help="launches per batch")
    ap.add_argument("--batches", type=int, default=15, help="batches per mode")
    ap.add_argument("--no-cache", action="store_true",
                    help="match every launch from scratch (Deployment(cache=False))")
    args = ap.parse_args()

    k = Kernel(SCALE, "scale", backend="cpu", launch=None)
    x, y = np.arange(float(N)), np.zeros(N)
    x2, y2 = np.arange(float(2 * N)), np.zeros(2 * N)
    with tempfile.TemporaryDirectory(prefix="kernforge-bench-deploy-") as tmp:
        with record(Path(tmp) / "rec") as rec:
            k(x, y, 2.0, N, threads=1)
        r = load_recording(rec.paths[0])
    entry = entry_from_recording(r, r.variant.with_(options={"opt_level": "O3"}),
                                 baseline_s=1.0, tuned_s=1.0, speedup=1.0, speedup_ci=None)
    other = Kernel(OTHER, "other", backend="cpu")
    other(x, y, 2.0, N, threads=1)  # compiled before timing
    scenarios: list[tuple[str, DeploySpec | None, Callable[[], None]]] = []
    matching = (lambda: k(x, y, 2.0, N, threads=1))
    mismatch = (lambda: k(x, y, 2.0, N - 1, threads=1))
    cycle = [matching, mismatch, lambda: k(x2, y2, 2.0, 2 * N, threads=1)]
    state = [0]

    def varied() -> None:
        state[0] = (state[0] + 1) % 3
        cycle[state[0]]()

    scenarios = [("plain", None, matching),
                 ("not in the spec", DeploySpec(()), matching),
                 ("replaced", DeploySpec((entry,)), matching),
                 ("problem mismatch", DeploySpec((entry,)), mismatch),
                 ("replaced, varied (1 in 3)", DeploySpec((entry,)), varied)]
    times: dict[str, list[float]] = {name: [] for name, _, _ in scenarios}
    for _ in range(args.batches):  # the modes interleaved, so drifts of the host cancel
        for name, spec, run in scenarios:
            if spec is None:
                times[name].append(per_launch(run, args.launches))
                continue
            dep = Deployment(spec, cache=False) if args.no_cache else Deployment(spec)
            with dep.start(cupy=False):
                times[name].append(per_launch(run, args.launches))
            counts = deploy.report().kernels.get("scale")
            if name == "replaced" and (counts is None or counts.fallback
                                       or not counts.replaced):
                raise SystemExit(f"the matching launch was not replaced: {counts}")
    plain = times["plain"]
    print(f"host time per launch, cpu backend, kernel scale(n={N}), median of "
          f"{args.batches} batches of {args.launches} launches"
          + (" (decision cache off)" if args.no_cache else ""))
    for name, ts in times.items():
        extra = "" if name == "plain" else "   overhead " + \
            f"{statistics.median(t - p for t, p in zip(ts, plain)) * 1e6:+7.2f} us"
        print(f"  {name:28s} {statistics.median(ts) * 1e6:8.2f} us{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
