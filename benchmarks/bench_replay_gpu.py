#!/usr/bin/env python3
"""GPU replay benchmarks (issue 3): fidelity, warm-replay overhead, and the effect of each knob.

Records an unchanged CuPy application (default examples/heat3d_cupy.py at 512^3 float32), then
1. fidelity: R interleaved rounds of (the application with CUDA events around every launch,
   every recorded unit replayed with the harness); each unit is compared with the very launch
   it recorded; per kernel, the median over units and rounds of replayed median / in-app time
   (goal: within 5%);
2. overhead: a warm evaluation (restore written buffers, launch, verify on the device) broken
   into stages, the kernel's own time (events) subtracted (goal: under 1 ms), plus compile with
   a cold and a warm cache;
3. knobs: for the hottest kernel, the verified median time under launch bounds, constant
   specialization, maxrregcount and block shapes.
Writes tables to stdout and JSON + Markdown into --out (default $OUT or ./bench-out).

    python benchmarks/bench_replay_gpu.py [--app examples/heat3d_cupy.py] [--n 512] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import kernforge
from kernforge.backends import add_observer, remove_observer
from kernforge.core import Recording, Tolerance
from kernforge.pipeline.run_app import cupy_hooks_if_available, record_application, run_application
from kernforge.record import find_recordings, load_recording
from kernforge.replay import prepare, replay

ROOT = Path(__file__).resolve().parents[1]
SKIP = 1  # launches of each kernel skipped before recording (the first one compiles)
console = Console(width=140)


class EventTimer:
    """A launch observer: CUDA events around every launch inside the application, the stream
    held (as the replay timer does) so that the events time the kernel, not the host."""

    def __init__(self, be: Any) -> None:
        self.be, self.cp = be, be.cp
        self.pending: list[tuple[str, Any, Any]] = []

    def before(self, event: Any) -> Any:
        start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
        self.be.hold_stream()
        start.record()
        return event.name, start, end

    def launched(self, token: Any) -> None:
        token[2].record()  # right behind the kernel on the stream, before any host sync

    def after(self, token: Any, error: BaseException | None) -> None:
        if error is None:
            self.pending.append(token)

    def by_call(self) -> dict[str, list[float]]:
        """Per kernel, the time of each launch in call order."""
        self.cp.cuda.get_current_stream().synchronize()
        times: dict[str, list[float]] = defaultdict(list)
        for name, s, e in self.pending:
            times[name].append(self.cp.cuda.get_elapsed_time(s, e) * 1e-3)
        return times


def fidelity(be: Any, command: list[str], recs: list[Recording], rounds: int, repeat: int,
             skip: int) -> list[dict[str, Any]]:
    """Each recorded unit against the very launch it recorded (call ``skip + instance`` of its
    kernel), in every round; per kernel, the median over units and rounds."""
    ratios: dict[str, list[float]] = defaultdict(list)
    warm: dict[str, list[float]] = defaultdict(list)
    app_t: dict[str, list[float]] = defaultdict(list)
    rep_t: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds):
        timer = EventTimer(be)
        add_observer(timer)
        try:
            with cupy_hooks_if_available():
                run_application(command)
        finally:
            remove_observer(timer)
        in_app = timer.by_call()
        for rec in recs:
            m = replay(rec, repeat=repeat)
            if not m.ok:
                raise SystemExit(f"{rec.name}: {m.status.value}: {m.message}")
            t_app = in_app[rec.source.entry][skip + rec.instance]
            ratios[rec.source.entry].append(m.median / t_app)
            warm[rec.source.entry].append(replay(rec, repeat=repeat, flush=False).median / t_app)
            app_t[rec.source.entry].append(t_app)
            rep_t[rec.source.entry].append(m.median)
    return [{"kernel": k, "in_app_ms": statistics.median(app_t[k]) * 1e3,
             "replay_ms": statistics.median(rep_t[k]) * 1e3,
             "ratio": statistics.median(v), "ratio_warm": statistics.median(warm[k]),
             "samples": len(v)} for k, v in sorted(ratios.items())]


def fast_math(recs: list[Recording]) -> list[dict[str, Any]]:
    """--use_fast_math on every unit: refused under bitwise verification, accepted under a
    declared tolerance with the measured error reported."""
    rows = []
    for rec in recs:
        bitwise = replay(rec, options={"use_fast_math": True}, repeat=3)
        tol = replay(rec, options={"use_fast_math": True}, tolerance=Tolerance("norm", tol=1e-5),
                     repeat=3)
        worst = max(tol.checks, key=lambda c: c.norm_ratio) if tol.checks else None
        rows.append({"unit": rec.name, "bitwise": bitwise.status.value,
                     "tolerance": tol.status.value,
                     "error": worst.describe() if worst else tol.message[:120]})
    return rows


def overhead(cp: Any, rec: Recording, evals: int) -> dict[str, Any]:
    be = kernforge.get_backend("cuda")
    out: dict[str, Any] = {"unit": rec.name, "bytes": rec.nbytes}
    # A true miss: source never seen by kernforge's or CuPy's caches (a unique comment), a
    # fresh backend instance, and an empty CuPy disk cache.
    with tempfile.TemporaryDirectory() as cache:
        os.environ["CUPY_CACHE_DIR"] = cache
        fresh = type(be)()
        unique = rec.variant.with_(source=rec.source.with_code(
            rec.source.code + f"\n// kernforge bench {time.time_ns()}\n"))
        t0 = time.perf_counter()
        fresh.compile(unique)
        out["compile_miss_ms"] = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    be.compile(rec.variant)
    be.compile(rec.variant)
    out["compile_hit_ms"] = (time.perf_counter() - t0) / 2 * 1e3
    p = prepare(rec, backend=be)
    p.restore()
    p.run_once()
    assert all(c.passed for c in p.verify()), "the recorded variant must verify"
    stages: dict[str, list[float]] = defaultdict(list)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(evals):
        t0 = time.perf_counter()
        p.restore_written()
        be.synchronize()
        t1 = time.perf_counter()
        start.record()
        be.launch(p.compiled, p.args, p.launch)
        end.record()
        be.synchronize()
        t2 = time.perf_counter()
        checks = p.verify()
        t3 = time.perf_counter()
        assert all(c.passed for c in checks)
        kernel = cp.cuda.get_elapsed_time(start, end) * 1e-3
        stages["restore"].append(t1 - t0)
        stages["launch (host, incl. kernel)"].append(t2 - t1)
        stages["kernel (events)"].append(kernel)
        stages["verify (device fingerprints)"].append(t3 - t2)
        stages["overhead = total - kernel"].append(t3 - t0 - kernel)
    out["stages_ms"] = {k: statistics.median(v) * 1e3 for k, v in stages.items()}
    return out


def knob_rows(rec: Recording, repeat: int) -> list[dict[str, Any]]:
    scalars = {a.name: a.value for a in rec.args if not a.is_array}
    block = rec.launch.block
    variants: list[tuple[str, dict[str, Any]]] = [
        ("recorded", {}),
        ("__launch_bounds__(tpb)", {"options": {"launch_bounds_max": rec.launch.threads_per_block}}),
        ("__launch_bounds__(tpb, 2)", {"options": {"launch_bounds_max":
                                                   rec.launch.threads_per_block,
                                                   "launch_bounds_min_blocks": 2}}),
        ("constants: all scalars", {"constants": scalars}),
        ("constants + block specialization", {"constants": scalars,
                                              "options": {"specialize_block": True}}),
        ("maxrregcount=32", {"options": {"maxrregcount": 32}}),
        ("maxrregcount=64", {"options": {"maxrregcount": 64}}),
    ]
    for b in ((32, 4, 1), (32, 8, 1), (64, 4, 1), (128, 2, 1), (256, 1, 1), (128, 4, 1)):
        if b != tuple(block) and b[2] <= max(block[2], 1):
            variants.append((f"block {b}", {"launch": rec.launch.reblocked(b)}))
    rows = []
    base = None
    for label, spec in variants:
        m = replay(rec, repeat=repeat, **spec)
        row = {"variant": label, "status": m.status.value,
               "median_us": m.median * 1e6 if m.ok else None}
        if m.ok:
            base = base or m.median
            row["vs_recorded"] = base / m.median
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--app", default=str(ROOT / "examples" / "heat3d_cupy.py"))
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--evals", type=int, default=30)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--only", choices=("fidelity", "overhead"), default=None,
                    help="run one section (the overhead always runs)")
    args = ap.parse_args()
    be = kernforge.get_backend("cuda")
    cp = be.cp
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = ["python", args.app, "--n", str(args.n), "--steps", str(args.steps)]
    with tempfile.TemporaryDirectory() as tmp:
        status, _ = record_application(command, tmp, max_instances=2, skip=SKIP)
        if status:
            raise SystemExit(f"the application exited with status {status}")
        recs = [load_recording(p) for p in find_recordings(tmp)]
        fid = (fidelity(be, command, recs, args.rounds, args.repeat, SKIP)
               if args.only in (None, "fidelity") else [])
        hot = max(recs, key=lambda r: replay(r, repeat=3).median)
        ovh = overhead(cp, hot, args.evals)
        knobs = knob_rows(hot, args.repeat) if args.only is None else []
        fm = fast_math([r for r in recs if r.instance == 0]) if args.only is None else []
    result = {"device": be.identity(), "date": time.strftime("%Y-%m-%d"),
              "command": " ".join(sys.argv), "app": command, "fidelity": fid,
              "overhead": ovh, "knobs": {"unit": hot.name, "rows": knobs}, "fast_math": fm}
    (out / "bench_replay_gpu.json").write_text(json.dumps(result, indent=2, default=str))
    report(result)
    return 0


def report(r: dict[str, Any]) -> None:
    dev = r["device"]["device"]
    t = Table(title=f"1. replay fidelity on {dev}, {r['date']} (goal: within 5%)")
    for c in ("kernel", "in app", "replayed", "ratio - 1", "warm replay: ratio - 1",
              "units x rounds"):
        t.add_column(c, justify="right")
    for f in r["fidelity"]:
        t.add_row(f["kernel"], f"{f['in_app_ms']:.4f} ms", f"{f['replay_ms']:.4f} ms",
                  f"{f['ratio'] - 1:+.2%}", f"{f['ratio_warm'] - 1:+.2%}", str(f["samples"]))
    console.print(t)
    o = r["overhead"]
    t = Table(title=f"2. warm evaluation of {o['unit']} ({o['bytes'] / 2**20:.0f} MiB of "
                    f"arguments), medians (goal: overhead < 1 ms)")
    t.add_column("stage")
    t.add_column("ms", justify="right")
    t.add_row("compile, cache miss", f"{o['compile_miss_ms']:.1f}")
    t.add_row("compile, cache hit", f"{o['compile_hit_ms']:.4f}")
    for k, v in o["stages_ms"].items():
        t.add_row(k, f"{v:.4f}")
    console.print(t)
    t = Table(title=f"3. knobs on {r['knobs']['unit']} (verified bitwise; median of replays)")
    for c in ("variant", "status", "median", "speedup vs recorded"):
        t.add_column(c, justify="right")
    for row in r["knobs"]["rows"]:
        med = f"{row['median_us']:.1f} us" if row["median_us"] else "-"
        sp = f"{row['vs_recorded']:.3f}x" if row.get("vs_recorded") else "-"
        t.add_row(row["variant"], row["status"], med, sp)
    console.print(t)
    t = Table(title="4. --use_fast_math: bitwise vs a declared tolerance (norm:1e-5)")
    for c in ("unit", "bitwise", "tolerance", "measured error (worst buffer)"):
        t.add_column(c)
    for row in r["fast_math"]:
        t.add_row(row["unit"], row["bitwise"], row["tolerance"], row["error"])
    console.print(t)


if __name__ == "__main__":
    sys.exit(main())
