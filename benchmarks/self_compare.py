#!/usr/bin/env python3
"""The same kernel against itself, and a truly faster one, under a load that varies: verdicts.

``--mode self`` (default): ``--runs`` self-comparisons (the recorded variant as baseline and
candidate) of the example's units (``examples/heat3d_cpu.py`` on cpu, ``heat3d_cupy.py`` on
cuda, recorded at ``--n``; or every unit under ``--units``), taken in turn. Before each run a
load generator starts ``level`` processes, the level cycling from none to every core; each
process alternates busy spells and pauses of random length (non-stationary load). Each run is
the canonical measurement of ``kernforge integrity validate``: idle check, the device watched
during an interleaved comparison of 7 passes (up to 21 while inconclusive), the harness
verdict (:mod:`kernforge.harness.verdict`). Claim: 0 verdicts "faster" or "slower".

``--mode faster``: a 1-D Jacobi sweep against a copy that does 1.2x its work (the first fifth of
the sweep twice): found faster in >= 95% of the quiet runs (load level 0, idle) and never
called slower.

Writes a figure file with provenance and every verdict (``--json``) and a Markdown summary
(``--out``). Exits 1 when the claim fails.

    python benchmarks/self_compare.py [--backend cpu|cuda] [--mode self|faster] [--runs N]
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

import numpy as np

import kernforge
from kernforge.backends import get_backend
from kernforge.core import LaunchConfig, Recording, Variant
from kernforge.harness.busy import combine, watch
from kernforge.harness.provenance import idle_check, provenance, write_figure
from kernforge.harness.verdict import Judgement, judge_ab
from kernforge.record import find_recordings, load_recording
from kernforge.record.native_format import is_native_unit
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


C_SLOW = C_SOURCE.replace(
    "(u[i - 1] + u[i] + u[i + 1]) / 3.0;\n",
    "(u[i - 1] + u[i] + u[i + 1]) / 3.0;\n    #pragma omp parallel for schedule(static)\n"
    "    for (long i = 1; i < n / 5; i++) v[i] = (u[i - 1] + u[i] + u[i + 1]) / 3.0;\n")
CUDA_SLOW = CUDA_SOURCE.replace(
    "long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n",
    "long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= n) { i -= n; if (i >= n / 5) return; }  /* the first fifth twice */\n")
SPINNER = r"""
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    end = time.monotonic() + rng.uniform(0.05, 0.6)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.0, 0.4))
"""


class Load:
    """``level`` processes, each alternating busy spells and pauses of random length."""

    def __init__(self, level: int, seed: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", SPINNER, str(seed * 97 + i)])
                      for i in range(level)]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def example_units(root: Path, backend: str, n: int) -> list[Recording]:
    """The example application's units, recorded at ``n`` (two steps, one diagnostic)."""
    app = "heat3d_cupy.py" if backend == "cuda" else "heat3d_cpu.py"
    example = Path(__file__).resolve().parent.parent / "examples" / app
    subprocess.run([sys.executable, "-m", "kernforge", "record", "-o", str(root), "--",
                    sys.executable, str(example), "--n", str(n), "--steps", "2",
                    "--diag-every", "2"], check=True, capture_output=True)
    # the example's own kernels (CuPy's CUB reductions are recorded too, as native units)
    return [load_recording(p) for p in find_recordings(root) if not is_native_unit(p)]


