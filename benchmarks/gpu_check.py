"""Everything a machine with an NVIDIA GPU checks: the GPU tests, then the GPU benchmarks, then a
short table (step, exit status, seconds, where its output is).

    make gpu-check                       # or: python benchmarks/gpu_check.py [--out gpu-out]
    python benchmarks/gpu_check.py --steps pytest-gpu stencil-bench
    HECBENCH=/path/to/HeCBench/src python benchmarks/gpu_check.py --steps fused-hecbench

Each step runs with a time limit; its log and files go to ``--out`` (default ``gpu-out``).
Exit status 0 when every step passed. Needs the package installed with its GPU extras
(CuPy) and the test extras; nothing else.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable


def steps(out: Path) -> dict[str, tuple[int, list[str]]]:
    """name -> (time limit in seconds, command)."""
    return {
        "pytest-gpu": (600, [PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                             "tests"]),
        "bench-replay": (300, [PY, "benchmarks/bench_replay_gpu.py", "--n", "512",
                               "--rounds", "5", "--out", str(out / "replay")]),
        # a fresh folder per check: the demo refuses an --out that holds an earlier run
        "demo": (300, [PY, "-m", "kernforge", "demo", "--backend", "cuda",
                       "--out", str(out / time.strftime("demo-%Y%m%d-%H%M%S"))]),
        "deploy-overhead": (120, [PY, "benchmarks/bench_deploy_overhead.py", "--backend", "cuda",
                                  "--json", str(out / "deploy-overhead-cuda.json")]),
        "redteam": (180, [PY, "-m", "kernforge", "integrity", "redteam", "--backend", "cuda",
                          "--out", str(out / "redteam-cuda.md"),
                          "--json", str(out / "redteam-cuda.json")]),
        "self-compare": (180, [PY, "benchmarks/self_compare.py", "--backend", "cuda",
                               "--json", str(out / "self-compare-cuda.json")]),
        "bench-service": (180, [PY, "benchmarks/bench_service.py", "--backend", "cuda",
                                "--out", str(out / "service-cuda.md")]),
        "stencil-bench": (900, [PY, "-m", "kernforge", "stencil", "bench",
                                "--json", str(out / "stencil-bench.json"),
                                "--md", str(out / "stencil-bench.md"),
                                "--png", str(out / "stencil-bench.png")]),
        # needs HeCBench's heat2d and laplace3d built outside the repository ($HECBENCH)
        "fused-hecbench": (600, [PY, "benchmarks/fused_operators.py", "--hecbench",
                                 os.environ.get("HECBENCH", "HECBENCH-not-set"),
                                 "--record-to", str(out / "fused-rec"),
                                 "--out", str(out / "fused"),
                                 "--md", str(out / "fused" / "summary.md"),
                                 "--json", str(out / "fused" / "summary.json")]),
    }


def run_step(name: str, limit: int, cmd: list[str], out: Path) -> tuple[str, float]:
    log = out / f"{name}.log"
    t0 = time.monotonic()
    with log.open("w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=limit,
                                check=False).returncode
            status = "ok" if rc == 0 else f"exit {rc}"
        except subprocess.TimeoutExpired:
            status = f"timeout {limit}s"
    return status, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-out"))
    ap.add_argument("--steps", nargs="*", default=None, help="only these steps, in this order")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    table = steps(args.out)
    unknown = sorted(set(args.steps or ()) - set(table))
    if unknown:
        print(f"unknown steps {', '.join(unknown)}; choose from {', '.join(table)}",
              file=sys.stderr)
        return 2
    rows = []
    for name in args.steps or list(table):
        limit, cmd = table[name]
        print(f"{name}: {' '.join(cmd)}", flush=True)
        status, seconds = run_step(name, limit, cmd, args.out)
        rows.append((name, status, seconds))
    print(f"\n{'step':<16} {'result':<14} {'seconds':>8}  log")
    for name, status, seconds in rows:
        print(f"{name:<16} {status:<14} {seconds:8.0f}  {args.out / (name + '.log')}")
    return 0 if all(status == "ok" for _, status, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
