#!/usr/bin/env python3
"""One plain run of every dataset of the reviewed HeCBench manifests, before a batch: does each
program run from build/hec, does its own check pass, does its timer print, how long does it
take, and about how much device time the batch would give it.

    python benchmarks/hecbench_smoke.py [--bin DIR] [--json OUT.json] [NAME...]

What it does: for each manifest of benchmarks/hecbench/manifests (or the NAMEs), runs each
dataset's command once as ``kernforge app`` M1 would (its directory, the environment without
kernforge), with the manifest's time limit or ``--timeout``; judges the output with the
manifest's ``[check]`` (its pattern found; no reference to compare with yet) and ``[timer]``;
prints a table and the estimate ``(2 + rounds + 2 * e2e_rounds) * wall`` per program: M1's
reference run and rounds, one recorded run, M4's interleaved rounds with and without (M4 may
take up to 3x its rounds while inconclusive; tuning is extra). Exit status: 0 when every run
passed, 1 when one did not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from kernforge.apps.checks import printed_failure, regex_values, seconds
from kernforge.apps.manifest import load_manifest
from kernforge.apps.process import plain_env, run

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "benchmarks" / "hecbench" / "manifests"


def check_output(m, ran) -> str:  # type: ignore[no-untyped-def]
    """"ok", or why the run does not pass as M1 would see it."""
    if ran.returncode != 0:  # with its last words: "cannot run './heat-cuda': ..."
        last = next((ln.strip() for ln in reversed(ran.stderr.splitlines()) if ln.strip()), "")
        return f"{ran.ended}: {last[:160]}" if last else ran.ended
    if m.check.kind == "regex":
        failed = printed_failure(m.check, ran.output)
        if failed:
            return f"it printed {failed!r}"
        if regex_values(m.check, ran.output) is None:
            return "the check's pattern is not in the output"
    if m.timer.kind == "regex" and seconds(m.timer, ran) in (None, 0.0):
        return "the timer's pattern is not in the output (or reads 0)"
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="these programs only (default: every manifest)")
    ap.add_argument("--bin", type=Path, default=ROOT / "build" / "hec",
                    help="the directory of the NAME-cuda binaries (default build/hec)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run")
    ap.add_argument("--json", type=Path, help="write the rows here too")
    a = ap.parse_args()
    if not a.bin.is_dir():
        print(f"--bin {a.bin}: no such directory (benchmarks/hecbench/README.md builds it)",
              file=sys.stderr)
        return 2
    if a.json is not None and (a.json.is_dir() or not a.json.resolve().parent.is_dir()):
        print(f"--json {a.json}: not a file in an existing directory", file=sys.stderr)
        return 2
    names = a.names or sorted(p.stem for p in MANIFESTS.glob("*.toml"))
    missing = [n for n in names if not (MANIFESTS / f"{n}.toml").is_file()]
    if missing:
        print(f"no manifest for {missing} in {MANIFESTS}", file=sys.stderr)
        return 2
    rows, bad, total = [], 0, 0.0
    print("| program | dataset | wall s | timer s | result | batch estimate s |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            text = (MANIFESTS / f"{name}.toml").read_text()
            path = Path(tmp) / f"{name}.toml"
            path.write_text(re.sub(r"(?m)^source = .*$", f'source = "{a.bin.resolve()}"', text))
            m = load_manifest(path)
            walls = []
            for d in m.datasets:
                ran = run(d.argv(m.source), cwd=m.source, env=plain_env({**os.environ, **m.env}),
                          timeout_s=a.timeout or m.timeout_s)
                result = check_output(m, ran)
                bad += result != "ok"
                timed = seconds(m.timer, ran) if m.timer.kind == "regex" else None
                walls.append(ran.seconds)
                rows.append({"program": name, "dataset": d.name, "wall_s": ran.seconds,
                             "timer_s": timed, "result": result})
                est = (2 + m.measure.rounds + 2 * m.measure.e2e_rounds) * ran.seconds
                print(f"| {name} | {d.name} | {ran.seconds:.2f} | "
                      f"{'-' if timed is None else f'{timed:.4g}'} | {result} | {est:.0f} |",
                      flush=True)
            total += (2 + m.measure.rounds + 2 * m.measure.e2e_rounds) * sum(walls)
    print(f"\n{len(rows) - bad} of {len(rows)} runs passed; the batch's runs alone: about "
          f"{total / 60:.1f} min of device time (tuning and M4's extra rounds not counted)")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
