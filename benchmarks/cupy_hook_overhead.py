"""Host time per launch of a hooked CuPy kernel, without a GPU: kernforge's own Python cost.

The CuPy stand-in (kernforge.testing.fakecupy) plays ``cupy`` and the ``cuda`` backend; its
``noop`` kernel does nothing, in the original and in the tuned variant, so what a mode costs
beyond ``plain`` is the work kernforge runs in Python on that launch: the CuPy hooks, the
deployment's route, the conversion, the fast launch and the count. That work is the same on a
GPU (there CuPy's launch itself adds a few microseconds to every mode).

Modes, interleaved batch by batch (host drifts cancel); each figure is the median over the
batches, each overhead the median of the per-batch differences to ``plain``:

- ``plain``: the stand-in's own RawKernel, no hooks;
- ``hooks, no deployment``: the kernel made while the hooks are installed;
- ``replaced``: a deployment whose entry matches the launch (the tuned variant runs);
- ``problem mismatch``: the kernel is in the spec, launched with another ``n`` (the original
  runs).

    python benchmarks/cupy_hook_overhead.py [--launches 2000] [--batches 15] [--profile] [--json]

``--profile`` adds the top functions of the replaced path by own time (cProfile, which slows
every call it sees: compare the rows with each other, not with the table).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kernforge.backends import cupy_hooks, events
from kernforge.deploy import Deployment, DeploySpec
from kernforge.deploy.overhead import entry_like
from kernforge.testing.fakecupy import NOOP, standing_in

PLAIN, HOOKS, REPLACED, MISMATCH = "plain", "hooks, no deployment", "replaced", \
    "problem mismatch"


def _per_launch(run: Callable[[], None], launches: int) -> float:
    for _ in range(max(10, launches // 20)):
        run()
    t0 = time.perf_counter()
    for _ in range(launches):
        run()
    return (time.perf_counter() - t0) / launches


def _setup(cp: Any) -> tuple[dict[str, Callable[[], None]], dict[str, Deployment | None]]:
    n = 256
    plain = cupy_hooks.original_class(cp, "RawKernel")(NOOP, "noop")
    k = cp.RawKernel(NOOP, "noop")
    x = np.arange(n, dtype=np.float32)
    y = np.zeros_like(x)
    a = np.float32(2.0)
    matching = (lambda: k((1,), (n,), (x, y, a, n)))
    spec = DeploySpec((entry_like(matching, {"maxrregcount": 32}),))
    runs = {PLAIN: (lambda: plain((1,), (n,), (x, y, a, n))), HOOKS: matching,
            REPLACED: matching, MISMATCH: (lambda: k((1,), (n,), (x, y, a, n - 1)))}
    deps: dict[str, Deployment | None] = {
        PLAIN: None, HOOKS: None, REPLACED: Deployment(spec, verify="off"),
        MISMATCH: Deployment(spec, verify="off")}
    return runs, deps


def _check(deps: dict[str, Deployment | None]) -> None:
    for mode, dep in deps.items():
        if dep is None:
            continue
        c = dep.report().kernels["noop"]
        if (mode == REPLACED and (c.fallback or not c.replaced)) or \
                (mode == MISMATCH and (c.replaced or not c.fallback)):
            raise SystemExit(f"{mode}: {c.replaced} replaced, {c.fallback} fallback(s) "
                             f"({c.reasons}): the benchmark does not measure what it says")


def _profile(run: Callable[[], None], dep: Deployment, launches: int, top: int) -> list[str]:
    events.set_substituter(dep)
    try:
        for _ in range(100):
            run()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(launches):
            run()
        prof.disable()
    finally:
        events.set_substituter(None)
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    head = f"replaced path under cProfile ({launches} launches): own time, calls per launch"
    out = [head]
    for (path, line, name), (_, ncalls, tottime, _, _) in rows[:top]:
        where = f"{path.rsplit('/src/', 1)[-1]}:{line}" if path != "~" else "(builtin)"
        out.append(f"  {tottime / launches * 1e6:7.3f} us  {ncalls / launches:5.1f}  "
                   f"{name}  {where}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--profile", action="store_true",
                    help="print the replaced path's top functions by own time (cProfile)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", action="store_true", help="print the medians as one JSON line")
    args = ap.parse_args()
    with standing_in() as cp:
        runs, deps = _setup(cp)
        times: dict[str, list[float]] = {mode: [] for mode in runs}
        for _ in range(args.batches):
            for mode, run in runs.items():
                events.set_substituter(deps[mode])
                try:
                    times[mode].append(_per_launch(run, args.launches))
                finally:
                    events.set_substituter(None)
        _check(deps)
        dep = deps[REPLACED]
        assert dep is not None
        profile = _profile(runs[REPLACED], dep, args.launches, args.top) if args.profile \
            else []
    medians = {mode: statistics.median(ts) for mode, ts in times.items()}
    overheads = {mode: statistics.median(t - p for t, p in zip(ts, times[PLAIN]))
                 for mode, ts in times.items() if mode != PLAIN}
    if args.json:
        print(json.dumps({"launches": args.launches, "batches": args.batches,
                          "median_s": medians, "overhead_s": overheads}))
        return 0
    print(f"host time per launch of a hooked CuPy kernel on the stand-in (noop kernel), "
          f"median of {args.batches} batches of {args.launches} launches")
    for mode, t in medians.items():
        extra = f"   overhead {overheads[mode] * 1e6:+7.2f} us" if mode in overheads else ""
        print(f"  {mode:22s} {t * 1e6:7.2f} us{extra}")
    for line in profile:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
