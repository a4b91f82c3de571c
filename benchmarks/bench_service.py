#!/usr/bin/env python
"""Warm replay service vs cold evaluation, and a stream with faulty candidates.

    python benchmarks/bench_service.py                 # CPU backend (CI-sized)
    python benchmarks/bench_service.py --backend cuda  # on the GPU machine
    python benchmarks/bench_service.py --out docs/benchmarks/service-cpu.md

*Cold*: a fresh ``python -c`` process that imports kernforge, loads the recording, compiles
the recorded variant (an empty compile cache: a real compile; or the disk cache left by the
previous cold run) and evaluates it once. *Warm*: the same evaluation (same protocol) submitted
to a running service, whose workers hold the recording and the compiled module. Evaluations
per minute are counted over wall time. The stream is 100 evaluations of which one crashes
its worker and one hangs: the script reports what each came back as.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kernforge.record import load_recording
from kernforge.service import Client, ServiceConfig
from kernforge.service.samples import fault, good_variants, record_sample

COLD = """
import sys
from kernforge.record import load_recording
from kernforge.replay import evaluate_variant
rec = load_recording(sys.argv[1])
m = evaluate_variant(rec, rec.variant, warmup=int(sys.argv[2]), repeat=int(sys.argv[3]))
assert m.ok, m.message
"""
console = Console(highlight=False, width=120)


def cold_runs(unit: Path, runs: int, warmup: int, repeat: int, fresh: bool) -> list[float]:
    """Wall seconds of ``runs`` fresh processes; ``fresh``: an empty compile cache each."""
    times = []
    with tempfile.TemporaryDirectory(prefix="kf-cold-") as shared:
        for i in range(runs):
            cache = tempfile.mkdtemp(prefix=f"run{i}-", dir=shared) if fresh else shared
            env = dict(os.environ, KERNFORGE_CACHE_DIR=cache, CUPY_CACHE_DIR=cache)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", COLD, str(unit), str(warmup), str(repeat)],
                           check=True, env=env)
            times.append(time.perf_counter() - t0)
    return times


def warm_runs(client: Client, unit: Path, count: int, warmup: int, repeat: int,
              new_variants: bool) -> tuple[float, Counter[str]]:
    """Wall seconds of ``count`` evaluations submitted together (``new_variants``: each one a
    variant no worker has compiled yet)."""
    rec = load_recording(unit)
    if new_variants:
        stamp = time.time_ns()
        variants = [rec.variant.with_(defines={"KF_BENCH_SALT": f"{stamp + i}"})
                    for i in range(count)]
    else:
        variants = [None] * count
    t0 = time.perf_counter()
    results = client.evaluate_many(unit, variants, warmup=warmup, repeat=repeat)
    return time.perf_counter() - t0, Counter(m.status.value for m in results)


def stream(client: Client, unit: Path, warmup: int, repeat: int) -> tuple[float, list[str]]:
    rec = load_recording(unit)
    variants: list = good_variants(rec, 98)
    names = ("illegal_address", "hang") if rec.backend == "cuda" else ("segfault", "hang")
    where = random.Random(0).sample(range(100), 2)
    for index, name in sorted(zip(where, names)):
        variants.insert(index, fault(rec, name))
    t0 = time.perf_counter()
    results = client.evaluate_many(unit, variants, warmup=warmup, repeat=repeat)
    seconds = time.perf_counter() - t0
    ok = sum(m.ok for i, m in enumerate(results) if i not in where)
    lines = [f"100 evaluations in {seconds:.1f} s: {ok}/98 correct candidates OK"]
    for index, name in zip(where, names):
        m = results[index]
        lines.append(f"{name} candidate (#{index}) -> {m.status.value}: "
                     f"{m.message.splitlines()[0]}")
    return seconds, lines


def per_minute(count: int, seconds: float) -> float:
    return 60.0 * count / seconds if seconds > 0 else float("inf")


def run(args: argparse.Namespace) -> tuple[list[tuple[str, str, float, str]], list[str], str]:
    root = Path(tempfile.mkdtemp(prefix="kf-bench-service-"))
    unit = record_sample(root, args.backend, n=args.n)
    device = str(load_recording(unit).identity.get("device", platform.processor()))
    rows: list[tuple[str, str, float, str]] = []
    for fresh, label in ((True, "cold process, compile from scratch"),
                         (False, "cold process, compiled module on disk")):
        t = cold_runs(unit, args.cold_runs, args.warmup, args.repeat, fresh)
        rows.append((label, f"{len(t)} processes", per_minute(len(t), sum(t)),
                     f"{sum(t) / len(t):.3f} s each"))
    cfg = ServiceConfig(backend=args.backend, workers=args.workers)
    t0 = time.perf_counter()
    with Client(config=cfg) as client:
        client.load([unit])
        start_s = time.perf_counter() - t0
        warm_runs(client, unit, 4 * len(client.workers()), args.warmup, args.repeat, False)
        for new, label in ((False, "warm service, compiled module cached"),
                           (True, "warm service, a new variant each (compiles)")):
            count = args.evaluations if not new else max(10, args.evaluations // 10)
            seconds, statuses = warm_runs(client, unit, count, args.warmup, args.repeat, new)
            rows.append((label, f"{count} evaluations", per_minute(count, seconds),
                         ", ".join(f"{k} {v}" for k, v in statuses.items())))
        workers = len(client.workers())
        lines = [f"service start (cluster + {workers} workers + recording loaded): {start_s:.1f} s"]
        if not args.no_stream:
            lines += stream(client, unit, args.warmup, args.repeat)[1]
        metrics = client.metrics()
        lines.append(f"service metrics: {metrics.evaluations} evaluations, worker restarts "
                     f"{metrics.worker_restarts}, by status {dict(metrics.by_status)}, mean "
                     "stage ms " + ", ".join(f"{k} {v * 1e3:.3f}"
                                             for k, v in metrics.stage_mean_s.items()))
    return rows, lines, device


def report(rows: list[tuple[str, str, float, str]], lines: list[str], device: str,
           args: argparse.Namespace) -> str:
    cold = rows[0][2]
    cached_cold = rows[1][2]
    table = Table(title=f"replay service vs cold evaluation ({args.backend}, {device})")
    for col in ("mode", "sample", "evaluations / min", "vs cold (compile)",
                "vs cold (disk cache)", "notes"):
        table.add_column(col)
    md = [("| mode | sample | evaluations / min | vs cold (compile) | vs cold (disk cache) "
           "| notes |"), "|---|---|---:|---:|---:|---|"]
    for label, sample, rate, note in rows:
        cells = (label, sample, f"{rate:,.0f}", f"{rate / cold:.1f}x",
                 f"{rate / cached_cold:.1f}x", note)
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    console.print(table)
    for line in lines:
        console.print(line, markup=False)
    return "\n".join(md + [""] + [f"- {line}" for line in lines])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--workers", type=int, default=None, help="service workers (default: all)")
    p.add_argument("--evaluations", type=int, default=200, help="warm evaluations")
    p.add_argument("--cold-runs", type=int, default=5, help="cold processes per mode")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--n", type=int, default=1 << 14, help="elements of the sample kernel")
    p.add_argument("--no-stream", action="store_true", help="skip the fault stream")
    p.add_argument("--out", type=Path, default=None, help="also write a Markdown section")
    args = p.parse_args()
    rows, lines, device = run(args)
    text = report(rows, lines, device, args)
    if args.out:
        command = "python " + " ".join(["benchmarks/bench_service.py", *sys.argv[1:]])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            f"# Replay service benchmark ({args.backend})\n\n"
            f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}\n- device: {device} "
            f"({os.cpu_count()} cores visible)\n- command: `{command}`\n"
            f"- protocol: warm-up {args.warmup}, {args.repeat} timed runs, cache flushed "
            f"between runs; kernel: 3-point smoother, {args.n} doubles\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
