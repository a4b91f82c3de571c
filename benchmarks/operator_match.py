#!/usr/bin/env python3
"""Operator matching on recorded application kernels (issue 30, M3a), on a GPU machine.

What it measures, per recorded native unit (one launch recorded from an unchanged program by
``kernforge record``): whether ``kernforge.apps.operator_match.match_unit`` recognizes a
stencil the matrix's designs build (grid, offsets, coefficients, boundary rule) or why not;
for a recognized one, which operator's adapter passed both checks (the recorded outputs under
the kernel's tolerance, the original kernel on fresh random inputs) and its interleaved replay
speedup over the original with the 99% CI (L2 flushed, written memory restored before each
run); and every candidate tried, in order, with its screened speedup over the original (median
of ``--repeat`` runs each) or why it was refused (a line per candidate, and a second table). With ``--app UNIT_DIR=COMMAND`` (and ``--cwd``), the program itself runs plain and with
the written spec deployed through the interposer (``kernforge run --deploy --print-env``),
interleaved ``--rounds`` times: wall-clock speedup, how many launches the adapter replaced,
and whether both runs print the same checked line (``--check REGEX``).

Run::

    kernforge record -o /tmp/R/heat --max-instances 1 -- .kfdev/hec/heat-cuda/main 4096 1000
    python benchmarks/operator_match.py /tmp/R/heat:solve /tmp/R/heat2d:dev_lapl_iter \\
        --out /tmp/opm --json /tmp/opm/summary.json --md /tmp/opm/summary.md

A positional argument is ``RECORDING_DIR[:NAME]``: every native unit under the directory whose
directory name starts with NAME (all units without it).

HeCBench programs built outside the repository (``DIR/<name>-cuda/main``), recorded and matched
in one go (one launch per kernel recorded into ``--record-to``; ``--e2e`` also runs each matched
program plain and deployed)::

    python benchmarks/operator_match.py --hecbench .kfdev/hec --record-to /tmp/R \
        --out /tmp/opm --md /tmp/opm/summary.md --json /tmp/opm/summary.json --e2e
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernforge.apps.operator_match import NoMatch, match_unit

KF = [sys.executable, "-m", "kernforge"]


# name: (arguments, the kernel's unit name); stencil and PDE codes, and ones that must be refused
HECBENCH = {
    "heat": (["4096", "1000"], "solve"),
    "heat2d": (["4096", "4096", "1000"], "dev_lapl_iter"),
    "laplace3d": (["256", "256", "256", "100", "1"], "laplace3d"),
    "stencil3d": (["512", "100"], "stencil3d"),
    "jacobi": ([], "jacobi_step"),
    "fdtd3d": (["--dimx=192", "--dimy=184", "--timesteps=90"], "finite_difference"),
}


def record_hecbench(root: Path, to: Path) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """Record one launch per kernel of each program found; (recordings, unit -> (cwd, cmd))."""
    recs, apps = [], {}
    for name, (args, unit) in HECBENCH.items():
        exe = (root / f"{name}-cuda").resolve()  # a binary, or HeCBench's build directory
        if not exe.is_file():
            exe = exe / "main"
        if not exe.is_file():
            print(f"skipped {name}: no {exe}", file=sys.stderr)
            continue
        out = to / name
        done = subprocess.run([*KF, "record", "-o", str(out), "--max-instances", "1", "--",
                               str(exe), *args], cwd=exe.parent, capture_output=True,
                              text=True, check=False)
        print(f"recorded {name}: exit {done.returncode} {done.stderr.strip()[-300:]}",
              flush=True)
        recs.append(f"{out}:{unit}")
        apps[f"{unit}-0"] = (str(exe.parent), shlex.join([str(exe), *args]))
    return recs, apps


def units(arg: str) -> list[Path]:
    root, _, name = arg.partition(":")
    found = sorted(p.parent for p in Path(root).glob("*/manifest.json")
                   if not name or p.parent.name.startswith(name))
    if not found:
        print(f"no units under {root} named {name or '*'}", file=sys.stderr)
    return found


def deploy_env(spec: Path, log: Path) -> dict[str, str]:
    out = subprocess.run([*KF, "run", "--deploy", str(spec), "--print-env"],
                         capture_output=True, text=True, check=True).stdout
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    for line in out.splitlines():
        m = re.match(r"export (\w+)=(\S+)", line)
        if m:
            env[m.group(1)] = m.group(2).split("${")[0].strip("'")
    env["KERNFORGE_DEPLOY_LOG"] = str(log)
    return env


def end_to_end(spec: Path, command: str, cwd: str, rounds: int, check: str,
               out: Path) -> dict[str, Any]:
    """The program plain and deployed, interleaved: wall times, replaced launches, checks."""
    log = out / f"{spec.stem}.deploy-log.json"
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    dep = deploy_env(spec, log)
    argv = shlex.split(command)
    times: dict[str, list[float]] = {"plain": [], "deployed": []}
    lines: dict[str, set[str]] = {"plain": set(), "deployed": set()}
    failed = 0
    for r in range(rounds + 1):
        for side in (("plain", "deployed") if r % 2 == 0 else ("deployed", "plain")):
            t = time.perf_counter()
            done = subprocess.run(argv, cwd=cwd, env=plain if side == "plain" else dep,
                                  capture_output=True, text=True, check=False)
            dt = time.perf_counter() - t
            failed += done.returncode != 0
            if r:  # the first round warms caches and is not counted
                times[side].append(dt)
            lines[side].update(m.group(0) for m in re.finditer(check, done.stdout))
    counts = json.loads(log.read_text()) if log.is_file() else {}
    replaced = sum(e.get("replaced", 0) for e in counts.get("entries", []))
    ratios = [a / b for a, b in zip(times["plain"], times["deployed"], strict=True)]
    return {"plain_s": statistics.median(times["plain"]),
            "deployed_s": statistics.median(times["deployed"]),
            "speedup": statistics.median(ratios), "replaced_last_run": replaced,
            "fallbacks_last_run": counts.get("fallbacks"), "nonzero_exits": failed,
            "checked_lines": {k: sorted(v) for k, v in lines.items()},
            "same_check": lines["plain"] == lines["deployed"] and bool(lines["plain"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recordings", nargs="*", help="RECORDING_DIR[:NAME]")
    ap.add_argument("--hecbench", type=Path, help="DIR holding <name>-cuda/main programs (or <name>-cuda binaries)")
    ap.add_argument("--record-to", type=Path, default=Path("/tmp/R"))
    ap.add_argument("--e2e", action="store_true", help="with --hecbench: run each matched "
                    "program plain and deployed")
    ap.add_argument("--out", type=Path, required=True, help="specs and adapter images")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--app", action="append", default=[], metavar="UNIT_DIR=COMMAND",
                    help="run the program plain and deployed for the spec of that unit")
    ap.add_argument("--cwd", default=".", help="working directory of --app commands")
    ap.add_argument("--check", default=r"PASS|FAIL|[Ee]rror[^\n]*", help="lines compared")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    apps = {k: (args.cwd, v) for k, v in (a.split("=", 1) for a in args.app)}
    recordings = list(args.recordings)
    if args.hecbench:
        recs, hec_apps = record_hecbench(args.hecbench, args.record_to)
        recordings += recs
        if args.e2e:
            apps.update(hec_apps)
    rows: list[dict[str, Any]] = []
    for arg in recordings:
        for unit in units(arg):
            t = time.perf_counter()
            m = match_unit(unit, out_dir=args.out, repeat=args.repeat, passes=args.passes)
            row: dict[str, Any] = {"unit": str(unit), "seconds": time.perf_counter() - t}
            if isinstance(m, NoMatch):
                row.update(ok=False, reason=m.reason, recognized=m.recognized,
                           tried=list(m.tried))
            else:
                row.update(ok=True, cell=m.cell, speedup=m.speedup, ci=list(m.ci),
                           spec=str(m.spec_path), note=m.note, tried=list(m.tried))
                app = apps.get(str(unit)) or apps.get(unit.name)
                if app:
                    row["end_to_end"] = end_to_end(m.spec_path, app[1], app[0], args.rounds,
                                                   args.check, args.out)
            rows.append(row)
            print(json.dumps(row, indent=1, default=str), flush=True)
            for c in row["tried"]:  # every candidate's screened speedup over the original
                print(f"  candidate {c['operator']}: " + (
                    f"{c['screen_speedup']:.3f}x (median {c['median_s'] * 1e6:.1f} us)"
                    if c.get("screen_speedup") else f"refused: {c.get('refused')}"), flush=True)
    md = ["| unit | recognized stencil | cell | match | replay speedup [99% CI] |",
          "|---|---|---|---|---|"]
    for r in rows:
        rec = r.get("note", "").split(";")[0] if r["ok"] else (r.get("recognized") or "-")
        sp = f"{r['speedup']:.3f}x [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r["ok"] else "-"
        e2e = r.get("end_to_end")
        if e2e:
            sp += (f"; program {e2e['speedup']:.3f}x, {e2e['replaced_last_run']} launches "
                   f"replaced, same check: {e2e['same_check']}")
        md.append(f"| {Path(r['unit']).parent.name}/{Path(r['unit']).name} | {rec} | "
                  f"{r.get('cell', '-')} | {'yes' if r['ok'] else 'no: ' + r['reason']} | "
                  f"{sp} |")
    cand = [f"| {Path(r['unit']).name} | {c['operator']} | " + (
        f"{c['screen_speedup']:.3f}x | {c['median_s'] * 1e6:.1f} us |"
        if c.get("screen_speedup") else f"refused: {c.get('refused')} | - |")
        for r in rows for c in r["tried"]]
    if cand:
        head = "| unit | candidate (tried in order) | screened speedup over the original | median |"
        md += ["", head, "|---|---|---|---|", *cand]
    print("\n".join(md))
    if args.md:
        args.md.write_text("\n".join(md) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
