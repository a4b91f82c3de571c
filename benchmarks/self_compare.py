#!/usr/bin/env python3
"""The same kernel measured against itself with the canonical protocol: the ratio must be 1.

Records a kernel (a 1-D Jacobi sweep; or give ``--unit`` a recorded unit), then repeats the
canonical re-measurement ``--repetitions`` times: the recorded variant against itself,
interleaved (``--passes`` 7 passes of ``--per-pass`` 3 runs of each side, cache flushed before
every timed run, restore before every run). Each repetition yields the median of its per-pass
ratios; the reported figure is the median over repetitions, which must lie within ``--band``
(1%) of 1.00. Writes a figure file with provenance and every raw sample (``--json``) and a
Markdown summary (``--out``). Exits 1 when the figure is outside the band.

    python benchmarks/self_compare.py [--backend cpu|cuda] [--n N] [--json F] [--out F.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import kernforge
from kernforge.backends import get_backend
from kernforge.core import Recording
from kernforge.harness import ABResult
from kernforge.harness.provenance import IdleCheck, idle_check, provenance, write_figure
from kernforge.record import find_recordings, load_recording
from kernforge.replay import compare

C_SOURCE = r"""
void jacobi(const double *u, double *v, long n) {
    v[0] = u[0];
    v[n - 1] = u[n - 1];
    #pragma omp parallel for schedule(static)
    for (long i = 1; i < n - 1; i++) v[i] = (u[i - 1] + u[i] + u[i + 1]) / 3.0;
}
"""
CUDA_SOURCE = r"""
extern "C" __global__ void jacobi(const double *u, double *v, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0 || i == n - 1) { v[i] = u[i]; return; }
    if (i < n) v[i] = (u[i - 1] + u[i] + u[i + 1]) / 3.0;
}
"""


def record_kernel(root: Path, backend: str, n: int) -> Recording:
    xp: Any = np
    launch: dict[str, Any] = {}
    if backend == "cuda":
        import cupy

        xp = cupy
        launch = {"grid": (-(-n // 256),), "block": (256,)}
    code = CUDA_SOURCE if backend == "cuda" else C_SOURCE
    k = kernforge.Kernel(code, "jacobi", backend=backend)
    u = xp.asarray(np.random.default_rng(0).random(n))
    with kernforge.record(root):
        k(u, xp.zeros(n), n, **launch)
    return load_recording(find_recordings(root)[0])


def wait_idle(be: Any, seconds: float) -> IdleCheck:
    """The idle check, repeated every second for up to ``seconds`` until the device is idle."""
    deadline = time.monotonic() + seconds
    idle = idle_check(be)
    while idle.idle is False and time.monotonic() < deadline:
        time.sleep(1.0)
        idle = idle_check(be)
    return idle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--unit", type=Path, help="a recorded unit (default: record a Jacobi sweep)")
    ap.add_argument("--n", type=int, default=None,
                    help="elements (default 2^22 on cpu, 2^25 on cuda)")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--per-pass", type=int, default=3)
    ap.add_argument("--band", type=float, default=0.01)
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                    help="wait up to S seconds for the device to be idle before measuring")
    ap.add_argument("--json", type=Path, help="write the figure file here")
    ap.add_argument("--out", type=Path, help="write a Markdown summary here")
    args = ap.parse_args()
    n = args.n or (1 << 25 if args.backend == "cuda" else 1 << 22)
    with tempfile.TemporaryDirectory(prefix="kernforge-self-") as tmp:
        rec = (load_recording(args.unit) if args.unit
               else record_kernel(Path(tmp), args.backend, n))
        be = get_backend(rec.backend)
        idle = wait_idle(be, args.wait_idle)
        runs: list[ABResult] = [
            compare(rec, rec.variant, rec.variant, backend=be, passes=args.passes,
                    per_pass=args.per_pass, seed=i) for i in range(args.repetitions)]
    speedups = [r.speedup for r in runs]
    figure = statistics.median(speedups)
    ok = abs(figure - 1.0) <= args.band
    prov = provenance(be, command=["python", *sys.argv])
    lines = [f"repetition {i + 1}: ratio {r.speedup:.4f} (95% CI {r.ci_low:.4f}-{r.ci_high:.4f}),"
             f" median A {r.median_a * 1e3:.4f} ms, median B {r.median_b * 1e3:.4f} ms"
             for i, r in enumerate(runs)]
    verdict = (f"self-comparison ratio (median of {len(runs)}): {figure:.4f} -> "
               f"{'within' if ok else 'OUTSIDE'} {args.band:.0%} of 1.00")
    print("\n".join(lines))
    print(verdict)
    print(f"idle check: {idle.idle} ({idle.method}) {idle.note}")
    raw = {"ratios": [list(r.ratios) for r in runs],
           "samples_a": [[list(p) for p in r.samples_a] for r in runs],
           "samples_b": [[list(p) for p in r.samples_b] for r in runs]}
    if args.json:
        write_figure(args.json, {"kind": "self-compare", "ratio": figure, "within_band": ok,
                                 "band": args.band, "repetitions": speedups,
                                 "unit": rec.name, "n": n, "idle": idle.to_json()}, raw, prov)
    if args.out:
        args.out.write_text("\n".join([
            f"# Self-comparison on the {args.backend} backend", "",
            (f"- Device: {prov['device']}; date: {prov['date']}; kernforge "
            f"{prov['kernforge_version']} (git {(prov['git']['revision'] or '?')[:12]})"),
            f"- Command: `{' '.join(prov['command'])}`",
            f"- Idle check before measuring: {idle.idle} ({idle.method}) {idle.note}", "",
            "```", *lines, verdict, "```", ""]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