def slow_variant(rec: Recording, backend: str, n: int) -> Variant:
    """The recorded Jacobi sweep doing 1.2x its work (the first fifth twice)."""
    if backend == "cuda":
        grid = (-(-(n + n // 5) // 256),)
        return rec.variant.with_(source=rec.source.with_code(CUDA_SLOW),
                                 launch=LaunchConfig(grid=grid, block=(256,)))
    return rec.variant.with_(source=rec.source.with_code(C_SLOW))


def one_run(rec: Recording, be: Any, baseline: Variant, level: int, seed: int) -> Judgement:
    """The canonical measurement of validate under ``level`` load processes."""
    load = Load(level, seed)
    try:
        time.sleep(0.3 if level else 0.0)
        before = idle_check(be)
        seen = watch(be)
        ab = compare(rec, baseline, rec.variant, backend=be, passes=7, per_pass=3,
                     max_passes=21)
        idle = combine(before, seen.result()) or before
    finally:
        load.stop()
    return judge_ab(ab, idle=idle.idle, utilisation=idle.utilisation)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--mode", choices=("self", "faster"), default="self")
    ap.add_argument("--units", type=Path, help="recorded units (default: the example's)")
    ap.add_argument("--n", type=int, default=None,
                    help="grid points per axis of the example (default 64 on cpu, 256 on "
                         "cuda); elements of the Jacobi sweep in --mode faster (default "
                         "2^22 on cpu, 2^25 on cuda)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--max-load", type=int, default=os.cpu_count() or 1,
                    help="the highest load level (processes), default every core")
    ap.add_argument("--json", type=Path, help="write the figure file here")
    ap.add_argument("--out", type=Path, help="write a Markdown summary here")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kernforge-self-") as tmp:
        if args.mode == "faster":
            n = args.n or (1 << 25 if args.backend == "cuda" else 1 << 22)
            recs = [record_kernel(Path(tmp), args.backend, n)]
        else:
            n = args.n or (256 if args.backend == "cuda" else 64)
            recs = ([load_recording(p) for p in find_recordings(args.units)] if args.units
                    else example_units(Path(tmp), args.backend, n))
        be = get_backend(recs[0].backend)
        t0 = time.monotonic()
        for i in range(args.runs):
            rec = recs[i % len(recs)]
            level = i % (args.max_load + 1)
            base = slow_variant(rec, args.backend, n) if args.mode == "faster" else rec.variant
            j = one_run(rec, be, base, level, i)
            rows.append({"run": i, "unit": rec.name, "load": level, **j.to_json()})
            print(f"{i + 1}/{args.runs} {rec.name} load {level}: {j.reason}", flush=True)
        seconds = time.monotonic() - t0
    lines, ok = summarize_runs(rows, args.mode)
    print("\n".join(lines))
    prov = provenance(be, command=["python", *sys.argv])
    if args.json:
        write_figure(args.json, {"kind": f"self-compare-{args.mode}", "ok": ok,
                                 "runs": len(rows), "seconds": seconds}, {"runs": rows}, prov)
    if args.out:
        args.out.write_text("\n".join([
            f"# Verdicts under load on the {args.backend} backend ({args.mode})", "",
            (f"- Device: {prov['device']}; date: {prov['date']}; kernforge "
             f"{prov['kernforge_version']} (git {(prov['git']['revision'] or '?')[:12]})"),
            f"- Command: `{' '.join(prov['command'])}` ({seconds:.0f} s)", "",
            "```", *lines, "```", ""]))
    return 0 if ok else 1


def summarize_runs(rows: list[dict[str, Any]], mode: str) -> tuple[list[str], bool]:
    """Counts per load level and verdict, and whether the claim holds."""
    levels = sorted({r["load"] for r in rows})
    head = (f"{'load':>4}  {'runs':>4}  {'faster':>6}  {'not faster':>10}  {'slower':>6}  "
            f"{'inconclusive':>12}")
    lines = [head]
    for lv in levels:
        rs = [r for r in rows if r["load"] == lv]
        count = {v: sum(r["verdict"] == v for r in rs) for v in
                 ("faster", "not faster", "inconclusive")}
        slow = sum(bool(r["slower"]) for r in rs)
        lines.append(f"{lv:>4}  {len(rs):>4}  {count['faster']:>6}  {count['not faster']:>10}"
                     f"  {slow:>6}  {count['inconclusive']:>12}")
    faster = sum(r["verdict"] == "faster" for r in rows)
    slower = sum(bool(r["slower"]) for r in rows)
    if mode == "self":
        ok = faster == 0 and slower == 0
        lines.append(f"significant verdicts: {faster + slower} of {len(rows)} "
                     f"({faster} faster, {slower} slower) -> {'OK' if ok else 'FAILED'}")
        return lines, ok
    quiet = [r for r in rows if r["load"] == 0]
    found = sum(r["verdict"] == "faster" for r in quiet)
    rate = found / len(quiet) if quiet else 0.0
    ok = rate >= 0.95 and slower == 0
    lines.append(f"quiet runs found faster: {found} of {len(quiet)} ({rate:.0%}); called "
                 f"slower: {slower} of {len(rows)} -> {'OK' if ok else 'FAILED'}")
    return lines, ok


if __name__ == "__main__":
    sys.exit(main())
