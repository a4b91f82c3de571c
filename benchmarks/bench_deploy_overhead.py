#!/usr/bin/env python3
"""Host overhead of a deployment per kernel launch: on the CPU backend, or on the GPU with CuPy.

A tiny kernel (``scale``: y[i] = a * x[i]; 16 elements through a ``kernforge.Kernel`` on the
CPU, one block of 256 threads through a CuPy ``RawKernel`` on the GPU) is launched many times
in each mode, and the median time per launch printed with its overhead against the plain
launch (kernforge.deploy.overhead, which says what each mode is):

- ``plain``: no deployment (``--backend cuda``: CuPy's own RawKernel, no hooks);
- ``hooks, no deployment`` (cuda only): the kernel made while the CuPy hooks are installed;
- ``not in the spec``: a deployment whose spec lists another kernel;
- ``replaced``: the launch matches the entry and runs the tuned variant;
- ``problem mismatch``: the kernel is in the spec, launched with another integer scalar;
- ``replaced, varied (1 in 3)``: the matching problem alternating with two others.

Each mode runs ``--batches`` batches of ``--launches`` launches, the modes interleaved; the
figure is the median over the batches of the time per launch, the overhead the median of the
per-batch differences to ``plain``. Without CuPy or a GPU, ``--backend cuda`` stops with a
message (exit status 2).

    python benchmarks/bench_deploy_overhead.py [--backend cpu|cuda] [--launches 2000]
        [--batches 15] [--no-cache] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernforge.core import KernforgeError
from kernforge.deploy.overhead import BACKENDS, measure_overhead


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=BACKENDS, default="cpu",
                    help="cpu (the host C compiler) or cuda (CuPy on the GPU)")
    ap.add_argument("--launches", type=int, default=2000, help="launches per batch")
    ap.add_argument("--batches", type=int, default=15, help="batches per mode")
    ap.add_argument("--no-cache", action="store_true",
                    help="match every launch from scratch (Deployment(cache=False))")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    try:
        table = measure_overhead(args.backend, launches=args.launches, batches=args.batches,
                                 cache=not args.no_cache)
    except KernforgeError as exc:
        print(f"bench_deploy_overhead: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return 2
    print("\n".join(table.lines()))
    if args.json is not None:
        args.json.write_text(json.dumps(table.to_json(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
