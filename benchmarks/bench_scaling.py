#!/usr/bin/env python3
"""Scaling of the replay service (issue 9): evaluations per minute with 1..N workers.

Records example applications (several kernels each): on ``cuda`` ``examples/heat3d_cupy.py``
and ``examples/jacobi2d_cupy.py``, one worker per GPU (pinned with CUDA_VISIBLE_DEVICES); on
``cpu`` ``examples/heat3d_cpu.py``, one worker per core group (the same cores per worker in
every row). For each worker count W it submits the same tuning workload at once to a fresh
local service: for every recorded unit the first ``--points`` valid points of its "quick"
tuning space (compile, verify bitwise, time), units interleaved, the whole list repeated
``--passes`` times (or as often as fills about ``--duration`` seconds with one worker; later
passes hit the workers' compile caches). The requests go to the service in batches
(``Client.submit_many``; ``--batch 1``: one task per evaluation, as before batching; several
values and ``--rounds`` alternate the settings within each round). It reports evaluations per
minute, the efficiency per added worker (rate(W) / (W * rate(first row of the same batch
setting and round))), where each evaluation's time went (the replay engine on the worker, the
rest of its handling on the worker, the synchronous announcement of its batch, and the
dispatch: scheduler, client, serialization and idle workers, i.e. workers x wall / evaluations
less the worker's own time), the CPU time of this process (the client and the local
scheduler, which every worker shares) per evaluation, each worker's pinning, evaluations and
device states (built / reused), and writes a markdown table and the raw JSON.

A first pass with one worker (not counted) fills the on-disk kernel caches (CuPy's, the CPU
backend's), so that no measured row pays compiles the others do not; it is timed twice (first
pass, then a second on the warm worker), and the second time is what ``--duration`` divides.

    python benchmarks/bench_scaling.py --backend cuda --workers 1 2 --points 16 --passes 83 \\
        --batch 1 0 --json $OUT/scaling.json --markdown $OUT/scaling.md
    python benchmarks/bench_scaling.py --backend cpu --cpu-n 16 --workers 1 2 --passes 8 \\
        --batch 0 1 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
Job = tuple[str, dict[str, Any]]
APPS = {
    "cuda": [["python", str(ROOT / "examples" / "heat3d_cupy.py"), "--n", "256", "--steps", "4"],
             ["python", str(ROOT / "examples" / "jacobi2d_cupy.py"), "--n", "4096",
              "--steps", "4"]],
    "cpu": [["python", str(ROOT / "examples" / "heat3d_cpu.py"), "--n", "64", "--steps", "4",
             "--diag-every", "2"]],
}
AUTO = 0  # --batch 0: the client's own batch size


def record_units(backend: str, root: str, cpu_n: int = 64) -> list[Any]:
    """Record one launch of every kernel of the example applications (the second one of
    each: the first may run on a cold cache); ``cpu_n``: the cpu application's grid size."""
    from kernforge.pipeline.run_app import record_application
    from kernforge.record import find_recordings, load_recording

    apps = [[str(cpu_n) if i and c[i - 1] == "--n" and backend == "cpu" else a
             for i, a in enumerate(c)] for c in APPS[backend]]
    for i, cmd in enumerate(apps):
        status, _ = record_application(cmd, Path(root) / f"app{i}", max_instances=1, skip=1)
        if status:
            raise SystemExit(f"{cmd} exited with {status}")
    return [load_recording(p) for p in find_recordings(root)]


def workload(recs: list[Any], points: int) -> list[Job]:
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
    jobs: list[Job] = []  # interleave units so every worker sees every kernel
    for i in range(max(len(u) for u in per_unit)):
        jobs.extend(u[i] for u in per_unit if i < len(u))
    return jobs


def service_config(args: argparse.Namespace, workers: int) -> Any:
    from kernforge.service import ServiceConfig

    cores = args.cores_per_worker if args.backend == "cpu" else None
    return ServiceConfig(backend=args.backend, workers=workers, cores_per_worker=cores,
                         state_cache_mb=args.state_cache_mb)


def run_pass(client: Any, jobs: list[Job], repeat: int, passes: int, batch: int = AUTO
             ) -> tuple[float, list[Any]]:
    """Submit ``passes`` copies of the job list at once; wall seconds and Measurements."""
    t0 = time.perf_counter()
    requests = [client.request(path, config=cfg, warmup=1, repeat=repeat)
                for _ in range(passes) for path, cfg in jobs]
    pending = client.submit_many(requests, batch=batch or None)
    results = [p.result() for p in pending]
    return time.perf_counter() - t0, results


