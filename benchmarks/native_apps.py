#!/usr/bin/env python3
"""Native programs end to end: record, replay, tune, export, deploy; recording cost.

What it measures, per program of a JSON list (programs are built outside the repository):
- ``kernforge record`` (one launch per kernel) and ``kernforge replay``: units, how many verify,
  the replayed median (L2 flushed and not) beside the kernel's time inside the application;
- ``kernforge tune`` + ``kernforge export``: which kernels got a significant, verified win;
- the deployed program against the plain one, interleaved rounds, wall time and the program's
  own check (a regular expression on its output), deploying with ``run --deploy --print-env``
  so the CLI's start-up is not timed;
- with ``--overhead``: the interposer recording nothing against the plain program.

Run (a GPU machine, kernforge importable)::

    python benchmarks/native_apps.py programs.json --out native-run [--rounds 5] [--overhead]

``programs.json``: ``[{"name": "heat2d", "cwd": "/path/heat2d-cuda", "command": ["./main",
"4096", "4096", "200"], "check": "PASS", "kernels": "*", "tolerance": null}, ...]``.
Prints one table per step and writes ``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

KF = [sys.executable, "-m", "kernforge"]


def sh(cmd: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def step(label: str, cmd: list[str], cwd: str | Path | None = None
         ) -> subprocess.CompletedProcess[str]:
    """One kernforge command, its duration and outcome printed (the tail of its stderr when
    it failed), so that a long program shows where it is."""
    t = time.perf_counter()
    done = sh(cmd, cwd)
    print(f"  {label}: exit {done.returncode} after {time.perf_counter() - t:.1f} s", flush=True)
    if done.returncode != 0:
        for line in done.stderr.strip().splitlines()[-4:]:
            print(f"    {line[:200]}", flush=True)
    return done


def wall(p: dict[str, Any], env: dict[str, str]) -> tuple[float, bool]:
    t = time.perf_counter()
    done = sh(p["command"], p["cwd"], env)
    ok = done.returncode == 0 and re.search(p.get("check") or "", done.stdout) is not None
    return time.perf_counter() - t, ok


def interleaved(p: dict[str, Any], a: dict[str, str], b: dict[str, str], rounds: int
                ) -> dict[str, Any]:
    wall(p, a)
    ta, tb, oks = [], [], []
    for r in range(rounds):
        for side in ("ab" if r % 2 == 0 else "ba"):
            dt, ok = wall(p, a if side == "a" else b)
            (ta if side == "a" else tb).append(dt)
            oks.append(ok)
    ratios = [x / y for x, y in zip(ta, tb)]
    return {"plain_s": statistics.median(ta), "other_s": statistics.median(tb),
            "speedup": statistics.median(ratios), "ratios": ratios, "checks_passed": sum(oks),
            "runs": len(oks)}


def deploy_env(spec: Path, log: Path) -> dict[str, str]:
    out = sh([*KF, "run", "--deploy", str(spec), "--print-env"]).stdout
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    for line in out.splitlines():
        m = re.match(r"export (\w+)=(\S+)", line)
        if m:
            env[m.group(1)] = m.group(2).split("${")[0].strip("'")
    env["KERNFORGE_DEPLOY_LOG"] = str(log)
    return env


def one(p: dict[str, Any], out: Path, rounds: int) -> dict[str, Any]:
    rec, run = out / "rec" / p["name"], out / "tune" / p["name"]
    tol = ["--tolerance", p["tolerance"]] if p.get("tolerance") else []
    step("record", [*KF, "record", "-o", str(rec), "--kernels", p.get("kernels") or "*",
                    "--max-instances", "1", "--", *p["command"]], p["cwd"])
    res: dict[str, Any] = {"name": p["name"]}
    for flush in (True, False):
        js = out / f"{p['name']}-{'flush' if flush else 'warm'}.json"
        step(f"replay ({'flushed' if flush else 'warm'})",
             [*KF, "replay", str(rec), "--json", str(js), *tol, *([] if flush else ["--no-flush"])])
        res["flush" if flush else "warm"] = json.loads(js.read_text()) if js.is_file() else []
    step("tune", [*KF, "tune", str(rec), "--out", str(run), *tol])
    res["tuning"] = [json.loads(r.read_text())["native"] for r in sorted(run.glob("*/result.json"))]
    spec = run / "spec.json"
    if step("export", [*KF, "export", str(run), "-o", str(spec)]).returncode == 0:
        log = out / f"{p['name']}-deploy-log.json"
        plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        t = time.perf_counter()
        res["e2e"] = interleaved(p, plain, deploy_env(spec, log), rounds)
        print(f"  plain vs deployed, {rounds} interleaved rounds: "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        res["e2e"]["interposer"] = json.loads(log.read_text()) if log.is_file() else {}
    return res


def overhead(p: dict[str, Any], out: Path, rounds: int) -> dict[str, Any]:
    from kernforge.record import interposer
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    quiet = interposer.preload_env(interposer.build(), interposer.environment(
        out / "none", kernels="__records_nothing__"), plain)
    return interleaved(p, plain, quiet, rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("programs", type=Path)
    ap.add_argument("--out", type=Path, default=Path("native-run"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--overhead", action="store_true")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    summary = []
    for p in json.loads(a.programs.read_text()):
        print(f"== {p['name']}", flush=True)
        r = one(p, a.out, a.rounds)
        if a.overhead:
            r["overhead"] = overhead(p, a.out, a.rounds)
        for u in r["flush"]:
            app = u.get("app_time_ms")
            print(f"  {u['unit']:40.40} {u['status']:13} replay {u.get('median') or 0:.3e} s"
                  f"  in app {app / 1e3 if app else 0:.3e} s", flush=True)
        for t in r["tuning"]:
            print(f"  tune {t['name'][:30]:30} best {t['best_label']} speedup {t['speedup']} "
                  f"ci {t['ci']} kept {t['win']}", flush=True)
        for key in ("e2e", "overhead"):
            if key in r:
                e = r[key]
                print(f"  {key}: {e['plain_s']:.4f} s -> {e['other_s']:.4f} s, speedup "
                      f"{e['speedup']:.3f}x, own check {e['checks_passed']}/{e['runs']}", flush=True)
        summary.append(r)
        (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
