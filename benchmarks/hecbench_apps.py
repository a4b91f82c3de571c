#!/usr/bin/env python3
"""HeCBench programs as `kernforge app` manifests: the application set of
docs/benchmarks/applications-h200.md.

What it does: writes one manifest per program (two datasets each where the program takes a
size, the program's own check, wall-clock time, operator matching then tuning) for binaries
built outside this repository, plus the input files the hotspot program reads. Nothing of
HeCBench is in this file: only program names, command lines and the patterns of what they
print.

Build the programs (HeCBench `src/<name>-cuda`, `make ARCH=sm_90`) and put each binary in one
directory as `<name>-cuda`, then::

    python benchmarks/hecbench_apps.py --bin /path/to/bins --out manifests
    for m in manifests/*.toml; do
        kernforge app run "$m" --out runs/apps/$(basename "$m" .toml)
    done
    kernforge app report runs/apps/* -o applications.md

The manifests say ``build = "true"``: the binaries are already built (on the development
machine, by HeCBench's own Makefiles); write the program's source directory and
``make ARCH=sm_90`` instead to let M1 build it.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

PASS = ("regex", r"^PASS$")
# name: (kernels filter or None, datasets, (check kind, pattern), stencil code?)
APPS: dict[str, tuple[str | None, list[str], tuple[str, str | None], bool]] = {
    "heat": ("*solve*", ["4096 2000", "2048 8000"], ("regex", r"Error \(L2norm\): (\S+)"), True),
    "heat2d": (None, ["4096 4096 40", "2048 2048 160"], PASS, True),
    "laplace3d": (None, ["256 256 256 20 1", "320 320 320 10 1"], ("regex", r"PASS"), True),
    # stencil3d prints no result and checks nothing (its dVm dump needs -DDUMP): only its exit
    # status can be checked, so M4 cannot catch a wrong output; M3's acceptance on the recorded
    # outputs and fresh inputs is then the only guard
    "stencil3d": (None, ["256 200", "128 800"], ("exit", None), True),
    "fdtd3d": (None, ["--dimx=96 --dimy=96 --timesteps=10",
                      "--dimx=128 --dimy=128 --dimz=128 --timesteps=10"], PASS, True),
    "jacobi": (None, [""], PASS, True),
    "convolution3D": (None, ["32 1 6 32 32 5 10", "32 1 6 32 32 5 20"], PASS, True),
    "stencil1d": (None, ["16777216 100", "33554432 50"], PASS, True),
    "hotspot": (None, ["512 2 200 data/temp_512 data/power_512 /tmp/hotspot_a.out",
                       "512 2 400 data/temp_512 data/power_512 /tmp/hotspot_b.out"],
                ("exit", None), True),
    "convolutionSeparable": (None, ["4096 4096 100", "2048 2048 200"], PASS, False),
    "softmax": (None, ["20000 784 0 50", "40000 784 0 25"], PASS, False),
    "matrix-rotate": (None, ["2000 20", "3000 10"], PASS, False),
    "floydwarshall": (None, ["512 20 16", "1024 5 16"], PASS, False),
    "nbody": (None, ["8000 5", "4000 10"], ("regex", r"Total Energy\s*:\s*(\S+)"), False),
    "adam": (None, ["10000 200 100", "100000 50 20"], ("regex", r"Checksum: (\S+) (\S+)"),
             False),
    "attention": (None, ["16384 1024 0 10", "16384 1024 1 10"], PASS, False),
}
# The program's own printed timer, for programs whose wall time is mostly a CPU reference
# computation (their GPU part would otherwise be out of scope whatever it gains): the time
# each prints for its GPU loop, per iteration. Every other program is timed by the wall clock.
TIMERS: dict[str, tuple[str, str]] = {
    "heat2d": (r"t =\s*(\S+) usec/iter", "us"),
    "laplace3d": (r"Average kernel execution time: (\S+) \(s\)", "s"),
    "stencil3d": (r"Average kernel execution time: (\S+) \(s\)", "s"),
}


def manifest(name: str, bindir: Path) -> str:
    kernels, runs, (kind, pattern), stencil = APPS[name]
    lines = [f'name = "{name}"', f'source = "{bindir}"',
             'build = "true"   # built beforehand with HeCBench\'s make ARCH=sm_90',
             "timeout_s = 300"]
    if kernels:
        lines.append(f'kernels = "{kernels}"')
    for i, args in enumerate(runs):
        lines += ["", "[[datasets]]", f'name = "d{i}"',
                  f'run = "./{name}-cuda{" " + args if args else ""}"']
    lines += ["", "[check]", f'kind = "{kind}"']
    if pattern:
        lines.append(f"pattern = '{pattern}'")
        if "(" in pattern.replace(r"\(", ""):
            lines.append("rel = 1e-4")
    if name in TIMERS:
        lines += ["", "[timer]", 'kind = "regex"', f"pattern = '{TIMERS[name][0]}'",
                  f'unit = "{TIMERS[name][1]}"']
    lines += ["", "[measure]", "rounds = 3", f"e2e_rounds = {5 if stencil else 3}", "",
              "[integrate]", 'strategies = ["operator", "tune"]']
    return "\n".join(lines) + "\n"


def hotspot_inputs(bindir: Path) -> None:
    """The temperature and power grids hotspot reads (HeCBench keeps its own under DVC)."""
    data = bindir / "data"
    data.mkdir(exist_ok=True)
    rng = random.Random(1)
    for fname, lo, hi in (("temp_512", 323.0, 343.0), ("power_512", 0.0, 0.002)):
        path = data / fname
        if not path.exists():
            path.write_text("".join(f"{rng.uniform(lo, hi):.6f}\n" for _ in range(512 * 512)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", type=Path, required=True, help="directory of <name>-cuda binaries")
    ap.add_argument("--out", type=Path, required=True, help="where to write the manifests")
    ap.add_argument("--only", nargs="*", help="these programs only")
    a = ap.parse_args()
    bindir = a.bin.resolve()
    if not bindir.is_dir():
        print(f"--bin {a.bin}: no such directory (the directory of <name>-cuda binaries)",
              file=sys.stderr)
        return 2
    names = a.only or list(APPS)
    unknown = [n for n in names if n not in APPS]
    if unknown:
        print(f"unknown program(s) {unknown}; known: {', '.join(APPS)}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    written = 0
    for name in names:
        if not (bindir / f"{name}-cuda").is_file():
            print(f"skipped {name}: no {bindir / (name + '-cuda')}", file=sys.stderr)
            continue
        if name == "hotspot":
            hotspot_inputs(bindir)
        (a.out / f"{name}.toml").write_text(manifest(name, bindir))
        print(f"wrote {a.out / (name + '.toml')}")
        written += 1
    if not written:
        print(f"no manifest written: none of the programs is in {bindir}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