def time_split(results: list[Any], seconds: float, workers: int, cpu_s: float,
               idle_cpu: float) -> dict[str, float]:
    """Milliseconds per evaluation: worker time (workers x wall / evaluations) and its parts
    (the engine, the rest of the item on the worker, the batch's announcement, dispatch), and
    the CPU time of this process -- the client and the local scheduler, shared by every
    worker -- per evaluation, less what it spends idle (``idle_cpu`` CPU s per s:
    heartbeats, monitors)."""
    n = max(1, len(results))
    extras = [dict(m.extra) for m in results]

    def mean(name: str) -> float:
        return sum(float(e.get(name) or 0.0) for e in extras) / n * 1e3

    total = seconds * workers / n * 1e3
    engine, item, announce = mean("evaluate_s"), mean("worker_s"), mean("announce_s")
    return {"total_ms": total, "engine_ms": engine, "worker_other_ms": item - engine,
            "announce_ms": announce, "dispatch_ms": total - item - announce,
            "outside_engine_ms": total - engine,
            "service_cpu_ms": (cpu_s - idle_cpu * seconds) / n * 1e3}


def worker_report(info: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for w in info:
        states = w.get("device_states") or {}
        out.append({"name": w.get("name"), "pid": w.get("pid"), "resources": w.get("resources"),
                    "cuda_visible_devices": w.get("cuda_visible_devices"),
                    "cores": w.get("cores"), "omp_num_threads": w.get("omp_num_threads"),
                    "evaluations": w.get("evaluations"),
                    "states_prepared": states.get("prepares"),
                    "states_reused": states.get("reuses"),
                    "state_bytes": states.get("bytes")})
    return out


def run_with(args: argparse.Namespace, workers: int, recs: list[Any], jobs: list[Job],
             passes: int, batch: int, round_: int) -> dict[str, Any]:
    from kernforge.service import Client
    from kernforge.service.batch import batch_size

    with Client(config=service_config(args, workers)) as client:
        client.wait_for_workers(workers)
        client.load([str(r.path) for r in recs])
        cpu0, t0 = time.process_time(), time.perf_counter()
        time.sleep(2.0)  # the CPU this process spends with nothing to do
        idle_cpu = (time.process_time() - cpu0) / (time.perf_counter() - t0)
        cpu0 = time.process_time()
        seconds, results = run_pass(client, jobs, args.repeat, passes, batch)
        cpu_s = time.process_time() - cpu0
        info = client.workers()
        metrics = client.metrics()
    by_status: dict[str, int] = {}
    for m in results:
        by_status[m.status.value] = by_status.get(m.status.value, 0) + 1
    return {"round": round_, "batch": batch or batch_size(len(results), workers),
            "batch_setting": "auto" if batch == AUTO else batch,
            "workers": workers, "passes": passes, "evaluations": len(results),
            "seconds": seconds, "per_minute": len(results) / seconds * 60,
            "by_status": by_status, "stage_mean_s": dict(metrics.stage_mean_s),
            "idle_cpu": idle_cpu, "split_ms": time_split(results, seconds, workers, cpu_s,
                                                         idle_cpu),
            "worker_info": worker_report(info)}


def warm_up(args: argparse.Namespace, recs: list[Any], jobs: list[Job]) -> dict[str, Any]:
    """One worker, two passes one after the other: caches filled, steady pass time."""
    from kernforge.service import Client

    with Client(config=service_config(args, 1)) as client:
        client.wait_for_workers(1)
        client.load([str(r.path) for r in recs])
        first, _ = run_pass(client, jobs, args.repeat, 1)
        steady, _ = run_pass(client, jobs, args.repeat, 1)
    return {"first_s": first, "steady_s": steady}


def device(backend: str) -> str:
    if backend == "cuda" and shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.split("\n")
        names = [n.strip() for n in out if n.strip()]
        return f"{len(names)} x {names[0]}" if names else "cuda (no name)"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def markdown(report: dict[str, Any]) -> str:
    unit = "GPUs" if report["backend"] == "cuda" else "workers"
    warm = report["warm"]
    lines = [f"- Command: `{report['command']}`",
             f"- Date: {report['date']}; device: {report['device']}",
             f"- Workload: {report['workload']}",
             (f"- Warm-up (one worker, not counted): first pass {warm['first_s']:.1f} s, second "
             f"pass {warm['steady_s']:.1f} s"),
             ("- Per evaluation (ms of one worker's time = workers x wall / evaluations): the "
             "replay engine on the worker, the rest of the item on the worker, the batch's "
             "announcement, and the dispatch (scheduler, client, idle); and the CPU time of "
             "the client and scheduler process (shared by all workers) per evaluation, less "
             "its idle rate measured for 2 s before the run"),
             "",
             (f"| round | batch | {unit} | passes | evaluations | seconds | evaluations / min "
              f"| efficiency | ms / evaluation | engine | worker other | announce | dispatch "
              f"| client+scheduler CPU | statuses | states built / reused |"),
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in report["rows"]:
        built = sum(w["states_prepared"] or 0 for w in r["worker_info"])
        reused = sum(w["states_reused"] or 0 for w in r["worker_info"])
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(r["by_status"].items()))
        sp = r["split_ms"]
        lines.append(f"| {r['round']} | {r['batch']} | {r['workers']} | {r['passes']} | "
                     f"{r['evaluations']} | {r['seconds']:.1f} | {r['per_minute']:.0f} | "
                     f"{r['efficiency']:.1%} | {sp['total_ms']:.2f} | {sp['engine_ms']:.2f} | "
                     f"{sp['worker_other_ms']:.2f} | {sp['announce_ms']:.2f} | "
                     f"{sp['dispatch_ms']:.2f} | {sp['service_cpu_ms']:.2f} | {statuses} | "
                     f"{built} / {reused} |")
    lines += ["", "Pinning and work per worker:", ""]
    for r in report["rows"]:
        for w in r["worker_info"]:
            where = (f"CUDA_VISIBLE_DEVICES={w['cuda_visible_devices']}"
                     if report["backend"] == "cuda" else f"cores {w['cores']}")
            lines.append(f"- round {r['round']}, batch {r['batch']}, {r['workers']} {unit}: "
                         f"`{w['name']}` {where}, {w['evaluations']} evaluations, states built "
                         f"{w['states_prepared']}, reused {w['states_reused']}")
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--workers", "--gpus", dest="workers", type=int, nargs="+", default=[1, 2],
                    help="worker counts, one row each (cuda: one worker per GPU)")
    ap.add_argument("--cores-per-worker", type=int, default=None,
                    help="cpu: cores of each worker, the same in every row (default: cores "
                         "// the largest worker count)")
    ap.add_argument("--points", type=int, default=16, help="tuning points per unit")
    ap.add_argument("--cpu-n", type=int, default=64,
                    help="cpu: grid size of heat3d_cpu.py (16: little work besides the "
                         "timing protocol's cache flushes, and a pristine check as cheap as "
                         "the GPU's)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per evaluation")
    ap.add_argument("--passes", type=int, default=1, help="times the job list is submitted")
    ap.add_argument("--duration", type=float, default=None,
                    help="instead of --passes: about this many seconds with one worker")
    ap.add_argument("--batch", type=int, nargs="+", default=[AUTO],
                    help="evaluations per task, one set of rows each (0: the client's "
                         "choice; 1: one task per evaluation)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat every (batch, workers) row this many times, interleaved")
    ap.add_argument("--state-cache-mb", type=int, default=None,
                    help="each worker's device-state bound (0: off; default: the service's)")
    ap.add_argument("--json", type=Path, default=None, help="write the raw results here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the table here")
    args = ap.parse_args()
    if args.backend == "cpu" and args.cores_per_worker is None:
        args.cores_per_worker = max(1, len(os.sched_getaffinity(0)) // max(args.workers))
    if args.state_cache_mb is None:
        from kernforge.service.config import DEFAULT_STATE_CACHE_MB
        args.state_cache_mb = DEFAULT_STATE_CACHE_MB
    if any(b < 0 for b in args.batch):
        ap.error("--batch takes 0 (the client's choice) or a positive size")
    return args


def write(args: argparse.Namespace, report: dict[str, Any]) -> str:
    """The markdown of ``report`` (rows so far), written with the JSON where asked."""
    rows = report["rows"]
    for r in rows:  # against the first row of the same round and batch setting
        first = next(f for f in rows if (f["round"], f["batch_setting"])
                     == (r["round"], r["batch_setting"]))
        r["efficiency"] = r["per_minute"] / (r["workers"] * first["per_minute"]
                                             / first["workers"])
    text = markdown(report)
    for path, content in ((args.json, json.dumps(report, indent=1, default=str) + "\n"),
                          (args.markdown, text)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return text


def main() -> int:
    args = parse_args()
    tmp = tempfile.mkdtemp(prefix="kf-scaling-")
    recs = record_units(args.backend, tmp, args.cpu_n)
    jobs = workload(recs, args.points)
    warm = warm_up(args, recs, jobs)
    passes = args.passes if args.duration is None \
        else max(1, math.ceil(args.duration / warm["steady_s"]))
    print(f"warm-up (not counted): first pass {warm['first_s']:.1f} s, second "
          f"{warm['steady_s']:.1f} s; measuring {passes} pass(es)", flush=True)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
        "backend": args.backend, "device": device(args.backend),
        "workload": f"{len(jobs)} tuning evaluations per pass over {len(recs)} recorded "
                    f"kernels ({', '.join(r.name for r in recs)}), warm-up 1, repeat "
                    f"{args.repeat}, state cache {args.state_cache_mb} MiB per worker",
        "state_cache_mb": args.state_cache_mb, "warm": warm, "rows": []}
    for round_ in range(1, args.rounds + 1):  # outputs rewritten after every row
        for batch in args.batch:
            for w in args.workers:
                report["rows"].append(run_with(args, w, recs, jobs, passes, batch, round_))
                text = write(args, report)
                r = report["rows"][-1]
                print(f"round {round_}, batch {r['batch']}, {w} worker(s): "
                      f"{r['per_minute']:.0f} evaluations/min, efficiency "
                      f"{r['efficiency']:.1%}, {r['split_ms']['total_ms']:.2f} ms/evaluation "
                      f"(engine {r['split_ms']['engine_ms']:.2f}, outside it "
                      f"{r['split_ms']['outside_engine_ms']:.2f}; client+scheduler CPU "
                      f"{r['split_ms']['service_cpu_ms']:.2f})", flush=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
