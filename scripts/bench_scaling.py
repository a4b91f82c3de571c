#!/usr/bin/env python3
"""Multi-GPU scaling of the replay service (issue 9): evaluations per minute with 1..N GPUs.

Records the CuPy examples (several kernels), then, for each worker count W (one worker per GPU,
pinned with CUDA_VISIBLE_DEVICES), submits the same tuning workload to the service: for every
recorded unit, the first K valid points of its "quick" tuning space (compile, verify, time
each), all units interleaved. Prints evaluations per minute, the scaling efficiency per added
GPU (rate(W) / (W * rate(1))) and each worker's GPU.

    python scripts/bench_scaling.py [--gpus 1 2] [--points 24] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def workload(recs: list[Any], points: int) -> list[tuple[str, dict[str, Any]]]:
    import kernforge
    from kernforge.replay.tuning import build_space

    per_unit = []
    for rec in recs:
        space = build_space(rec, kernforge.get_backend(rec.backend), preset="quick")
        configs = []
        for c in space.valid_points():
            configs.append(c)
            if len(configs) == points:
                break
        per_unit.append([(str(rec.path), c) for c in configs])
    jobs = []  # interleave units so every worker sees every kernel
    for i in range(max(len(u) for u in per_unit)):
        jobs.extend(u[i] for u in per_unit if i < len(u))
    return jobs


def run_with(workers: int, recs: list[Any], jobs: list[tuple[str, dict[str, Any]]],
             repeat: int) -> dict[str, Any]:
    from kernforge.service import Client, ServiceConfig

    with Client(config=ServiceConfig(backend="cuda", workers=workers)) as client:
        client.wait_for_workers(workers)
        client.load([str(r.path) for r in recs])
        t0 = time.perf_counter()
        pending = [client.submit(path, config=cfg, warmup=1, repeat=repeat)
                   for path, cfg in jobs]
        results = [p.result() for p in pending]
        seconds = time.perf_counter() - t0
        info = client.workers()
    by_status: dict[str, int] = {}
    for m in results:
        by_status[m.status.value] = by_status.get(m.status.value, 0) + 1
    return {"workers": workers, "evaluations": len(results), "seconds": seconds,
            "per_minute": len(results) / seconds * 60, "by_status": by_status,
            "worker_info": [{k: w.get(k) for k in ("name", "resources", "cuda_visible_devices",
                                                    "pid", "evaluations")}
                            for w in info]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--points", type=int, default=24, help="tuning points per unit")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    args = ap.parse_args()
    from kernforge.pipeline.run_app import record_application
    from kernforge.record import find_recordings, load_recording

    apps = [["python", str(ROOT / "examples" / "heat3d_cupy.py"), "--n", "256", "--steps", "4"],
            ["python", str(ROOT / "examples" / "jacobi2d_cupy.py"), "--n", "4096", "--steps", "4"]]
    tmp = tempfile.mkdtemp(prefix="kf-scaling-")
    for i, cmd in enumerate(apps):
        status, _ = record_application(cmd, Path(tmp) / f"app{i}", max_instances=1, skip=1)
        if status:
            raise SystemExit(f"{cmd} exited with {status}")
    recs = [load_recording(p) for p in find_recordings(tmp)]
    jobs = workload(recs, args.points)
    # A first pass fills CuPy's on-disk kernel cache, so that no measured pass pays NVRTC
    # compiles the others don't (every fresh worker still loads each module once).
    warm = run_with(1, recs, jobs, args.repeat)
    print(f"warm-up pass (not counted): {warm['seconds']:.1f} s")
    rows = [run_with(w, recs, jobs, args.repeat) for w in args.gpus]
    base = rows[0]["per_minute"] / rows[0]["workers"]
    print(f"workload: {len(jobs)} tuning evaluations over {len(recs)} recorded kernels "
          f"({', '.join(r.name for r in recs)}), repeat {args.repeat}")
    print(f"{'GPUs':>4} {'evaluations':>11} {'seconds':>8} {'eval/min':>9} {'efficiency':>10}  "
          f"statuses")
    for r in rows:
        r["efficiency"] = r["per_minute"] / (r["workers"] * base)
        print(f"{r['workers']:>4} {r['evaluations']:>11} {r['seconds']:>8.1f} "
              f"{r['per_minute']:>9.0f} {r['efficiency']:>10.1%}  {r['by_status']}")
    for r in rows:
        for w in r["worker_info"]:
            print(f"  {r['workers']} GPU(s): worker {w}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scaling.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"),
                                                  "command": " ".join(sys.argv),
                                                  "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
